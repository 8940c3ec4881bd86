"""A search as qdrant-client asks it: ``query_points``' arguments (run on a real
local-mode collection), and booleans in its filters. The filters both engines
share are tests/sinks/test_contract.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models as qm

from mdindex.embedding.sparse import Sparse
from mdindex.sinks.base import SearchFilter, StoreQuery
from mdindex.sinks.qdrant import QdrantStore
from mdindex.sinks.qdrant.query import request, search_filter
from tests.sinks.filled import fill, pid, vector


@pytest.fixture
def store(tmp_path: Path) -> Iterator[QdrantStore]:
    s = QdrantStore("c", path=tmp_path / "qdrant")
    fill(s)
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


def test_booleans_are_the_engines_own(store: QdrantStore) -> None:
    """True is not 1, False not 0, in the engine's filter and in a search."""
    assert scrolled(store, search_filter(SearchFilter(where=(("draft", (True,)),)))) == {pid(0)}
    assert scrolled(store, search_filter(SearchFilter(where=(("draft", (False,)),)))) == {pid(2)}
    hits = store.search(
        StoreQuery(5, dense=vector(1), filter=SearchFilter(where=(("draft", (1,)),)))
    )
    assert [h.id for h in hits] == [pid(1)]
