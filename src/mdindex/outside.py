"""Values from outside (files, servers, requests) at the one place each kind
enters: a number (or a time) checked before it is used as one, text escaped before a
terminal shows it, a value quoted in an error line cut short (``quoted``), a
URL's password masked before a log does (``redact``), and a key read from the
environment or a systemd credential (``secret``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Control, format, surrogate, private-use and unassigned characters, and the
# line and paragraph separators: ESC]0;...BEL set a terminal's title and
# ESC[2J cleared its screen when `search` printed a document's text raw.
_UNSHOWN = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def number(value: Any, what: str, lo: float, hi: float) -> float:
    """A finite number within [lo, hi] (a JSON number, or its text); ValueError
    in one line otherwise. ``bool`` is not a number here."""
    if isinstance(value, str) and len(value) <= 40:
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        # text by what it says ('many'), anything else by its kind (bool, list)
        seen = quoted(value, 40) if isinstance(value, str) else _kind(value)
        raise ValueError(f"{what} must be a number, not {seen}")
    bounds = f"{_bound(lo)} to {_bound(hi)}"
    try:
        out = float(value)
    except OverflowError:  # an int past float's range
        raise ValueError(f"{what} must be {bounds}") from None
    if not math.isfinite(out) or not lo <= out <= hi:
        raise ValueError(f"{what} must be {bounds}, not {out:.6g}")
    return out


def stamp(value: Any, what: str) -> str:
    """A time as mdindex records one (ISO 8601, ``planning.now_iso``), or "" for
    none; ValueError in one line otherwise: a number (1e300), a year past 9999,
    a 4 KB string."""
    if value == "":
        return ""
    if isinstance(value, str) and len(value) <= 40:
        with contextlib.suppress(ValueError):
            dt.datetime.fromisoformat(value)
            return value
    raise ValueError(f"{what} must be an ISO 8601 time, not {quoted(value)}")


def _bound(value: float) -> str:
    """2147483648 as it is, not 2.14748e+09."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def integer(value: Any, what: str, lo: int, hi: int) -> int:
    """A whole number within [lo, hi] (2.0 is 2; 2.5 is refused); ValueError in one line."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not lo <= value <= hi:
            shown = str(value) if abs(value) < 10**20 else "a larger number"
            raise ValueError(f"{what} must be {lo} to {hi}, not {shown}")
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) <= 40:
        try:
            whole = int(value)
        except ValueError:  # "+-5", "²": digits that int() refuses, told as text below
            whole = None
        if whole is not None:
            return integer(whole, what, lo, hi)
    out = number(value, what, lo, hi)
    if not out.is_integer():
        raise ValueError(f"{what} must be a whole number, not {out:.6g}")
    return int(out)


def shown(value: Any) -> Any:
    """Strings with control, format and line-break characters escaped as \\uXXXX,
    in any structure: a document's text or a target decoded from %1b can neither
    drive the terminal nor start a line of its own (CI reads FILE:LINE: lines)."""
    if isinstance(value, str):
        if value.isprintable():  # the common case, in C
            return value
        return "".join(
            f"\\u{ord(c):04x}" if unicodedata.category(c) in _UNSHOWN else c for c in value
        )
    if isinstance(value, dict):
        return {shown(k): shown(v) for k, v in value.items()}  # keys too: a language's code
    if isinstance(value, list):
        return [shown(v) for v in value]
    return value


# The most of a value from outside an error line quotes: a 4,000-digit number or
# a 4 KB mode once made a 4,079-character line.
QUOTED_CHARS = 80


def quoted(value: Any, limit: int = QUOTED_CHARS) -> str:
    """A value from outside as an error line quotes it: its repr, at most
    ``limit`` characters of that and then how long the value was ('xxx…
    (4,000 characters)); an integer past 100 digits by its size (repr
    refuses one of over 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 332:
        return f"a number of about {int(value.bit_length() * math.log10(2)):,} digits"
    if isinstance(value, str):
        return cut(repr(value[: limit + 1]), limit, len(value))
    text = repr(value)
    return cut(text, limit, len(text))


def cut(text: str, limit: int = QUOTED_CHARS, size: int | None = None) -> str:
    """``text`` escaped as ``shown`` does, and at most ``limit`` characters of
    it, then how long it was (``size``, by default its length)."""
    size = len(text) if size is None else size
    out: str = shown(text[: limit + 1])
    if len(out) <= limit and size <= limit:
        return out
    return f"{out[:limit]}… ({size:,} characters)"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# Up to the last "@" before another URL: a password may hold "@", "/", "?", "#", " ".
_USERINFO = re.compile(r"(?<=://)(?:[^\s/?#@:]*:(?:(?!://)[^\n])*@|\S*@)")


def redact(text: str) -> str:
    """Text fit for logs and status: the ``user:password@`` of any URL in it masked."""
    return _USERINFO.sub("***@", text)


def secret(env: str, credential: str) -> str | None:
    """A key from the environment, else a systemd credential: never in argv or a config file."""
    if os.environ.get(env):
        return os.environ[env]
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds:
        path = Path(creds) / credential
        if path.is_file():
            return path.read_text(encoding="utf-8").strip() or None
    return None


def string(value: Any, name: str) -> str:
    """A string argument, as it is; ValueError in one line for any other type."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string")
    return value


def flag(value: Any, name: str) -> bool:
    """A boolean, or the text of one (true/false, yes/no, 1/0)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")
    raise ValueError(f"{name} must be true or false")


def strings(value: Any, name: str) -> tuple[str, ...]:
    """One string or several (any iterable but a mapping) as a tuple: ``roots="docs"``
    is one root, not the roots d, o, c and s."""
    if not isinstance(value, str | Mapping | bytes):
        with contextlib.suppress(TypeError):
            value = tuple(value)
    return tuple(_strings(value, name))


def _strings(value: Any, name: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{name} must be a string or a list of strings")


def decoded(name: str) -> str:
    """A file name as UTF-8 can hold it: its undecodable bytes (surrogates,
    as os.fsdecode gives them) as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
