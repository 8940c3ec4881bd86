"""JSON that mdindex reads from disk or the network (the versions catalog, the
backend measurement, the ONNX export's record, lock and guard files, an
embedding server's answers, questions files) goes through one bounded reader:
at most so many bytes, at most ``MAX_DEPTH`` levels, no NaN or Infinity
(nor a number past a float's range, such as 1e400), no key given twice in
an object (json kept the last one, silently), no lone surrogate in a string
(json made "\\ud800" a str that then failed when written as UTF-8). Each
caller says what a refusal means for it (a damaged cache is measured again, a
damaged catalog is a one-line error). And one writer: all or nothing, even
across a power cut."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from mdindex.outside import quoted

# Nothing mdindex writes nests past 8 levels; json's C parser recurses per
# level and `'[' * 100000` raised RecursionError from it, which no caller caught.
MAX_DEPTH = 64
# The state files mdindex writes are a few KB (a catalog of 50 versions: 60 KB).
MAX_FILE_BYTES = 16 << 20

# A string, or an unterminated one to the end of the text: requiring the
# closing quote rescanned to the end from every later quote ('"' + '\\"' * 20000
# took 4 s, quadratic). Possessive, so nothing is scanned twice.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


class JsonRefused(ValueError):
    """Text the bounded reader will not parse, with the one-line reason."""


def parse_json(
    raw: bytes | str, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """The value ``raw`` holds, or JsonRefused: over ``max_bytes``, nested deeper
    than ``max_depth``, NaN or Infinity, or not JSON."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise JsonRefused(f"more than {max_bytes:,} bytes")
    if nesting(data) > max_depth:
        raise JsonRefused(f"nested deeper than {max_depth} levels")
    floats = _finite if _may_overflow(data) else None
    try:
        value = json.loads(
            data, parse_constant=_no_constant, parse_float=floats, object_pairs_hook=_once
        )
    except JsonRefused:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise JsonRefused(f"not JSON: {str(exc).splitlines()[0][:120]}") from None
    if _SURROGATE.search(data) and not _encodable(value):
        raise JsonRefused("a string holds a lone surrogate (\\ud800 to \\udfff unpaired)")
    return value


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are each given once."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(f"key {quoted(key)} is given twice in an object")
            seen.add(key)
    return out


# A surrogate half, escaped or as the bytes json decodes with "surrogatepass":
# only text holding one can hold a lone one.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _encodable(value: Any) -> bool:
    """Every string in ``value`` (keys too) writes as UTF-8: a pair of halves
    is one character, a lone half is not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return True


def nesting(data: bytes) -> int:
    """How deep the brackets outside strings go: 0.09 s for a 42 MB answer of
    2,048 vectors, which json.loads parses in 0.4 s (Xeon with AMX)."""
    level = deepest = 0
    for b in _STRING.sub(b"", data).translate(None, _NOT_BRACKET):
        if b in b"[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > MAX_DEPTH << 4:
                    break  # deep enough to refuse; the rest need not be counted
        else:
            level -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# A number past a float's range (1e400, which json reads as inf) has an
# exponent of three digits or a run of over 200 digits. Only text holding one
# is parsed with each float checked: that costs 3.4x the parse (0.52 s against
# 0.16 s for an answer of 2,048 vectors, 16 MB), looking costs 0.06 s (Xeon
# with AMX).
_LONG_EXPONENT = re.compile(rb"[eE][-+]?0*[1-9][0-9]{2}")
_DIGITS_AS_ZERO = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))  # "0" and " "


def _may_overflow(data: bytes) -> bool:
    return bool(_LONG_EXPONENT.search(data)) or b"0" * 200 in data.translate(_DIGITS_AS_ZERO)


def _finite(text: str) -> float:
    """A JSON number with a fraction or an exponent; 1e400 is refused as
    Infinity is (json made it inf, which then passed as a number)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past a float's range")
    return value


def load_json(path: Path, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """A file's JSON value through the bounded reader; OSError or JsonRefused."""
    with os.fdopen(open_regular(path), "rb") as f:
        raw = f.read(max_bytes + 1)
    return parse_json(raw, max_bytes)


def open_regular(path: Path) -> int:
    """A file opened for reading, or OSError when it is no regular file: a FIFO
    in its place (``mkfifo STATE/mdindex.versions.json``) held every command in
    its open, waiting for a writer; a device is no file of ours either."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; {} when it is missing, unreadable, refused or
    not an object (what a cache wants: it is made again)."""
    try:
        data = load_json(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def private_dir(path: Path) -> None:
    """Create a folder, and each missing one above it, that only its owner can
    enter, whatever the umask; one that already exists is left as its owner
    set it. ``mkdir(mode=0o700, parents=True)`` gives the parents the umask's
    mode: under the common umask 002, a Python caller's cache folders came out
    group-writable, and the check that refuses such a cache refused the run
    that had just made them. A path ``lstat`` cannot see (a relative one
    while the working folder is not searchable) is climbed only to its top:
    ``Path(".").parent`` is ``Path(".")``, and the climb went round for ever,
    a list growing until memory ran out; ``mkdir`` then says why."""
    missing = []
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile: its owner's choice
            continue
        _owner_only(folder)


def _owner_only(folder: Path) -> None:
    """0700 on a folder just made: mkdir's mode is masked too, and under umask
    277 it came out 0500, the state never written into it. Set through the
    folder opened without following links, not on whatever its name points to
    by then; opened by path only (O_PATH), which needs no permission on it
    (under umask 477 the owner may not read it), then changed through
    /proc/self/fd."""
    flags = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    by_path = getattr(os, "O_PATH", 0) and os.path.isdir("/proc/self/fd")
    fd = os.open(folder, flags | (os.O_PATH if by_path else os.O_RDONLY))
    try:
        if by_path:
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
        else:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Written beside, flushed to disk, then renamed over, and the folder flushed:
    a reader sees the old file or the new one, never half of either. A missing
    folder is made private (``private_dir``)."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
