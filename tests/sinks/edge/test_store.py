"""The edge store's index building: when it runs and what it leaves (giving way: test_optimize)."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np

from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from mdindex.sinks.edge import EdgeStore


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


def test_small_store_is_never_indexed_and_searches_exactly(tmp_path: Path) -> None:
    store, vectors = filled(tmp_path, 2000, 16, index_min_points=5000, indexing_threshold_kb=1)
    assert not store.wants_index()
    assert store.settle() is True
    assert store.describe()["indexed_points"] == 0
    q = vectors[5]
    want = np.argsort(-(vectors @ q))[:10]
    assert [h.payload["i"] for h in store.search(StoreQuery(10, dense=q.tolist()))] == list(want)
    store.close()


def test_index_is_built_in_a_child_and_points_survive(tmp_path: Path) -> None:
    store, vectors = filled(tmp_path, 3000, 16, index_min_points=1000, indexing_threshold_kb=1)
    assert store.wants_index()
    assert store.settle() is True
    info = store.describe()
    assert info["indexed_points"] == 3000
    assert not store.wants_index()
    assert store.count() == 3000
    # a tenth more unindexed points asks for another run
    store.upsert(
        [Point(str(uuid.UUID(int=10_000 + i)), vectors[i].tolist(), {"i": i}) for i in range(400)]
    )
    assert store.wants_index()
    hits = store.search(StoreQuery(1, dense=vectors[7].tolist()))
    assert hits[0].payload["i"] == 7
    store.close()
