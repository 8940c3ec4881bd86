"""The settings' paths: the roots (``label=path``), the default folders, and
the checks every path setting passes when the settings load."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdindex.outside import decoded, quoted

_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
# Made absolute once, at load: "~/state" made a folder named "~" (a unit's
# Environment= expands nothing), and a relative folder moved with the working
# folder of whatever called the API next.
FOLDERS = ("state_dir", "cache_dir", "qdrant_path")


@dataclass(frozen=True)
class Root:
    label: str
    path: Path


def default_state_dir() -> Path:
    # systemd's StateDirectory= sets STATE_DIRECTORY; honour it first.
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mdindex"


def default_cache_dir() -> Path:
    """The ONNX export and measured choice (systemd's CacheDirectory= sets CACHE_DIRECTORY)."""
    if os.environ.get("CACHE_DIRECTORY"):
        return Path(os.environ["CACHE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mdindex"


def checked_path(value: Any, field: str) -> Any:
    """A path setting's value (a list of them for roots), checked; the folders
    (``FOLDERS``) made absolute, with ``~`` expanded."""
    _check(value, field)  # before expanding: "~\0" raised ValueError from pwd
    if field in FOLDERS and isinstance(value, Path):
        value = absolute(expand(value))
        _check(value, field)  # and as it will be used: HOME may be anything
    return value


def _check(value: Any, field: str) -> None:
    # "st\u0000x" raised ValueError at the first open, and a state_dir or
    # qdrant_path not UTF-8 UnicodeEncodeError where the state records it.
    for text in [str(v) for v in (value if isinstance(value, list) else [value])]:
        if "\0" in text:
            raise ValueError(f"a path cannot hold a NUL byte, not {quoted(text)}")
        if field in ("state_dir", "qdrant_path") and text != decoded(text):
            raise ValueError(f"the state records it: give a UTF-8 path, not {quoted(text)}")


def absolute(path: Path) -> Path:
    """``path`` from the working folder (no ``..`` taken out: a link before it
    decides where it leads); ValueError when that folder is gone."""
    try:
        return path.absolute()
    except OSError as exc:
        raise ValueError(
            f"{quoted(str(path))} is relative, and the working folder cannot be read "
            f"({exc.strerror})"
        ) from None


def expand(path: Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; ValueError for a user
    there is no home of (Python raised RuntimeError, an internal error)."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(f"{quoted(str(path))}: no home folder for its ~ (no such user)") from None


def parse_roots(items: list[str]) -> list[Root]:
    roots: list[Root] = []
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not _LABEL.match(label):
            path = item
            label = decoded(Path(item).resolve().name) or "root"  # caf\xe9, no surrogate
        try:
            roots.append(Root(label, expand(Path(path))))
        except ValueError as exc:
            raise ValueError(f"roots: {exc}") from None
    labels = [r.label for r in roots]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"roots: label {dupes[0]!r} is used twice; name them as label=path")
    # A file under two roots would be two documents, and a watch event would
    # update only one of them: overlapping roots are refused.
    resolved = [(r, r.path.resolve()) for r in roots]
    for i, (a, pa) in enumerate(resolved):
        for b, pb in resolved[i + 1 :]:
            if pa.is_relative_to(pb) or pb.is_relative_to(pa):
                raise ValueError(
                    f"roots: {a.label}={a.path} and {b.label}={b.path} overlap; "
                    "give folders that do not contain each other (use exclude to leave "
                    "a subfolder out)"
                )
    return roots
