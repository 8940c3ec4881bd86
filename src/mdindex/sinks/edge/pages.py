"""Letting go of the shard's data pages that this process has read.

Edge maps its files into memory, and the pages a read touches stay in the
process's resident set while the shard is open. A pass over every point
keeps them all: verify at 545k points held 516 MB of payload pages and 240 MB
of sparse vectors (bench/scale.py, peak RSS 1,877 MB), and loading the shard
reads its write-ahead log whole (60 MB of a 54k-point store's 121 MB of
mapped pages). ``page_out`` unmaps this process's pages of the shard's stored
data (payloads, vectors) and of its log with MADV_DONTNEED: they stay in the
page cache, and a later read maps them again from there, or from the file.
Only shared mappings and read-only ones are let go: for those the file holds
every byte (a private writable mapping's own changes would be lost). The
indexes and ID trackers, which every filtered read consults, stay.
MADV_PAGEOUT, which drops the pages from the page cache too, made verify at
545k points 23 % slower (763 s against 619) as it read them from disk again.
Elsewhere than on Linux this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from mdindex.embedding.engines import give_back_heap

log = logging.getLogger(__name__)

MADV_DONTNEED = 4
# The folders whose files a pass reads once: a segment's stored data, and the log.
DATA_PARTS = ("payload_storage", "vector_storage", "wal")


@functools.cache  # once a process: verify asks for every group of documents
def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    madvise: Callable[[int, int, int], int] = fn
    return madvise


def data_mappings(folder: Path, maps: str) -> list[tuple[int, int]]:
    """The address ranges (start, end) in ``maps`` (/proc/PID/maps' text) of the
    stored-data files under ``folder`` that the files hold whole (shared, or
    read-only)."""
    prefix = str(folder.resolve()) + "/"
    out = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith(prefix):
            continue
        perms = fields[1]
        if "s" not in perms and "w" in perms:  # private and writable: its changes are its own
            continue
        parts = fields[5][len(prefix) :].split("/")
        if not any(p.startswith(DATA_PARTS) for p in parts):
            continue
        start, _, end = fields[0].partition("-")
        out.append((int(start, 16), int(end, 16)))
    return out


def page_out(folder: Path) -> int:
    """Unmap this process's pages of the stored data under ``folder`` (the
    page cache keeps them), and give the heap back (``give_back_heap``); how many
    mappings it let go. Never raises."""
    madvise = _madvise()
    if madvise is None:
        return 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            ranges = data_mappings(folder, f.read())
    except OSError as exc:
        log.debug("cannot read /proc/self/maps: %s", exc)
        return 0
    let_go = sum(madvise(start, end - start, MADV_DONTNEED) == 0 for start, end in ranges)
    give_back_heap()
    return let_go
