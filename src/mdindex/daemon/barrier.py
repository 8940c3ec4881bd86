"""A barrier: a file opened in each watched root marks "now" in the kernel's
event stream, and once the watcher has handed on every such open, every event
before it has been handed on too. `status --wait` rests on it
(``Watcher.barrier``); this module picks and opens the files."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence

BARRIER_SEARCH = 5_000  # entries looked at per root for a barrier's file (~1 us each)


class Barrier:
    """Files opened to mark a moment in each watched root's event stream; ``passed``
    once watchdog has handed on every one of their opens."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.waiting = set(paths)
        self.passed = threading.Event()
        if not self.waiting:
            self.passed.set()


def file_to_open(root: str) -> str | None:
    """A regular file to open as a barrier, in the folder with the fewest
    subfolders a bounded look finds (a folder with none ends the look): its
    folder is asked for opens, and a scan opens each subfolder of it, so the
    root of a tree with thousands of folders would flood the kernel's queue
    again. None when there is no file."""
    folders, looked = [root], 0
    best: tuple[int, str] | None = None  # (subfolders, file)
    while folders and looked < BARRIER_SEARCH:
        folder = folders.pop(0)
        found, subfolders = "", 0
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    looked += 1
                    if entry.is_dir(follow_symlinks=False):
                        subfolders += 1
                        folders.append(os.path.join(folder, entry.name))
                    elif not found and entry.is_file(follow_symlinks=False):
                        found = os.path.join(folder, entry.name)
                    if looked >= BARRIER_SEARCH:
                        break
        except OSError:
            continue
        if found and (best is None or subfolders < best[0]):
            best = (subfolders, found)
            if subfolders == 0:
                break
    return best[1] if best else None


def is_file(path: str) -> bool:
    try:
        return bool(path) and stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def open_and_close(path: str) -> bool:
    """Open a file for reading and close it, reading nothing: the kernel's open
    event is the mark. Never follows a link, never waits on a FIFO, and gives
    up on anything that is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
