"""What a local store's folder holds on disk: its size, and a signature of its
files that tells whether they changed since a run recorded it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


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
