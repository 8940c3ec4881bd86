"""A search as qdrant-client asks it: ``query_points``' arguments (run on a real
local-mode collection) and the engine's filters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models as qm

from mdindex.embedding.sparse import Sparse
from mdindex.sinks import Point
from mdindex.sinks.base import SearchFilter, StoreQuery
from mdindex.sinks.qdrant import QdrantStore
from mdindex.sinks.qdrant.query import doc_filter, request, search_filter

DOCS: list[tuple[str, str, dict[str, Any]]] = [
    ("docs", "guide/a.md", {"draft": True, "tags": ["x", "y"]}),
    ("docs", "guide/b.md", {"draft": 1, "tags": "x"}),
    ("docs", "index.md", {"draft": False, "nested": {"level": "deep"}}),
    ("wiki", "guide/a.md", {"draft": "true", "tags": ["z"]}),
    ("wiki", "guide/a.md.bak", {"nested": {"level": "shallow"}}),
]
DIM = len(DOCS)


def pid(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def vector(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i] = 1.0
    v[0] += 0.1
    return v


@pytest.fixture
def store(tmp_path: Path) -> Iterator[QdrantStore]:
    s = QdrantStore("c", path=tmp_path / "qdrant")
    s.open()
    s.ensure_collection(DIM)
    s.upsert(
        [
            Point(pid(i), vector(i), {"root": r, "doc_path": p, "meta": m}, Sparse([i + 1], [1.0]))
            for i, (r, p, m) in enumerate(DOCS)
        ]
    )
    yield s
    s.close()


def ran(store: QdrantStore, k: int, args: dict[str, Any]) -> list[str]:
    result = store.client.query_points("c", limit=k, **args)
    return [str(p.id) for p in result.points]


def scrolled(store: QdrantStore, where: Any) -> set[str]:
    records, _ = store.client.scroll("c", scroll_filter=where, limit=100)
    return {str(r.id) for r in records}


def test_dense_and_sparse_requests(store: QdrantStore) -> None:
    dense = request(StoreQuery(2, dense=vector(3)), has_sparse=True)
    assert dense == {"query": vector(3), "query_filter": None}
    assert ran(store, 2, dense) == [pid(3), pid(0)]
    sparse = request(StoreQuery(1, sparse=Sparse([3], [1.0])), has_sparse=True)
    assert sparse == {
        "query": qm.SparseVector(indices=[3], values=[1.0]),
        "using": "bm25",
        "query_filter": None,
    }
    assert ran(store, 1, sparse) == [pid(2)]
    # a collection without the sparse vector: the dense half alone, or nothing to ask
    both = StoreQuery(2, dense=vector(4), sparse=Sparse([2], [1.0]))
    assert request(both, has_sparse=False) == {"query": vector(4), "query_filter": None}
    assert request(StoreQuery(1, sparse=Sparse([3], [1.0])), has_sparse=False) is None
    assert request(StoreQuery(1), has_sparse=True) is None


def test_a_hybrid_request_fuses_two_prefetches(store: QdrantStore) -> None:
    where = SearchFilter(roots=("docs", "wiki"))
    query = StoreQuery(3, dense=vector(4), sparse=Sparse([2], [1.0]), filter=where, candidates=4)
    args = request(query, has_sparse=True)
    assert args is not None and set(args) == {"prefetch", "query"}
    dense, sparse = args["prefetch"]
    assert (dense.limit, sparse.limit) == (4, 4) and sparse.using == "bm25"
    assert dense.filter == sparse.filter == search_filter(where)
    assert args["query"] == qm.FusionQuery(fusion=qm.Fusion.DBSF)
    assert set(ran(store, 3, args)[:2]) == {pid(4), pid(1)}  # the best of each kind
    rrf = request(
        StoreQuery(3, dense=vector(4), sparse=Sparse([2], [1.0]), fusion="rrf", rrf_k=7), True
    )
    assert rrf is not None and rrf["query"] == qm.RrfQuery(rrf=qm.Rrf(k=7))
    assert set(ran(store, 3, rrf)[:2]) == {pid(4), pid(1)}


def test_search_filter_selects_roots_path_prefix_and_frontmatter(store: QdrantStore) -> None:
    assert search_filter(SearchFilter()) is None
    assert scrolled(store, search_filter(SearchFilter(roots=("wiki",)))) == {pid(3), pid(4)}
    assert scrolled(store, search_filter(SearchFilter(path_prefix="guide/"))) == {
        pid(0),
        pid(1),
        pid(3),
        pid(4),
    }
    tags = search_filter(SearchFilter(where=(("tags", ("x", "z")),)))
    assert scrolled(store, tags) == {pid(0), pid(1), pid(3)}
    nested = search_filter(SearchFilter(where=(("nested.level", ("deep",)),)))
    assert scrolled(store, nested) == {pid(2)}
    # booleans are the engine's own here: True is not 1, False not 0
    assert scrolled(store, search_filter(SearchFilter(where=(("draft", (True,)),)))) == {pid(0)}
    assert scrolled(store, search_filter(SearchFilter(where=(("draft", (False,)),)))) == {pid(2)}
    every = SearchFilter(roots=("docs", "wiki"), path_prefix="guide/a", where=(("tags", ("z",)),))
    assert scrolled(store, search_filter(every)) == {pid(3)}
    hits = store.search(
        StoreQuery(5, dense=vector(1), filter=SearchFilter(where=(("draft", (1,)),)))
    )
    assert [h.id for h in hits] == [pid(1)]


def test_doc_filter_is_one_document_exactly(store: QdrantStore) -> None:
    assert scrolled(store, doc_filter("wiki", "guide/a.md")) == {pid(3)}
    assert scrolled(store, doc_filter("docs", "guide/a.md")) == {pid(0)}
    assert scrolled(store, doc_filter("docs", "guide")) == set()
    assert store.doc_points("wiki", "guide/a.md.bak") == {pid(4): ""}
