"""The edge store's index building: when it runs and what it leaves (giving way: test_optimize)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.sinks import Point
from mdindex.sinks.base import SearchFilter, StoreQuery
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


def structured(n: int, dim: int, seed: int) -> np.ndarray:
    """Vectors with 16 latent dimensions, as a model's are (few directions
    carry most of the variance), normalized."""
    basis = np.random.default_rng(0).standard_normal((16, dim)).astype(np.float32)
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, 16)).astype(np.float32) @ basis
    v += 0.3 * rng.standard_normal((n, dim)).astype(np.float32)
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float32)


def indexed(tmp_path: Path, n: int, **kw: Any) -> tuple[EdgeStore, np.ndarray]:
    """A store of ``n`` 384-d points, more than a segment searches exactly
    (full_scan_threshold: 10,000 KB of vectors, 6,666 of them), indexed."""
    store = EdgeStore("c", path=tmp_path / "c", batch_points=2048, index_min_points=1000, **kw)
    store.open()
    store.ensure_collection(384, sparse=False)
    vectors = structured(n, 384, seed=1)
    store.upsert(
        [
            Point(str(uuid.UUID(int=i + 1)), vectors[i].tolist(), {"root": "docs", "i": i})
            for i in range(n)
        ]
    )
    assert store.settle() is True
    return store, vectors


@pytest.mark.slow
@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_a_search_through_the_index_finds_what_an_exact_scan_finds(
    tmp_path: Path, quantization: str
) -> None:
    """Issue 37: above full_scan_threshold a search walks the HNSW graph (int8
    copies with the originals on disk, rescored, for quantization), filtered on
    its roots as mdindex asks; its top 10 are the exact top 10, and its scores
    the originals' cosines."""
    n = 8000
    store, vectors = indexed(
        tmp_path, n, quantization=quantization, on_disk_vectors=quantization == "int8"
    )
    assert store.describe()["indexed_points"] == n
    assert store.describe()["quantization"] == quantization
    queries = structured(20, 384, seed=2)
    found = 0
    for q in queries:
        exact = np.argsort(-(vectors @ q))[:10]
        hits = store.search(StoreQuery(10, dense=q.tolist(), filter=SearchFilter(roots=("docs",))))
        got = [h.payload["i"] for h in hits]
        assert got[0] == exact[0]
        scanned = store.search(StoreQuery(10, dense=q.tolist(), exact=True))
        assert [h.payload["i"] for h in scanned] == exact.tolist()  # the baseline
        found += len(set(got) & set(exact.tolist()))
        for h in hits:
            assert abs(h.score - float(vectors[h.payload["i"]] @ q)) < 1e-4
    assert found / (10 * len(queries)) >= 0.98
    store.close()
