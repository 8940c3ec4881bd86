"""The edge sink's index building: when it runs, that it gives way, and what it leaves."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np

from mdindex.sinks import EdgeSink, Point


def filled(tmp_path: Path, n: int, dim: int, **kw: int) -> tuple[EdgeSink, np.ndarray]:
    sink = EdgeSink("c", path=tmp_path / "c", batch_points=2048, **kw)
    sink.open()
    sink.ensure_collection(dim)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    sink.upsert([Point(str(uuid.UUID(int=i + 1)), vectors[i].tolist(), {"i": i}) for i in range(n)])
    return sink, vectors


def test_small_store_is_never_indexed_and_searches_exactly(tmp_path: Path) -> None:
    sink, vectors = filled(tmp_path, 2000, 16, index_min_points=5000, indexing_threshold_kb=1)
    assert not sink.wants_index()
    assert sink.settle() is True
    assert sink.describe()["indexed_points"] == 0
    q = vectors[5]
    want = np.argsort(-(vectors @ q))[:10]
    assert [h.payload["i"] for h in sink.search(q.tolist(), 10)] == list(want)
    sink.close()


def test_index_is_built_in_a_child_and_points_survive(tmp_path: Path) -> None:
    sink, vectors = filled(tmp_path, 3000, 16, index_min_points=1000, indexing_threshold_kb=1)
    assert sink.wants_index()
    assert sink.settle() is True
    info = sink.describe()
    assert info["indexed_points"] == 3000
    assert not sink.wants_index()
    assert sink.count() == 3000
    # a tenth more unindexed points asks for another run
    sink.upsert(
        [Point(str(uuid.UUID(int=10_000 + i)), vectors[i].tolist(), {"i": i}) for i in range(400)]
    )
    assert sink.wants_index()
    hits = sink.search(vectors[7].tolist(), 1)
    assert hits[0].payload["i"] == 7
    sink.close()


def test_index_build_gives_way_and_loses_nothing(tmp_path: Path) -> None:
    # Large enough that building takes seconds on two cores.
    sink, vectors = filled(tmp_path, 20_000, 384, index_min_points=1000)
    started = time.monotonic()
    asked = []

    def idle() -> bool:
        asked.append(time.monotonic())
        return time.monotonic() - started < 0.5

    assert sink.settle(idle) is False
    assert time.monotonic() - started < 3
    assert len(asked) >= 3
    assert sink.count() == 20_000
    assert sink.describe()["indexed_points"] == 0
    hits = sink.search(vectors[3].tolist(), 1)
    assert hits[0].payload["i"] == 3
    assert sink.wants_index()
    sink.close()
