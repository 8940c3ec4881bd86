"""Letting go of the shard's data pages a pass has read, and reading ahead what
searches read (mdindex.sinks.edge.pages)."""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from mdindex.embedding.engines import give_back_heap
from mdindex.embedding.sparse import Sparse
from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from mdindex.sinks.edge import EdgeStore, pages
from mdindex.sinks.edge.pages import (
    CHECK_EVERY,
    READ_AHEAD_PARTS,
    Pages,
    data_mappings,
    mapped_bytes,
    read_ahead,
)
from tests.sinks.edge.test_store import held_elsewhere


def resident_kb(folder: Path, part: str) -> int:
    """This process's resident KB of the files under ``folder`` whose path holds ``part``."""
    prefix, total, counted = str(folder.resolve()) + "/", 0, False
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                fields = line.split(maxsplit=5)
                name = fields[5].strip() if len(fields) == 6 else ""
                counted = name.startswith(prefix) and part in name[len(prefix) :]
            elif counted and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_a_pass_over_every_payload_gives_its_pages_back_and_loses_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c"
    store = EdgeStore("c", path=path, batch_points=512)
    store.ensure_collection(8)
    rng = random.Random(0)  # words that do not compress: the store keeps them as read
    texts = {
        str(uuid.UUID(int=i + 1)): " ".join(f"{rng.getrandbits(40):x}" for _ in range(400))
        for i in range(2000)
    }
    store.upsert([Point(pid, [1.0] * 8, {"text": text}) for pid, text in texts.items()])
    store.close()  # reopened: the pages now resident are the ones this pass reads

    store.open()
    read = {pid: payload["text"] for pid, payload, _ in store.scroll()}
    assert read == texts
    before = resident_kb(path, "payload_storage")
    assert before > 4_000  # 2,000 payloads of 4 KB, read: resident
    store.let_go()
    after = resident_kb(path, "payload_storage")
    assert after < before / 10, (before, after)
    # nothing lost: read again from the files, and still written to
    assert {pid: payload["text"] for pid, payload, _ in store.scroll()} == texts
    store.upsert([Point(str(uuid.UUID(int=99_999)), [1.0] * 8, {"text": "new"})])
    store.close()
    store.open()
    assert store.count() == 2001
    store.close()


def test_only_the_stored_data_and_log_under_the_shard_are_let_go(tmp_path: Path) -> None:
    shard = tmp_path / "c"
    seg = f"{shard.resolve()}/segments/0f41"
    maps = "\n".join(
        [
            f"7f0000000000-7f0000001000 r--s 00000000 fd:01 1 {seg}/payload_storage/page_0.dat",
            f"7f0000002000-7f0000004000 rw-s 00000000 fd:01 2 {seg}/vector_storage-bm25/page_0.dat",
            f"7f0000005000-7f0000006000 r--s 00000000 fd:01 3 {shard.resolve()}/wal/open-8",
            # the indexes and ID tracker every filtered read consults stay
            f"7f0000007000-7f0000008000 r--s 00000000 fd:01 4 {seg}/payload_index/x-map/page_0.dat",
            f"7f0000009000-7f000000a000 r--s 00000000 fd:01 5 {seg}/id_tracker.mappings",
            # a private writable mapping: its changes are not the file's
            f"7f000000f000-7f0000010000 rw-p 00000000 fd:01 7 {seg}/payload_storage/page_1.dat",
            # another shard whose name begins as this one's, and unnamed memory
            f"7f000000b000-7f000000c000 r--s 00000000 fd:01 6 {shard.resolve()}2/wal/open-1",
            "7f000000d000-7f000000e000 rw-p 00000000 00:00 0",
            "",
        ]
    )
    assert data_mappings(shard, maps) == [
        (0x7F0000000000, 0x7F0000001000),
        (0x7F0000002000, 0x7F0000004000),
        (0x7F0000005000, 0x7F0000006000),
    ]


def rss_anon_kb() -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


def test_the_heap_a_closed_shard_held_is_given_back(tmp_path: Path) -> None:
    """The engine frees what it held for a shard, and glibc kept it: after
    closing the shard, give_back_heap hands it back (a cold backfill of 6,000 files
    held 313 MB of anonymous memory after closing, 159 MB after the trim)."""
    path = tmp_path / "c"
    store = EdgeStore("c", path=path, batch_points=256)
    store.ensure_collection(64, sparse=True)
    rng = random.Random(0)
    points = [
        Point(
            str(uuid.UUID(int=i + 1)),
            [rng.random() for _ in range(64)],
            {"text": f"{rng.getrandbits(64):x} " * 20, "doc_path": f"d{i % 500}.md"},
            sparse=Sparse(sorted(rng.sample(range(100_000), 30)), [1.0] * 30),
        )
        for i in range(20_000)
    ]
    store.upsert(points)
    del points
    store.close()
    before = rss_anon_kb()
    give_back_heap()
    after = rss_anon_kb()
    assert before - after > 10_000, (before, after)  # KB
    store.open()
    assert store.count() == 20_000
    store.close()


def stored_shard(tmp_path: Path, n: int = 2000) -> tuple[EdgeStore, dict[str, str]]:
    """A closed shard of ``n`` points with 4 KB payloads that do not compress."""
    store = EdgeStore("c", path=tmp_path / "c", batch_points=512)
    store.ensure_collection(8)
    rng = random.Random(0)
    texts = {
        str(uuid.UUID(int=i + 1)): " ".join(f"{rng.getrandbits(40):x}" for _ in range(400))
        for i in range(n)
    }
    store.upsert(
        [Point(pid, [rng.random() for _ in range(8)], {"text": t}) for pid, t in texts.items()]
    )
    store.close()
    return store, texts


def _mincore() -> Callable[[int, int, ctypes.Array[ctypes.c_ubyte]], int]:
    fn = ctypes.CDLL(None, use_errno=True).mincore
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fn.restype = ctypes.c_int
    mincore: Callable[[int, int, ctypes.Array[ctypes.c_ubyte]], int] = fn
    return mincore


def cached_share(files: list[Path]) -> float:
    """The share of these files' pages in the page cache (mincore on a private
    mapping, which touches none of them)."""
    page, cached, total = mmap.PAGESIZE, 0, 0
    for path in files:
        size = path.stat().st_size if path.exists() else 0  # a journal comes and goes
        if not size:
            continue
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mm:
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            address = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            assert _mincore()(address, size, vec) == 0
            cached += sum(v & 1 for v in vec)
            total += pages
            del address
    return cached / total


def drop_cached(files: list[Path]) -> None:
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # the engine's journal comes and goes
            continue
        try:
            os.fsync(fd)  # a dirty page cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def wait_cached(files: list[Path], share: float) -> float:
    """The files' cached share once it reaches ``share`` (the kernel reads ahead
    in the background), or after 10 s."""
    deadline = time.monotonic() + 10
    while (now := cached_share(files)) < share and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def data_bytes(files: list[Path]) -> int:
    """What the files hold as data, holes and unwritten extents left out."""
    total = 0
    for path in files:
        with open(path, "rb") as f:
            total += sum(end - start for start, end in pages._data(f.fileno()))
    return total


def cached_bytes(files: list[Path]) -> int:
    return sum(int(cached_share([p]) * p.stat().st_size) for p in files if p.exists())


def wait_cached_bytes(files: list[Path], wanted: float) -> int:
    """The files' cached bytes once they reach ``wanted``, or after 10 s."""
    deadline = time.monotonic() + 10
    while (now := cached_bytes(files)) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def part_files(shard: Path, part: str) -> list[Path]:
    return sorted(
        p
        for segment in (shard / "segments").iterdir()
        for p in segment.rglob("*")
        if p.is_file() and p.relative_to(segment).parts[0].split(".")[0] == part
    )


def in_memory_fs(path: Path) -> bool:
    """Whether ``path`` lies on tmpfs or ramfs, whose pages never leave the page
    cache (so there is nothing to read ahead, nor to drop)."""
    target, best, kind = str(path.resolve()), "", ""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            mount = fields[4]
            if (target + "/").startswith(mount.rstrip("/") + "/") and len(mount) >= len(best):
                best, kind = mount, fields[fields.index("-") + 1]
    return kind in ("tmpfs", "ramfs")


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    if in_memory_fs(tmp_path):
        pytest.skip("the temporary folder is in memory (tmpfs): no page cache to fill")
    return tmp_path


def test_read_ahead_brings_what_searches_read_into_the_page_cache(disk: Path) -> None:
    store, texts = stored_shard(disk)
    shard = store.path
    payloads = part_files(shard, "payload_storage")
    every = [p for part in READ_AHEAD_PARTS for p in part_files(shard, part)]
    log = [p for p in shard.rglob("*") if p.is_file() and "wal" in p.parts]
    store.open()  # mapped, as in the daemon: reading ahead maps nothing more
    drop_cached(every + log)
    assert cached_share(payloads) < 0.2
    asked = read_ahead(shard, budget=1 << 40)
    # the payloads' data (2,000 of 4 KB), not the files' length (mostly holes)
    assert 8_000_000 < asked <= sum(p.stat().st_blocks * 512 for p in every)
    data = data_bytes(payloads)
    assert data > 8_000_000 and wait_cached_bytes(payloads, 0.9 * data) >= 0.9 * data
    assert cached_share(log) < 0.2  # the log is not what searches read
    assert resident_kb(shard, "payload_storage") < 100
    hits = store.search(StoreQuery(5, dense=[0.5] * 8))
    assert [h.payload["text"] for h in hits] == [texts[h.id] for h in hits]
    store.close()


def test_read_ahead_asks_for_a_files_data_not_its_holes(disk: Path) -> None:
    store, _ = stored_shard(disk, n=200)
    before = read_ahead(store.path, 1 << 40)
    folder = part_files(store.path, "payload_storage")[0].parent
    with open(folder / "page_97.dat", "wb") as f:
        f.truncate(256 << 20)  # 256 MB long, 1 MB of it written
        f.seek(100 << 20)
        f.write(os.urandom(1 << 20))
    assert (1 << 20) <= read_ahead(store.path, 1 << 40) - before <= (1 << 20) + (64 << 10)


def test_read_ahead_stops_before_the_part_that_would_pass_its_budget(disk: Path) -> None:
    store, _ = stored_shard(disk, n=500)
    assert read_ahead(store.path, budget=0) == 0
    held = {
        part: sum(p.stat().st_blocks * 512 for p in part_files(store.path, part))
        for part in READ_AHEAD_PARTS
    }
    first = READ_AHEAD_PARTS.index("payload_storage")
    budget = sum(held[part] for part in READ_AHEAD_PARTS[: first + 1])
    with_payloads = read_ahead(store.path, budget)
    without = read_ahead(store.path, budget - 1)
    assert 2_000_000 < with_payloads <= budget  # 500 payloads of 4 KB
    assert without < with_payloads - 2_000_000
    assert read_ahead(disk / "nothing", 1 << 40) == 0


def test_read_ahead_reads_nothing_through_a_link_nor_a_fifo(disk: Path) -> None:
    store, _ = stored_shard(disk, n=200)
    outside = disk / "outside"
    (outside / "payload_storage").mkdir(parents=True)
    data = outside / "payload_storage" / "page_0.dat"
    data.write_bytes(os.urandom(4 << 20))
    segments = store.path / "segments"
    folder = part_files(store.path, "payload_storage")[0].parent
    os.mkfifo(folder / "page_98.dat")  # opened for reading, it held read_ahead for ever
    (folder / "page_99.dat").symlink_to(data)
    (folder.parent / "payload_index" / "out").symlink_to(outside, target_is_directory=True)
    (segments / "zz-link").symlink_to(outside, target_is_directory=True)
    deep = folder.parent / "payload_index"
    for _ in range(60):  # rglob recursed (1,100 deep: RecursionError in the thread)
        deep = deep / "d"
    deep.mkdir(parents=True)
    drop_cached([data])
    assert read_ahead(store.path, 1 << 40) > 0
    # the store's segments folder itself a link
    moved = disk / "segments-elsewhere"
    segments.rename(moved)
    segments.symlink_to(moved, target_is_directory=True)
    assert read_ahead(store.path, 1 << 40) == 0
    time.sleep(0.2)
    assert cached_share([data]) < 0.1


def test_a_shard_is_read_ahead_once_for_each_set_of_segments(tmp_path: Path) -> None:
    store, _ = stored_shard(tmp_path, n=200)
    shard_pages = Pages(store.path, threading.RLock())
    assert shard_pages.read_ahead() > 0
    assert shard_pages.read_ahead() == 0  # the same segments: already asked for
    new = store.path / "segments" / "new" / "payload_storage"
    new.mkdir(parents=True)
    (new / "page_0.dat").write_bytes(os.urandom(8192))
    assert shard_pages.read_ahead() >= 8192  # a build replaced them


def test_a_search_lets_go_only_while_no_one_holds_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer or a close holds the store's lock: a mapping it moves between
    reading the maps and madvise would zero the memory put in its place."""
    store, texts = stored_shard(tmp_path)
    store.open()
    rng = random.Random(4)
    for _ in range(3):  # under the bound: mapped, kept
        found = store.search(StoreQuery(100, dense=[rng.random() for _ in range(8)]))
        assert [h.payload["text"] for h in found] == [texts[h.id] for h in found]
    mapped = resident_kb(store.path, "payload_storage")
    assert mapped > 1_000
    monkeypatch.setattr(pages, "LET_GO_BYTES", 0)
    monkeypatch.setattr(pages, "CHECK_EVERY", 1)
    with held_elsewhere(store):
        store.pages.searched()  # past the bound, but the store is held: not now
        assert resident_kb(store.path, "payload_storage") == mapped
    store.pages.searched()
    assert resident_kb(store.path, "payload_storage") < 100
    store.close()


def test_searches_let_their_pages_go_once_they_map_more_than_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "LET_GO_BYTES", 1 << 20)
    monkeypatch.setattr(pages, "CHECK_EVERY", 1)
    store, texts = stored_shard(tmp_path)
    store.open()
    rng = random.Random(1)
    held = []
    for _ in range(12):
        hits = store.search(StoreQuery(100, dense=[rng.random() for _ in range(8)]))
        assert len(hits) == 100 and all(h.payload["text"] == texts[h.id] for h in hits)
        held.append(resident_kb(store.path, "payload_storage"))
    # each search maps 100 payloads of 4 KB (400 KB and more): past 1 MB, let go
    assert min(held) < 100 and max(held) < 4_000, held
    store.close()


def test_the_pages_of_questions_asked_again_are_kept(tmp_path: Path) -> None:
    """Under the bound nothing is let go: questions asked again map nothing new
    (letting go every 32 searches cost warm searches 1.2 ms at 545k points)."""
    store, texts = stored_shard(tmp_path)
    store.open()
    rng = random.Random(3)
    questions = [[rng.random() for _ in range(8)] for _ in range(4)]
    for _ in range(3 * CHECK_EVERY):
        for q in questions:
            hits = store.search(StoreQuery(100, dense=q))
            assert [h.payload["text"] for h in hits] == [texts[h.id] for h in hits]
    assert resident_kb(store.path, "payload_storage") > 1_000
    store.close()


def test_mapped_bytes_counts_the_files_this_process_maps(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(8 << 20))
    before = mapped_bytes()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert sum(mm[i] for i in range(0, len(mm), mmap.PAGESIZE)) >= 0  # touch each page
        during = mapped_bytes()
        assert during - before >= 7 << 20
    assert during - mapped_bytes() >= 7 << 20  # (process-wide: others may map a little)
