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

``read_ahead`` is the other way round, for the daemon: it asks the kernel to
read the files a search reads at random into the page cache, without mapping
them, so the first searches after a start or an index build do not wait on
the disk. A search then maps each page it touches with its cached
neighbours, so ``Pages`` lets go of what searches mapped past a bound.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import mmap
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
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


def page_out(folder: Path, trim: bool = True) -> int:
    """Unmap this process's pages of the stored data under ``folder`` (the
    page cache keeps them), and give the heap back (``give_back_heap``) when
    ``trim``; how many mappings it let go. Never raises. The caller holds the
    store's lock: a mapping closed or moved between reading the maps and
    madvise would have zeroed whatever memory took its place."""
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
    if trim:
        give_back_heap()
    return let_go


# How far searches may grow the pages this process maps before they are let
# go (``Pages.searched``), looked at every CHECK_EVERY searches (reading
# /proc/self/statm). Each search maps the pages of its payloads and rescored
# vectors, and for a page the kernel has cached, its cached neighbours too:
# on the 100k-file store (545k points), 200 new questions grew the RSS by
# 214 MB, and by 1,031 MB with the store read ahead. Letting go takes about
# 3.7 ms and the pages stay in the page cache, but a search maps them again:
# warm on that store, p50 9.15 ms without letting go, 10.0 ms letting go every
# 256 searches, 10.4 ms every 32. So it goes by size: questions asked again
# map nothing new. The bound is on what the whole process maps (a version built
# beside the live one counts too); the indexes and ID trackers stay mapped.
# With 384 MB the daemon's RSS after bench/scale.py's searches at 100k files
# was 899 to 910 MB in three runs and 1,148 and 1,169 in two (anonymous 549 MB
# and mapped 620 in the last): where the searches stop in the sawtooth decides,
# and the top of it (the idle daemon's 570 MB, the indexes' mapped pages and
# 384 MB) came within 40 MB of the 1.2 GB goal. 256 keeps it under 1.1 GB.
LET_GO_BYTES = 256 << 20
CHECK_EVERY = 8

# What a search reads at random, in the order read ahead: the ID trackers, the
# graph, the payload indexes, each hit's payload, the keyword index's postings,
# the original vectors that rescore the quantized ones. On the 100k-file store
# (bench/scale.py, AMD EPYC; 100 new questions in process, files dropped from
# the page cache first), hybrid p50 was 14.9 and 13.7 ms without reading ahead,
# 10.2 and 9.7 ms with (warm 9.9 and 8.4, 9.6 and 10.3). Up to the payloads
# only: 11.5 and 12.1 ms; through the daemon that was 18.1 and 16.2 ms against
# 19.8 and 19.2, as the vectors rescoring reads are then read from disk.
READ_AHEAD_PARTS = (
    "id_tracker",
    "mutable_id_tracker",
    "vector_index",
    "payload_index",
    "payload_storage",
    "vector_index-bm25",
    "vector_storage",
)
# posix_fadvise(WILLNEED) reads no more a call than the device's readahead
# window or its largest request, whichever is larger (Linux's
# force_page_cache_ra): 8 MB here, 128 KB by default. A file takes a call a step.
_STEP = 128 << 10
# How deep below a segment's part the files read ahead lie (the engine's
# layout is part/file or part/index/file): a deeper tree is not the engine's.
_DEPTH = 3


def read_ahead(folder: Path, budget: int) -> int:
    """Ask the kernel to read the files under ``folder``'s segments that
    searches read at random into the page cache (``READ_AHEAD_PARTS``, in that
    order), their data only (a preallocated file is mostly holes), and stop
    before the part that would take what they hold on disk past ``budget``.
    The bytes asked for. Never raises; nothing is read through a link, nor
    what is not a regular file."""
    if not hasattr(os, "posix_fadvise"):
        return 0
    files: dict[str, list[tuple[str, int]]] = {part: [] for part in READ_AHEAD_PARTS}
    for segment in _entries(str(folder / "segments")):
        if segment.is_dir(follow_symlinks=False):
            for entry in _entries(segment.path):
                part = entry.name.split(".")[0]
                if part in files:
                    files[part].extend(_regular_files(entry, _DEPTH))
    held = asked = 0
    for part in READ_AHEAD_PARTS:
        held += sum(n for _, n in files[part])
        if held > budget:
            break
        for path, _ in files[part]:
            asked += _will_need(path)
    return asked


def _entries(folder: str) -> list[os.DirEntry[str]]:
    """The folder's entries by name; none where it cannot be read, or is a link."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return []
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


def _regular_files(entry: os.DirEntry[str], depth: int) -> list[tuple[str, int]]:
    """The regular files at ``entry`` or under it (not through links, at most
    ``depth`` folders down), with the bytes they hold on disk."""
    try:
        if entry.is_file(follow_symlinks=False):
            return [(entry.path, entry.stat(follow_symlinks=False).st_blocks * 512)]
        if depth and entry.is_dir(follow_symlinks=False):
            return [f for e in _entries(entry.path) for f in _regular_files(e, depth - 1)]
    except OSError:
        pass
    return []


def _will_need(path: str) -> int:
    try:  # no FIFO, device or link: only what the listing saw as a regular file
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open(path, flags)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        asked = 0
        for start, end in _data(fd):
            for offset in range(start, end, _STEP):
                os.posix_fadvise(fd, offset, min(_STEP, end - offset), os.POSIX_FADV_WILLNEED)
            asked += end - start
        return asked
    except OSError:
        return 0
    finally:
        os.close(fd)


def _data(fd: int) -> Iterator[tuple[int, int]]:
    """The (start, end) ranges of the file that hold data: WILLNEED over a hole
    fills the page cache with zeros (a 200-point shard is 1.1 MB on disk and
    101 MB long). The whole file where the filesystem cannot tell."""
    size = os.fstat(fd).st_size
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: only a hole is left
                yield offset, size
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        offset = end


def mapped_bytes() -> int:
    """The bytes of files this process has mapped in (statm's shared pages);
    0 where it cannot be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[2]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


def available_memory() -> int:
    """The kernel's estimate of the memory free for new use (MemAvailable), in
    bytes; 0 where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Pages:
    """One shard's pages in this process: what searches mapped let go once the
    process maps LET_GO_BYTES more than after the last let-go (looked at every
    CHECK_EVERY searches), and what searches read read ahead when asked, once
    for each set of segment folders (a build replaces them), within half of
    the memory available. ``lock``: the store's, held by whatever closes or
    writes the shard."""

    def __init__(self, folder: Path, lock: threading.RLock) -> None:
        self.folder = folder
        self._lock = lock
        self._searches = 0
        self._mapped = mapped_bytes()  # after the last let-go
        self._read_for: list[str] | None = None
        self._reading = threading.Lock()
        self._wanted = False  # asked while a read ran: it looks again

    def searched(self) -> None:
        self._searches += 1  # a count lost between threads only delays a look
        if self._searches % CHECK_EVERY or mapped_bytes() <= self._mapped + LET_GO_BYTES:
            return
        if self._lock.acquire(blocking=False):  # else a writer is at it: next time
            try:
                self._let_go(trim=False)  # the heap's trim (5 to 7 ms) is the writer's
            finally:
                self._lock.release()

    def let_go(self) -> None:
        with self._lock:
            self._let_go(trim=True)

    def _let_go(self, trim: bool) -> None:
        page_out(self.folder, trim)
        self._mapped = mapped_bytes()

    def read_ahead(self) -> int:
        """The bytes asked for: 0 when the segments are those read ahead last
        time, or while another thread reads ahead (it looks again after)."""
        self._wanted = True
        asked = 0
        while self._wanted and self._reading.acquire(blocking=False):
            try:
                while self._wanted:
                    self._wanted = False
                    asked += self._read_new()
            finally:
                self._reading.release()
        return asked

    def _read_new(self) -> int:
        segments = [e.name for e in _entries(str(self.folder / "segments"))]
        if not segments or segments == self._read_for:
            return 0
        asked = read_ahead(self.folder, available_memory() // 2)
        self._read_for = segments
        log.info("asked the kernel to read %d MB of %s ahead", asked >> 20, self.folder)
        return asked
