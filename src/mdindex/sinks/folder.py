"""A local store's folder under a running process: whether it can be written,
and what to do with a store that cannot (``chattr -R +i``, a read-only mount);
its size on disk, and a signature of its files that tells whether they changed
since a run recorded it."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def unwritable(folder: Path) -> str | None:
    """The first file or folder under ``folder`` this process may not write
    (immutable, on a read-only mount, or another user's), relative; None when
    all are writable. About 0.3 ms for an edge shard, flat from 1k to 100k points
    (61 to 71 files, bench/store_walk.py), so it runs before every write."""
    for dirpath, _, names in os.walk(folder):
        for path in (dirpath, *(os.path.join(dirpath, n) for n in names)):
            if not os.access(path, os.W_OK) and os.path.exists(path):
                return os.path.relpath(path, folder)
    return None


def check_writable(folder: Path) -> None:
    """Refuse a write to a local store with a file it may not write, as an error
    the retry loop understands. Both engines write through memory maps (edge's
    segments and WAL, SQLite's shared memory under qdrant-client): after
    ``chattr -R +i`` on the folder under a running daemon, its next write
    killed it with SIGBUS (exit 135, no log line), as the kernel refuses a
    write fault on an immutable file's map. Between this check and the write
    the window stays open; neither engine offers a way to close it."""
    blocked = unwritable(folder)
    if blocked is not None:
        what = "the store folder" if blocked == "." else blocked
        raise OSError(
            errno.EPERM,
            f"Permission denied writing {what} (immutable, read-only or another user's)",
        )


def left_open(handle: Any, folder: Path) -> bool:
    """True when the store at ``folder`` cannot be written, ``handle`` (its
    open shard or client) then kept alive for the life of the process. Closing
    one whose files turned immutable writes through its maps: SIGBUS, measured
    for edge's close, flush, ``del`` and the interpreter's exit alike, and for
    qdrant-client's SQLite on close. Every update is already in the engine's
    log, and the OS unmaps the files at exit without writing."""
    if unwritable(folder) is None:
        return False
    log.warning("store %s cannot be written: left open, not flushed", folder)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(handle))
    return True


def folder_bytes(folder: Path) -> int:
    """Disk blocks in use under ``folder``, in bytes (0 when it is missing)."""
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def files_signature(folder: Path) -> str:
    """Sizes and mtimes of every file under ``folder``; "absent" when it is
    missing, "" when a file cannot be looked at (no signature: nothing is taken
    as unchanged). Offline status reads it: a link loop in the store made it
    exit 2, and a name that is not UTF-8 an internal error."""
    if not folder.is_dir():
        return "absent"
    parts: list[bytes] = []
    for dirpath, _, names in sorted(os.walk(folder)):
        for name in sorted(names):
            try:
                st = os.stat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            except OSError:
                return ""
            parts.append(os.fsencode(name) + f":{st.st_size}:{st.st_mtime_ns}".encode())
    if not parts:
        return "absent"
    return hashlib.sha256(b"/".join(parts)).hexdigest()[:32]
