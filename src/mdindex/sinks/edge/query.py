"""A search as qdrant-edge asks it: the request, its filter, and the clauses the
bindings cannot express, tested on the hits instead."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from mdindex.embedding.sparse import SPARSE_NAME
from mdindex.sinks.base import SearchFilter, StoreQuery

# Queries against the HNSW index look at this many candidates. bench/edge_hnsw.py
# at 100k points (stand-in vectors with many near-ties, the graph of
# shard.HNSW_M and HNSW_EF_CONSTRUCT; Intel Xeon with AMX, 2 cores): hybrid
# recall@10 against exact hybrid search 0.962 / 0.984 / 0.988 / 0.994 with 256 /
# 512 / 1,024 / 2,048 (ties the engine orders as it likes counted), for 3.1 /
# 4.8 / 7.2 / 10.9 ms of CPU; exact search takes 20.5 ms. Recall falls as the
# store grows (0.976 at 50k, 0.934 at 200k with 512 on the old graph).
HNSW_EF = 1024
# In a store of several graphs (segments of bounded size, optimize.SEGMENT_POINTS)
# each is searched with its share of HNSW_EF, no fewer than this: each graph
# is smaller, and the nearest ten are spread over them. At 545,526 points in
# graphs of 400k and 145k (bench/segments.py, Intel Xeon with AMX): recall@10
# against exact 0.999 to 1.0 for dense and hybrid with 512 each, as with 1,024,
# and as one graph of them all with 512 or 1,024 (0.999). On the kept stores of
# bench/scale.py, which have lived (a daemon's edits and 1,000-file checkouts,
# their old points deleted in place in the graphs), asked the questions the
# bench times (hybrid recall@10 against exact, a hit the exact search scores as
# its 10th counted, as ann-benchmarks does): at 100,000 files (2 graphs) 0.943 /
# 0.959 / 0.986 / 0.991 / 0.990 / 0.991 with 256 / 384 / 448 / 512 / 576 / 768
# each, hybrid p50 in process 8.0 ms with 512 against 9.1 with 768; at 200,000
# (3 graphs) 0.969 / 0.983 / 0.987 / 0.982 with 448 / 512 / 640 / 768, p50 14.4
# against 17.1 ms. Recall stops rising at 512; its misses are questions far
# from every chunk, which no count finds (2,048: dense 0.968 by ids, as 768).
HNSW_EF_LEAST = 512
OVERSAMPLING = 2.0


def hnsw_ef(graphs: int) -> int:
    """The candidates a search looks at in each of a store's ``graphs``."""
    if graphs <= 1:
        return HNSW_EF
    return max(HNSW_EF // graphs, min(HNSW_EF_LEAST, HNSW_EF))


def plan(
    query: StoreQuery, has_sparse: bool, graphs: int = 1
) -> tuple[Any, StoreQuery, tuple[Any, ...]]:
    """The ``QueryRequest`` for a search (None when there is nothing to ask), the
    query as the engine runs it, and the frontmatter clauses left for
    ``matches`` on its hits (the query then asks for more of them); ``graphs``:
    the store's HNSW graphs (``hnsw_ef``)."""
    from qdrant_edge import (
        Fusion,
        Prefetch,
        QuantizationSearchParams,
        Query,
        QueryRequest,
        SearchParams,
        SparseVector,
    )

    # The bindings turn a Python bool into the integer 1 (MatchValue(True)
    # matches `1`, not `true`), so clauses that may hold a boolean are
    # tested on the hits, and more hits are asked for.
    checked = tuple(kv for kv in query.filter.where if any(isinstance(v, bool) for v in kv[1]))
    if checked:
        engine = replace(
            query.filter, where=tuple(w for w in query.filter.where if w not in checked)
        )
        query = replace(query, k=min(query.k * 10, 1000), filter=engine)
    where = search_filter(query.filter)
    # A shard with int8 copies searches them, then rescores the best
    # OVERSAMPLING x limit with the original vectors; a shard without ignores it.
    rescore = QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING)
    params = SearchParams(
        hnsw_ef=max(hnsw_ef(graphs), query.candidates, query.k),
        exact=query.exact,
        quantization=rescore,
    )
    dense = Query.Nearest(list(query.dense)) if query.dense is not None else None
    sparse = (
        Query.Nearest(SparseVector(query.sparse.indices, query.sparse.values), using=SPARSE_NAME)
        if query.sparse is not None and has_sparse
        else None
    )
    if dense is not None and sparse is not None:
        fusion: Any = Fusion.Dbsf() if query.fusion == "dbsf" else Fusion.Rrf(k=query.rrf_k)
        request = QueryRequest(
            limit=query.k,
            prefetches=[
                Prefetch(limit=query.candidates, query=dense, filter=where, params=params),
                Prefetch(limit=query.candidates, query=sparse, filter=where),
            ],
            query=fusion,
            with_payload=True,
        )
    elif dense is not None or sparse is not None:
        request = QueryRequest(
            limit=query.k,
            query=dense if dense is not None else sparse,
            filter=where,
            with_payload=True,
            params=params if dense is not None else None,
        )
    else:
        request = None
    return request, query, checked


def scroll_request(
    where: Any, payload: Sequence[str] | bool, with_vectors: bool, page: int
) -> Callable[[Any], Any]:
    """The ``ScrollRequest`` for each page of a scroll, from its offset."""
    from qdrant_edge import ScrollRequest

    selector = list(payload) if not isinstance(payload, bool) else payload
    return lambda offset: ScrollRequest(
        offset=offset, limit=page, filter=where, with_payload=selector, with_vector=with_vectors
    )


def search_filter(spec: SearchFilter) -> Any:
    """The engine's filter for a search's roots, path prefix and frontmatter values."""
    from qdrant_edge import FieldCondition, Filter, MatchAny, MatchPrefix, MatchValue

    if not spec:
        return None
    must: list[Any] = []
    if spec.roots:
        must.append(FieldCondition(key="root", match=MatchAny(list(spec.roots))))
    if spec.doc_paths:
        must.append(FieldCondition(key="doc_path", match=MatchAny(list(spec.doc_paths))))
    elif spec.path_prefix:
        must.append(FieldCondition(key="doc_path", match=MatchPrefix(spec.path_prefix)))
    for key, values in spec.where:
        must.append(
            Filter(should=[FieldCondition(key=f"meta.{key}", match=MatchValue(v)) for v in values])
        )
    must += [FieldCondition(key="tags", match=MatchValue(tag)) for tag in spec.tags]
    if spec.lang:
        must.append(FieldCondition(key="lang", match=MatchValue(spec.lang)))
    return Filter(must=must)


def doc_filter(root: str, rel: str) -> Any:
    """The engine's filter for the points of one document."""
    return docs_filter([(root, rel)])


def docs_filter(docs: Sequence[tuple[str, str]]) -> Any:
    """The engine's filter for the points of these documents, (root, path) each:
    one clause per root, on the two indexed keys."""
    from qdrant_edge import FieldCondition, Filter, MatchAny, MatchValue

    by_root: dict[str, list[str]] = {}
    for root, rel in docs:
        by_root.setdefault(root, []).append(rel)
    clauses: list[Any] = [
        Filter(
            must=[
                FieldCondition(key="root", match=MatchValue(root)),
                FieldCondition(key="doc_path", match=MatchAny(rels)),
            ]
        )
        for root, rels in by_root.items()
    ]
    return clauses[0] if len(clauses) == 1 else Filter(should=clauses)


def matches(payload: dict[str, Any], where: Sequence[tuple[str, tuple[Any, ...]]]) -> bool:
    """Qdrant's rule for ``meta.<key>`` = one of ``values``, types included (a
    list matches when an item does; True is not 1)."""
    meta = payload.get("meta") or {}
    for key, values in where:
        value: Any = meta
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        items = value if isinstance(value, list) else [value]
        if not any(type(i) is type(v) and i == v for i in items for v in values):
            return False
    return True
