"""Values from outside (files, servers, requests) at the one place each kind
enters: a number checked before it is used as one, text escaped before a
terminal shows it, a URL's password masked before a log does (``redact``),
and a key read from the environment or a systemd credential (``secret``)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import unicodedata
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
        raise ValueError(f"{what} must be a number, not {_kind(value)}")
    bounds = f"{_bound(lo)} to {_bound(hi)}"
    try:
        out = float(value)
    except OverflowError:  # an int past float's range
        raise ValueError(f"{what} must be {bounds}") from None
    if not math.isfinite(out) or not lo <= out <= hi:
        raise ValueError(f"{what} must be {bounds}, not {out:.6g}")
    return out


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
        return integer(int(value), what, lo, hi)
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
