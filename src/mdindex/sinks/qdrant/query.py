"""What qdrant-client is sent: a search's request and its filter, and writes in batches."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from mdindex.embedding.sparse import SPARSE_NAME
from mdindex.sinks.base import Point, SearchFilter, StoreQuery


def request(query: StoreQuery, has_sparse: bool) -> dict[str, Any] | None:
    """``query_points``' arguments for a search: dense, sparse, or both fused in
    one request; None when there is nothing to ask."""
    from qdrant_client import models as qm

    where = search_filter(query.filter)
    params = qm.SearchParams(exact=True) if query.exact else None
    dense = list(query.dense) if query.dense is not None else None
    sparse = (
        qm.SparseVector(indices=query.sparse.indices, values=query.sparse.values)
        if query.sparse is not None and has_sparse
        else None
    )
    if dense is not None and sparse is not None:
        fusion: Any = (
            qm.FusionQuery(fusion=qm.Fusion.DBSF)
            if query.fusion == "dbsf"
            else qm.RrfQuery(rrf=qm.Rrf(k=query.rrf_k))
        )
        request: dict[str, Any] = {
            "prefetch": [
                qm.Prefetch(query=dense, filter=where, limit=query.candidates, params=params),
                qm.Prefetch(query=sparse, using=SPARSE_NAME, filter=where, limit=query.candidates),
            ],
            "query": fusion,
        }
    elif sparse is not None:
        request = {"query": sparse, "using": SPARSE_NAME, "query_filter": where}
    elif dense is not None:
        request = {"query": dense, "query_filter": where}
        if params is not None:
            request["search_params"] = params
    else:
        return None
    return request


def search_filter(spec: SearchFilter) -> Any:
    """The engine's filter for a search's roots, path prefix and frontmatter values."""
    from qdrant_client import models as qm

    if not spec:
        return None
    must: list[Any] = []
    if spec.roots:
        must.append(qm.FieldCondition(key="root", match=qm.MatchAny(any=list(spec.roots))))
    if spec.doc_paths:
        paths = qm.MatchAny(any=list(spec.doc_paths))
        must.append(qm.FieldCondition(key="doc_path", match=paths))
    elif spec.path_prefix:
        must.append(
            qm.FieldCondition(key="doc_path", match=qm.MatchPrefix(prefix=spec.path_prefix))
        )
    for key, values in spec.where:
        must.append(
            qm.Filter(
                should=[
                    qm.FieldCondition(key=f"meta.{key}", match=qm.MatchValue(value=v))
                    for v in values
                ]
            )
        )
    must += [qm.FieldCondition(key="tags", match=qm.MatchValue(value=tag)) for tag in spec.tags]
    if spec.lang:
        must.append(qm.FieldCondition(key="lang", match=qm.MatchValue(value=spec.lang)))
    return qm.Filter(must=must)


def doc_filter(root: str, rel: str) -> Any:
    """The engine's filter for the points of one document."""
    return docs_filter([(root, rel)])


def docs_filter(docs: Sequence[tuple[str, str]]) -> Any:
    """The engine's filter for the points of these documents, (root, path) each:
    one clause per root, on the two indexed keys."""
    from qdrant_client import models as qm

    by_root: dict[str, list[str]] = {}
    for root, rel in docs:
        by_root.setdefault(root, []).append(rel)
    clauses: list[Any] = [
        qm.Filter(
            must=[
                qm.FieldCondition(key="root", match=qm.MatchValue(value=root)),
                qm.FieldCondition(key="doc_path", match=qm.MatchAny(any=rels)),
            ]
        )
        for root, rels in by_root.items()
    ]
    return clauses[0] if len(clauses) == 1 else qm.Filter(should=clauses)


def batches(points: Sequence[Point], max_points: int, max_bytes: int) -> Iterator[list[Point]]:
    """Points in batches of at most ``max_points`` and about ``max_bytes`` (a
    server's request size: payload JSON and 12 bytes a vector value)."""
    batch: list[Point] = []
    size = 0
    for point in points:
        est = len(json.dumps(point.payload, ensure_ascii=False)) + 12 * len(point.vector)
        if batch and (len(batch) >= max_points or size + est > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(point)
        size += est
    if batch:
        yield batch
