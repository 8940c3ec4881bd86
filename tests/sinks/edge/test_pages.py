"""Letting go of the shard's data pages a pass has read (mdindex.sinks.edge.pages)."""

from __future__ import annotations

import random
import re
import uuid
from pathlib import Path

from mdindex.embedding.engines import give_back_heap
from mdindex.embedding.sparse import Sparse
from mdindex.sinks import Point
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.pages import data_mappings


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
