"""A search as qdrant-edge asks it: the request ``plan`` makes (run on a real
shard), and the clauses tested on the hits instead (``matches``), because the
bindings turn True into the integer 1. The filters both engines share are
tests/sinks/test_contract.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdindex.embedding.sparse import Sparse
from mdindex.sinks.base import SearchFilter, StoreQuery
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.query import HNSW_EF, HNSW_EF_LEAST, hnsw_ef, matches, plan
from tests.sinks.filled import fill, pid, vector


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EdgeStore]:
    s = EdgeStore("c", path=tmp_path / "c")
    fill(s)
    yield s
    s.close()


def ran(store: EdgeStore, request: Any) -> list[str]:
    return [str(p.id) for p in store.shard.query(request)]


def test_a_dense_search_asks_for_k_nearest_through_the_index(store: EdgeStore) -> None:
    query = StoreQuery(2, dense=vector(3))
    request, run, checked = plan(query, has_sparse=True)
    assert run is query and checked == ()
    assert request.limit == 2 and request.prefetches == [] and request.filter is None
    assert request.params.hnsw_ef == HNSW_EF
    assert ran(store, request) == [pid(3), pid(0)]
    # an HNSW search never looks at fewer candidates than it returns
    wide = plan(StoreQuery(HNSW_EF + 100, dense=vector(3), candidates=300), has_sparse=True)[0]
    assert wide.params.hnsw_ef == HNSW_EF + 100


def test_each_of_several_graphs_is_searched_with_its_share_of_the_candidates() -> None:
    assert hnsw_ef(0) == hnsw_ef(1) == HNSW_EF
    assert hnsw_ef(2) == max(HNSW_EF // 2, HNSW_EF_LEAST) and hnsw_ef(40) == HNSW_EF_LEAST
    dense = plan(StoreQuery(2, dense=vector(3)), has_sparse=True, graphs=2)[0]
    hybrid = StoreQuery(3, dense=vector(4), sparse=Sparse([2], [1.0]), candidates=4)
    fused = plan(hybrid, has_sparse=True, graphs=2)[0]
    assert dense.params.hnsw_ef == fused.prefetches[0].params.hnsw_ef == hnsw_ef(2) < HNSW_EF
    wide = plan(StoreQuery(3, dense=vector(3), candidates=900), has_sparse=True, graphs=2)[0]
    assert wide.params.hnsw_ef == 900  # never fewer than it is to return


def test_one_graph_takes_hnsw_ef_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """No floor for one graph: bench/edge_hnsw.py sweeps HNSW_EF from 128."""
    from mdindex.sinks.edge import query as edge_query

    monkeypatch.setattr(edge_query, "HNSW_EF", 128)
    assert hnsw_ef(1) == 128 and hnsw_ef(2) == 128


def test_sparse_and_hybrid_searches(store: EdgeStore) -> None:
    sparse = plan(StoreQuery(1, sparse=Sparse([3], [1.0])), has_sparse=True)[0]
    assert sparse.params is None and ran(store, sparse) == [pid(2)]
    hybrid = StoreQuery(3, dense=vector(4), sparse=Sparse([2], [1.0]), candidates=4)
    request = plan(hybrid, has_sparse=True)[0]
    assert [p.limit for p in request.prefetches] == [4, 4] and request.limit == 3
    assert "Dbsf" in repr(request.query)
    assert set(ran(store, request)[:2]) == {pid(4), pid(1)}  # the best of each kind
    rrf = plan(
        StoreQuery(3, dense=vector(4), sparse=Sparse([2], [1.0]), fusion="rrf", rrf_k=7), True
    )
    assert "Rrf" in repr(rrf[0].query) and "7" in repr(rrf[0].query)
    # a store without the sparse vector: the dense half alone, or nothing to ask
    dense_only = plan(hybrid, has_sparse=False)[0]
    assert dense_only.prefetches == [] and ran(store, dense_only)[0] == pid(4)
    assert plan(StoreQuery(3, sparse=Sparse([2], [1.0])), has_sparse=False)[0] is None
    assert plan(StoreQuery(3), has_sparse=True)[0] is None


def test_boolean_clauses_are_tested_on_more_hits(store: EdgeStore) -> None:
    where = (("draft", (True,)), ("tags", ("x",)))
    query = StoreQuery(2, dense=vector(0), filter=SearchFilter(roots=("docs",), where=where))
    request, run, checked = plan(query, has_sparse=True)
    assert checked == (("draft", (True,)),)
    assert run.k == 20 and request.limit == 20
    assert run.filter == SearchFilter(roots=("docs",), where=(("tags", ("x",)),))
    # the engine is asked the rest: both documents tagged x in docs, 1 and True alike
    assert set(ran(store, request)) == {pid(0), pid(1)}
    assert (
        plan(StoreQuery(200, dense=vector(0), filter=SearchFilter(where=where)), True)[1].k == 1000
    )
    # the store keeps the hits the clause holds for, as many as were asked
    hits = store.search(StoreQuery(2, dense=vector(1), filter=SearchFilter(where=where[:1])))
    assert [h.id for h in hits] == [pid(0)]
    falsy = store.search(
        StoreQuery(5, dense=vector(0), filter=SearchFilter(where=(("draft", (False,)),)))
    )
    assert [h.id for h in falsy] == [pid(2)]


@pytest.mark.parametrize(
    ("meta", "where", "expected"),
    [
        ({"draft": True}, [("draft", (True,))], True),
        ({"draft": 1}, [("draft", (True,))], False),  # True is not 1
        ({"draft": True}, [("draft", (1,))], False),
        ({"draft": False}, [("draft", (False,))], True),
        ({"draft": 0}, [("draft", (False,))], False),
        ({"weight": 1.0}, [("weight", (1,))], False),  # nor is 1.0
        ({"tags": ["a", True]}, [("tags", (True,))], True),  # a list: any item
        ({"tags": ["a", 1]}, [("tags", (True,))], False),
        ({"tags": "a"}, [("tags", ("b", "a"))], True),  # any of the values
        ({"a": {"b": True}}, [("a.b", (True,))], True),  # a nested key
        ({"a": True}, [("a.b", (True,))], False),
        ({}, [("draft", (True,))], False),
        (None, [("draft", (True,))], False),
        ({"draft": True, "x": "y"}, [("draft", (True,)), ("x", ("z",))], False),  # all must hold
        ({"draft": True, "x": "y"}, [("draft", (True,)), ("x", ("y",))], True),
        ({"draft": True}, [], True),
    ],
)
def test_matches_is_qdrants_rule_with_types(
    meta: dict[str, Any] | None, where: list[tuple[str, tuple[Any, ...]]], expected: bool
) -> None:
    assert matches({"meta": meta}, where) is expected
