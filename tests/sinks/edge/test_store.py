"""The edge store's index building: when it runs and what it leaves (giving way: test_optimize)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.sinks import Point
from mdindex.sinks.base import INDEXED_KEYS, SearchFilter, StoreQuery
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.shard import HNSW_EF_CONSTRUCT, HNSW_M


@contextmanager
def held_elsewhere(store: EdgeStore) -> Iterator[None]:
    """The store's lock held by another thread, as an index build or a writer
    holds it, until the block ends."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._retry.lock:
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert taken.wait(30)
        yield
    finally:
        release.set()
        thread.join()


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
    assert store.describe()["dense_search"].startswith("exact scan (no index yet")
    q = vectors[5]
    want = np.argsort(-(vectors @ q))[:10]
    assert [h.payload["i"] for h in store.search(StoreQuery(10, dense=q.tolist()))] == list(want)
    store.close()


def test_index_is_built_in_a_child_and_points_survive(tmp_path: Path) -> None:
    store, vectors = filled(tmp_path, 3000, 16, index_min_points=1000, indexing_threshold_kb=1)
    assert store.wants_index()
    assert store.settle() is True
    info = store.describe()
    assert info["indexed_points"] == 3000 and info["dense_search"] == "HNSW index"
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
    # closed, with its count known (offline status), it says the same from its files
    opened = store.describe()
    store.close()
    assert store.describe(n) == opened and opened["segments"] >= 1
    assert store.describe() == {"engine": "qdrant-edge"}
    # while its index is built (the lock held) its files change: it says nothing more
    with held_elsewhere(store):
        assert store.describe(n) == {"engine": "qdrant-edge"}
    store.close()


def tied_recall(got: list[Any], exact: list[Any]) -> float:
    """The share of ``got``'s top 10 that the exact search scores at least as
    high as its own 10th (which of equal scores make a top 10 is the engine's
    choice: two exact hybrid searches differ in some)."""
    scores = {h.id: h.score for h in exact}
    tenth = exact[9].score
    return sum(scores.get(h.id, -1.0) >= tenth - 1e-6 for h in got[:10]) / 10


@pytest.mark.slow
def test_a_hybrid_search_through_the_index_finds_the_exact_hybrids_top_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: hybrid search through the graph, as mdindex asks it (the
    dense half with hnsw_ef = query.HNSW_EF), finds what the same search with
    every vector scanned finds, on vectors with many near-ties (each the sum
    of 20 of 2,048 random word vectors, as bench/edge_hnsw.py's stand-in);
    looking at 10 candidates it finds less."""
    from mdindex.embedding.sparse import Sparse
    from mdindex.sinks.edge import query as plan

    n, dim = 8000, 384
    rng = np.random.default_rng(5)
    words = rng.standard_normal((2048, dim)).astype(np.float32)

    def made(k: int) -> tuple[np.ndarray, list[Sparse]]:
        picked = [rng.choice(2048, size=20, replace=False) for _ in range(k)]
        v = np.stack([words[p].sum(axis=0) for p in picked])
        v += 1.0 * rng.standard_normal((k, dim)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v, [Sparse(sorted(int(i) for i in p), [1.0] * 20) for p in picked]

    vectors, sparse = made(n)
    store = EdgeStore("c", path=tmp_path / "c", batch_points=2048, index_min_points=1000)
    store.ensure_collection(dim, sparse=True)
    store.upsert(
        [
            Point(str(uuid.UUID(int=i + 1)), vectors[i].tolist(), {"root": "docs"}, sparse[i])
            for i in range(n)
        ]
    )
    try:
        assert store.settle() is True and store.describe()["indexed_points"] == n
        queries, asked = made(30)
        where = SearchFilter(roots=("docs",))

        def recall(candidates: int) -> float:
            scores = []
            for q, s in zip(queries, asked, strict=True):
                got, exact = (
                    store.search(
                        StoreQuery(10, q.tolist(), s, where, candidates=candidates, exact=scan)
                    )
                    for scan in (False, True)
                )
                scores.append(tied_recall(got, exact))
            return sum(scores) / len(scores)

        wide = recall(100)
        monkeypatch.setattr(plan, "HNSW_EF", 10)
        narrow = recall(10)
        assert wide >= 0.98 and narrow < wide, (wide, narrow)
    finally:
        store.close()


def test_a_hybrid_int8_store_keeps_int8_copies_and_scores_with_the_originals(
    tmp_path: Path,
) -> None:
    """Issue 37: a store with sparse vectors builds its index, and with
    quantization = int8 the index's segment records the int8 copies; hybrid and
    dense searches answer with the originals' cosines (rescored)."""
    import json

    from mdindex.embedding.sparse import Sparse

    n = 400
    store = EdgeStore(
        "c",
        path=tmp_path / "c",
        index_min_points=100,
        indexing_threshold_kb=1,
        quantization="int8",
        on_disk_vectors=True,
    )
    store.ensure_collection(16, sparse=True)
    vectors = structured(n, 16, seed=3)
    store.upsert(
        [
            Point(
                str(uuid.UUID(int=i + 1)),
                vectors[i].tolist(),
                {"i": i, "root": "docs" if i % 2 else "other"},
                Sparse([i], [1.0]),
            )
            for i in range(n)
        ]
    )
    try:
        assert store.settle() is True
        configs = [
            json.loads(p.read_text())["config"]["vector_data"][""]
            for p in (store.path / "segments").glob("*/segment.json")
        ]
        indexed = [c for c in configs if c["index"]["type"] == "hnsw"]
        assert indexed and all(
            c["quantization_config"]["scalar"]["type"] == "int8" for c in indexed
        )
        # the graph is built as the shard records it (shard.HNSW_M, HNSW_EF_CONSTRUCT)
        assert all(
            (c["index"]["options"]["m"], c["index"]["options"]["ef_construct"])
            == (HNSW_M, HNSW_EF_CONSTRUCT)
            for c in indexed
        )
        assert store.describe()["indexed_points"] == n
        # the keyword indexes filters use are on disk too, through the build
        schema = store.shard.info().payload_schema
        assert {k: str(schema[k].params.memory) for k in INDEXED_KEYS} == dict.fromkeys(
            INDEXED_KEYS, "Memory.Cold"
        )
        q = vectors[11]
        hits = store.search(StoreQuery(5, dense=q.tolist(), sparse=Sparse([11], [1.0])))
        assert hits[0].payload["i"] == 11
        dense = store.search(StoreQuery(5, dense=q.tolist()))
        assert [h.payload["i"] for h in dense] == np.argsort(-(vectors @ q))[:5].tolist()
        for h in dense:
            assert abs(h.score - float(vectors[h.payload["i"]] @ q)) < 1e-4
        odd = [i for i in np.argsort(-(vectors @ q)).tolist() if i % 2][:5]
        docs = store.search(StoreQuery(5, dense=q.tolist(), filter=SearchFilter(roots=("docs",))))
        assert [h.payload["i"] for h in docs] == odd  # filtered through the index on disk
    finally:
        store.close()


@pytest.mark.slow
def test_the_real_models_hybrid_store_builds_its_index(tmp_path: Path, real_embedder: Any) -> None:
    """Issue 37 with the real model and BM25: the points of a synced tree are
    in the dense index after settle (a graph on disk, indexed_points all of
    them, none left to build), and every point's own vector finds it first."""
    import shutil

    from mdindex.sinks.edge.optimize import has_graph
    from tests.conftest import build_indexer, settings_for, small_edge_store

    root = tmp_path / "docs"
    shutil.copytree(Path(__file__).resolve().parents[3] / "examples" / "docs", root)
    settings = settings_for(tmp_path, [str(root)], store="edge")
    store = small_edge_store(settings)
    with build_indexer(settings, real_embedder, store=store) as indexer:
        indexer.backfill()
        n = store.count()
        assert n >= 10 and store.has_sparse
        assert store.wants_index() and store.describe()["indexed_points"] == 0
        assert indexer.settle() is True
        assert has_graph(store.path) and store.describe()["indexed_points"] == n
        assert not store.wants_index()
        for pid, payload, vector in store.scroll(payload=["text"], with_vectors=True):
            assert vector is not None
            top = store.search(StoreQuery(1, dense=vector))[0]
            assert top.id == pid and top.score > 0.999, payload["text"][:60]


def _can_chattr() -> bool:
    import shutil
    import subprocess
    import tempfile

    if not shutil.which("chattr"):
        return False
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(["chattr", "+i", folder], capture_output=True)
        subprocess.run(["chattr", "-i", folder], capture_output=True)
    return done.returncode == 0


chattr = pytest.mark.skipif(not _can_chattr(), reason="needs chattr +i (root on ext4 or xfs)")


def immutable(folder: Path, on: bool) -> None:
    import subprocess

    subprocess.run(["chattr", "-R", "+i" if on else "-i", str(folder)], check=True)


# Run as a process of its own: SIGBUS would take pytest with it.
IMMUTABLE = """
import json, subprocess, sys, uuid
from pathlib import Path
from mdindex.errors import StoreUnavailable
from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from mdindex.sinks.edge import EdgeStore

store = EdgeStore("c", path=Path(sys.argv[1]), retry_budget_s=0.2)
store.open()
vectors = json.loads(sys.argv[2])
subprocess.run(["chattr", "-R", "+i", sys.argv[1]], check=True)
error = ""
try:
    store.upsert([Point(str(uuid.UUID(int=99)), vectors[0], {"i": 99})])
except StoreUnavailable as exc:
    error = str(exc)
hits = store.search(StoreQuery(k=1, dense=vectors[3]))
store.close()
print(json.dumps({"error": error, "hit": hits[0].payload["i"]}))
"""


@chattr
def test_an_immutable_shard_is_refused_searched_and_closed_without_sigbus(tmp_path: Path) -> None:
    """`chattr -R +i` under an open shard: edge's next write through its maps, or
    its close, killed the process with SIGBUS. Now the write is a StoreUnavailable
    naming the cause, searches go on, and the process ends normally."""
    import json
    import subprocess
    import sys

    store, vectors = filled(tmp_path, 20, 8)
    store.close()
    try:
        done = subprocess.run(
            [sys.executable, "-c", IMMUTABLE, str(store.path), json.dumps(vectors.tolist())],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        immutable(store.path, False)
    assert done.returncode == 0, done.stderr  # -7 (SIGBUS) before
    got = json.loads(done.stdout)
    assert "Permission denied writing the store folder (immutable" in got["error"]
    assert got["hit"] == 3
    reopened = EdgeStore("c", path=tmp_path / "c")
    assert reopened.count() == 20  # the refused point never written
    reopened.close()
