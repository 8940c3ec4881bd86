"""Building an edge shard's search index out of the way: when it pays off
(``wants_index``), and a child process that builds it or gives way at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.embedding.sparse import Sparse
from mdindex.errors import LockError
from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.optimize import (
    WRITTEN_FILE,
    add_written,
    graphs,
    has_graph,
    optimize,
    segment_points,
    unindexed,
    wants_index,
    written,
)
from mdindex.sinks.edge.shard import load, read_config
from tests.daemon.running import wait_for


def filled(tmp_path: Path, n: int, dim: int, **kw: int) -> tuple[EdgeStore, np.ndarray]:
    store = EdgeStore("c", path=tmp_path / "c", batch_points=2048, **kw)
    store.open()
    store.ensure_collection(dim)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store.upsert(
        [Point(str(uuid.UUID(int=i + 1)), vectors[i].tolist(), {"i": i}) for i in range(n)]
    )
    return store, vectors


def more(store: EdgeStore, vectors: np.ndarray, n: int, start: int) -> None:
    store.upsert(
        [Point(str(uuid.UUID(int=start + i)), vectors[i].tolist(), {"i": i}) for i in range(n)]
    )


def with_threshold(config: dict[str, Any], kb: int | None) -> dict[str, Any]:
    return {**config, "optimizers": {**config["optimizers"], "indexing_threshold": kb}}


def test_an_index_is_wanted_for_enough_points_enough_of_them_unindexed(tmp_path: Path) -> None:
    # 1 kB: 16 16-d vectors
    store, vectors = filled(tmp_path, 200, 16, index_min_points=100, indexing_threshold_kb=1)
    try:
        info, config = store.shard.info(), read_config(store.path)
        assert (info.points_count, info.indexed_vectors_count) == (200, 0)
        assert unindexed(store.path, 200) == 200 and written(store.path) == 200
        assert config["optimizers"]["indexing_threshold"] == 1
        assert wants_index(store.path, 200, config, 100) and wants_index(
            store.path, 200, config, 200
        )
        assert store.wants_index()
        assert not wants_index(store.path, 200, config, 201)  # fewer points than index_min_points
        # a segment under the optimizer's threshold stays plain: with Qdrant's
        # default of 10 MB, under 160,000 16-d vectors
        assert not wants_index(store.path, 200, with_threshold(config, 10_000), 100)
        assert not wants_index(
            store.path, 200, with_threshold(config, None), 100
        )  # the default then
        assert not wants_index(store.path, 200, {**config, "optimizers": None}, 100)
        assert store.settle() is True
        assert store.shard.info().indexed_vectors_count == 200
        assert has_graph(store.path) and written(store.path) == 0
        assert unindexed(store.path, 200) == 0
        assert not wants_index(store.path, 200, config, 100)
        # a tenth of the store unindexed asks for another build, less does not
        more(store, vectors, 20, start=1000)
        assert unindexed(store.path, 220) == 20
        assert not wants_index(store.path, 220, config, 100)  # 20 of 220
        more(store, vectors, 10, start=2000)
        assert unindexed(store.path, 230) == 30
        assert wants_index(store.path, 230, config, 100)  # 30 of 230
    finally:
        store.close()


def test_a_hybrid_store_is_indexed_though_edge_counts_its_sparse_vectors(tmp_path: Path) -> None:
    """Issue 37: edge counts a sparse vector as indexed from its first write, so a
    hybrid store said it was indexed, was never optimized, and every search
    scanned. Its points outside the dense index are mdindex's own count."""
    n = 300
    store = EdgeStore("c", path=tmp_path / "c", index_min_points=100, indexing_threshold_kb=1)
    store.ensure_collection(16, sparse=True)
    vectors = np.random.default_rng(1).standard_normal((n, 16)).astype(np.float32)
    store.upsert(
        [
            Point(str(uuid.UUID(int=i + 1)), vectors[i].tolist(), {"i": i}, Sparse([i + 1], [1.0]))
            for i in range(n)
        ]
    )
    try:
        info = store.shard.info()
        # what misled wants_index: every sparse vector counted, no graph on disk
        assert (info.points_count, info.indexed_vectors_count) == (n, n)
        assert not has_graph(store.path)
        assert store.describe()["indexed_points"] == 0
        assert store.wants_index()
        assert store.settle() is True
        assert has_graph(store.path)
        assert store.describe()["indexed_points"] == n
        assert not store.wants_index()
        hits = store.search(StoreQuery(1, dense=vectors[9].tolist()))
        assert hits[0].payload == {"i": 9}
    finally:
        store.close()
    # the count survives the shard's closing; a shard with a graph and no count is indexed
    assert written(store.path) == 0
    (store.path / WRITTEN_FILE).unlink()
    assert unindexed(store.path, n) == 0


@pytest.mark.parametrize(
    "content", ["", "{not json", "[1, 2]", '{"points": -3}', '{"points": true}', '{"points": "7"}']
)
def test_an_unreadable_count_of_points_written_is_no_count(tmp_path: Path, content: str) -> None:
    """A count file that is not ours is none: a shard with no graph is then all
    outside its index, one with a graph all inside it."""
    (tmp_path / WRITTEN_FILE).write_text(content)
    assert written(tmp_path) is None
    assert unindexed(tmp_path, 50) == 50  # no segments, no graph
    add_written(tmp_path, 4)
    assert written(tmp_path) == 4


def test_optimize_builds_the_index_of_a_closed_shard(tmp_path: Path) -> None:
    store, vectors = filled(tmp_path, 500, 16, indexing_threshold_kb=1)
    store.close()
    assert optimize(store.path, lambda: False) is True
    shard = load(store.path)
    try:
        assert shard.info().indexed_vectors_count == 500
    finally:
        shard.close()
    store.open()
    try:
        assert store.count() == 500
        hits = store.search(StoreQuery(1, dense=vectors[42].tolist()))
        assert hits[0].payload == {"i": 42}
    finally:
        store.close()


@pytest.mark.serial
def test_optimize_gives_way_at_once_and_leaves_the_shard_as_it_was(tmp_path: Path) -> None:
    store, vectors = filled(tmp_path, 500, 16, indexing_threshold_kb=1)
    store.close()
    started = time.monotonic()
    assert optimize(store.path, lambda: True) is False
    assert time.monotonic() - started < 2
    store.open()
    try:
        assert store.count() == 500 and store.shard.info().indexed_vectors_count == 0
        assert store.search(StoreQuery(1, dense=vectors[7].tolist()))[0].payload == {"i": 7}
    finally:
        store.close()


def test_a_build_that_fails_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, _ = filled(tmp_path, 50, 16, indexing_threshold_kb=1)
    try:  # still open here: the child cannot have it
        with caplog.at_level(logging.WARNING, logger="mdindex.sinks.edge.optimize"):
            assert optimize(store.path, lambda: False) is False
        assert "index build failed" in caplog.text
        assert store.count() == 50 and store.shard.info().indexed_vectors_count == 0
    finally:
        store.close()


def test_a_build_the_kernel_killed_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child killed by a signal it was not sent here (the OOM killer's SIGKILL)
    is a warning, not a silent give-way."""
    from mdindex.sinks.edge import optimize as building

    store, _ = filled(tmp_path, 50, 16, indexing_threshold_kb=1)
    store.close()
    monkeypatch.setattr(
        building, "_OPTIMIZE", "import os, time\ntime.sleep(0.5)\nos.kill(os.getpid(), 9)\n"
    )
    with caplog.at_level(logging.INFO, logger="mdindex.sinks.edge.optimize"):
        assert optimize(store.path, lambda: False) is False
        assert "index build killed by signal 9 (out of memory?)" in caplog.text
        caplog.clear()
        assert optimize(store.path, lambda: True) is False  # killed here: a give-way
    assert "gave way" in caplog.text and "signal" not in caplog.text


@pytest.mark.serial
def test_index_build_gives_way_and_loses_nothing(tmp_path: Path) -> None:
    # Large enough that building takes seconds on two cores.
    store, vectors = filled(tmp_path, 20_000, 384, index_min_points=1000)
    # What settle pays besides the build: the store closed and opened again
    # (the baseline, measured here: beside other work it took seconds).
    started = time.monotonic()
    store.close()
    store.open()
    reopen_s = time.monotonic() - started
    asked: list[float] = []

    def idle() -> bool:  # idle for 0.5 s from the first question, then busy
        asked.append(time.monotonic())
        return asked[-1] - asked[0] < 0.5

    assert store.settle(idle) is False
    # from busy to settle's return: the child killed at once and the store
    # opened again, not the build (about 10 s here) run to its end
    assert time.monotonic() - asked[-1] < 2 * reopen_s + 1
    assert len(asked) >= 3
    assert store.count() == 20_000
    assert store.describe()["indexed_points"] == 0
    hits = store.search(StoreQuery(1, dense=vectors[3].tolist()))
    assert hits[0].payload["i"] == 3
    assert store.wants_index()
    store.close()


def within(seconds: float, call: Any) -> Any:
    """``call()``'s answer, failing (not hanging) when it takes longer."""
    import threading

    answer: list[Any] = []
    thread = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{call} still waits after {seconds} s"
    return answer[0]


@pytest.mark.parametrize("planted", ["fifo", "deep", "link"])
def test_a_count_or_segment_record_that_is_not_ours_is_none_at_once(
    tmp_path: Path, planted: str
) -> None:
    """Found by a review: the count file and each segment's segment.json were
    read with open(): a FIFO in either's place held status (its new
    dense_search key reads the segments) and every sync for ever, and
    '[' * 100000 raised RecursionError out of json; the count's temporary
    file was written through a link, or waited on as a FIFO."""

    shard = tmp_path / "shard"
    segment = shard / "segments" / "s1"
    segment.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text('{"points": 1}')
    for path in (shard / WRITTEN_FILE, segment / "segment.json", shard / f"{WRITTEN_FILE}.tmp"):
        if planted == "fifo":
            os.mkfifo(path)
        elif planted == "deep":
            path.write_text("[" * 100_000)
        else:
            path.symlink_to(outside)
    assert within(5, lambda: written(shard)) == (1 if planted == "link" else None)
    assert within(5, lambda: has_graph(shard)) is False
    assert within(5, lambda: unindexed(shard, 50)) == 50
    within(5, lambda: add_written(shard, 3))
    assert written(shard) == (4 if planted == "link" else 3)
    assert outside.read_text() == '{"points": 1}'


# Segments over 1 KB of vectors are indexed (the default, 10 MB, is 160,000 16-d vectors).
SMALL = {"indexing_threshold_kb": 1}


def test_segments_are_built_as_they_fill_and_never_merged_past_the_bound(tmp_path: Path) -> None:
    """Issue 37: a cold backfill writes every point before its first quiet
    moment, so one build took them all (13.3 GB at 1.09M points). With a bound,
    the store asks the writes to wait for a build once a segment is full
    (``seal_due``; the sync core's writes ask after each group), and the
    optimizer merges none past it."""
    store = EdgeStore("c", path=tmp_path / "c", index_min_points=100, segment_points=300, **SMALL)
    assert not store.seal_due()  # no shard yet
    store.ensure_collection(16)
    config = read_config(store.path)
    assert segment_points(config) == 288  # 18 KB of 16-d vectors: Qdrant counts in KB
    vectors = np.random.default_rng(3).standard_normal((1000, 16)).astype(np.float32)
    try:
        more(store, vectors[:250], 250, start=1)
        assert not store.seal_due() and written(store.path) == 250  # under the bound
        more(store, vectors[250:500], 250, start=251)
        assert store.seal_due() and store.settle() is True
        assert graphs(store.path) == 1 and written(store.path) == 0 and not store.seal_due()
        more(store, vectors[500:1000], 500, start=501)
        assert store.seal_due() and store.settle() is True
        assert graphs(store.path) == 2 and written(store.path) == 0  # beside, not merged
        assert store.count() == 1000
        for i in (0, 499, 500, 999):  # each point is its own nearest, in either graph
            assert store.search(StoreQuery(1, dense=vectors[i].tolist()))[0].payload == {
                "i": i % 250 if i < 500 else i - 500
            }
        # in a store of over 10 segments, a whole one outside is enough, not a tenth
        add_written(store.path, 290)
        unbounded = {**config, "optimizers": {**config["optimizers"], "max_segment_size": None}}
        assert wants_index(store.path, 5000, config, 100)
        assert not wants_index(store.path, 5000, unbounded, 100)  # waits for 500
    finally:
        store.close()


def test_without_a_bound_one_graph_holds_every_segment(tmp_path: Path) -> None:
    """The baseline of the test above, and a store made before the bound: the
    writes never wait, and a build merges everything into one graph."""
    store = EdgeStore("c", path=tmp_path / "c", index_min_points=100, segment_points=0, **SMALL)
    store.ensure_collection(16)
    assert segment_points(read_config(store.path)) == 0
    vectors = np.random.default_rng(3).standard_normal((1000, 16)).astype(np.float32)
    try:
        more(store, vectors[:500], 500, start=1)
        assert not store.seal_due() and written(store.path) == 500
        assert store.settle() is True and graphs(store.path) == 1
        more(store, vectors[500:], 500, start=501)
        assert not store.seal_due() and written(store.path) == 500
        assert store.settle() is True and graphs(store.path) == 1 and store.count() == 1000
    finally:
        store.close()


def test_a_build_that_gave_way_is_not_asked_for_at_every_batch(tmp_path: Path) -> None:
    """Only once a tenth more is written: the writes would otherwise start a
    build and kill it again after each group while searches keep coming."""
    store = EdgeStore("c", path=tmp_path / "c", index_min_points=100, segment_points=300, **SMALL)
    store.ensure_collection(16)
    vectors = np.random.default_rng(4).standard_normal((1000, 16)).astype(np.float32)
    try:
        more(store, vectors[:400], 400, start=1)
        assert store.seal_due() and store.settle(lambda: False) is False  # gave way
        assert graphs(store.path) == 0 and store.count() == 400
        more(store, vectors[400:430], 30, start=401)  # 430: under 1.1 x 400
        assert not store.seal_due()
        more(store, vectors[430:700], 270, start=431)
        assert store.seal_due() and store.settle() is True
        assert graphs(store.path) == 1 and store.count() == 700
        assert store.search(StoreQuery(1, dense=vectors[650].tolist()))[0].payload == {"i": 220}
        # built: the bound is the bound again, not 1.1 x what was outside at the give-way
        more(store, vectors[700:990], 290, start=701)
        assert written(store.path) == 290 and store.seal_due()
    finally:
        store.close()


PARENT = """
import sys
from pathlib import Path
from mdindex.sinks.edge import optimize as building

# the build as it runs, then held: the shard loaded (its lock taken), a mark
# for the test with the child's pid, and minutes more of work
building._OPTIMIZE = (
    "import os, sys, time\\n"
    "from qdrant_edge import EdgeShard\\n"
    "shard = EdgeShard.load(sys.argv[1])\\n"
    f"open({sys.argv[2]!r}, 'w').write(str(os.getpid()))\\n"
    "time.sleep(300)\\n"
)
building.optimize(Path(sys.argv[1]), lambda: False)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_build_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A daemon SIGKILLed outside systemd leaves no build behind holding the
    shard's lock: the store opens again at once, its points all there."""
    store, _ = filled(tmp_path, 50, 16)
    store.close()
    mark = tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(store.path), str(mark)])

    def marked() -> bool:
        assert parent.poll() is None, "the parent ended before its build began"
        return mark.exists() and bool(mark.read_text())

    def opens() -> bool:
        try:
            load(store.path).close()
        except LockError:
            return False
        return True

    child = 0
    try:
        wait_for(marked, 60, "the build to load the shard")
        child = int(mark.read_text())
        assert not opens()  # held while it builds
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # the build holds the lock for 300 s if it lives
        wait_for(opens, 10, "the lock to come free: the build outlived its parent")
    finally:
        for pid in (p for p in (parent.pid, child) if p):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        parent.wait()
    store.open()
    try:
        assert store.shard.info().points_count == 50
    finally:
        store.close()


def test_a_search_during_a_build_makes_it_give_way_and_is_answered(tmp_path: Path) -> None:
    """The daemon builds (settle) with the store closed while its HTTP thread
    searches: the search waited for the whole build without telling it, then
    loaded the shard the build had opened again, found it locked (by its own
    process) for 10 s, and failed (a daemon's search at 100,000 files)."""
    import threading

    store = EdgeStore("c", path=tmp_path / "c", index_min_points=100, segment_points=0, **SMALL)
    store.ensure_collection(16)
    vectors = np.random.default_rng(5).standard_normal((3000, 16)).astype(np.float32)
    more(store, vectors, 3000, start=1)
    settled: list[bool] = []
    build = threading.Thread(target=lambda: settled.append(store.settle()))
    try:
        build.start()
        wait_for(lambda: store._shard is None or not build.is_alive(), 30, "the build to start")
        assert build.is_alive(), "the build ended before a search could arrive"
        hits = store.search(StoreQuery(1, dense=vectors[1234].tolist()))
        build.join(60)
        assert hits[0].payload == {"i": 1234} and store.count() == 3000
        assert settled == [False] and graphs(store.path) == 0  # it gave way to the search
    finally:
        build.join(60)
        store.close()
