"""How a collection is created and tuned: a server's sharding, replication,
storage and quantization (``ClusterSpec``), local mode's SQLite settings."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.embedding.sparse import SPARSE_NAME
from mdindex.errors import LayoutMismatch, StoreMismatch
from mdindex.retry import short
from mdindex.sinks.base import INDEXED_KEYS, Point

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterSpec:
    """How a server creates the collection (sharding, replication, storage,
    quantization) and how writes are ordered; a single node takes it too."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None
    on_disk_vectors: bool = False
    on_disk_payload: bool | None = None
    quantization: str = "none"  # or "int8": scalar quantization, originals kept
    write_ordering: str = "weak"

    def create_params(self, dimension: int, sparse: bool = True) -> dict[str, Any]:
        """Keyword arguments for ``create_collection``."""
        from qdrant_client import models as qm

        params: dict[str, Any] = {
            "vectors_config": qm.VectorParams(
                size=dimension, distance=qm.Distance.COSINE, on_disk=self.on_disk_vectors or None
            )
        }
        if sparse:
            # The engine applies IDF at query time, so no point is rewritten
            # when others come and go.
            params["sparse_vectors_config"] = {
                SPARSE_NAME: qm.SparseVectorParams(modifier=qm.Modifier.IDF)
            }
        for key in ("shard_number", "replication_factor", "write_consistency_factor"):
            if getattr(self, key) is not None:
                params[key] = getattr(self, key)
        if self.on_disk_payload is not None:
            params["on_disk_payload"] = self.on_disk_payload
        if self.quantization == "int8":
            params["quantization_config"] = qm.ScalarQuantization(
                scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, quantile=0.99)
            )
        return params


def tune_local(client: QdrantClient, collection: str) -> None:
    """Put local mode's SQLite file in WAL mode with synchronous=NORMAL.

    qdrant-client commits every point on its own; with the default rollback
    journal each commit is an fsync, which made upserts about 1 ms a point,
    more than all of our own work. In WAL mode a killed process loses
    nothing committed; a power cut may lose the last commits, which the
    next run notices (the state then knows more points than the store
    holds) and repairs. The attribute path is qdrant-client's internals,
    so anything unexpected leaves the defaults alone.
    """
    try:
        local: Any = client._client  # QdrantLocal
        conn = local.collections[collection].storage.storage
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except Exception as exc:
        log.debug("embedded store left with default SQLite settings: %s", exc)


def check_existing(info: Any, collection: str, dimension: int, sparse: bool) -> bool:
    """An existing collection's vectors must be the model's (else StoreMismatch),
    with the sparse vector when ``sparse`` (else LayoutMismatch); True when it
    has the sparse vector."""
    from qdrant_client import models as qm

    params = info.config.params.vectors
    if not isinstance(params, qm.VectorParams):
        raise StoreMismatch(
            f"collection {collection!r} uses named vectors; choose another collection for mdindex"
        )
    if params.size != dimension or params.distance != qm.Distance.COSINE:
        raise StoreMismatch(
            f"collection {collection!r} has {params.size}-d {params.distance.value} "
            f"vectors but the model gives {dimension}-d Cosine; "
            "use another --collection or delete that one"
        )
    has_sparse = SPARSE_NAME in (info.config.params.sparse_vectors or {})
    if sparse and not has_sparse:
        raise LayoutMismatch(f"collection {collection!r} has no {SPARSE_NAME!r} sparse vector")
    return has_sparse


def describe_server(client: QdrantClient, collection: str, cluster: ClusterSpec) -> dict[str, Any]:
    """What `status` shows about a server's collection; it answers even when
    the server does not."""
    out: dict[str, Any] = {"engine": "qdrant server", "write_ordering": cluster.write_ordering}
    try:
        info = client.get_collection(collection)
        params = info.config.params
        vectors = params.vectors
        out |= {
            "shard_number": params.shard_number,
            "replication_factor": params.replication_factor,
            "write_consistency_factor": params.write_consistency_factor,
            "on_disk_vectors": bool(getattr(vectors, "on_disk", False)),
            "on_disk_payload": params.on_disk_payload,
            "quantization": "int8" if info.config.quantization_config else "none",
            "collection_status": str(info.status.value),
        }
    except Exception as exc:
        out["collection_status"] = f"unknown ({short(exc)})"
    return out


def local_signature(db: Path) -> str:
    """Sizes and mtimes of local mode's SQLite file and its WAL; "absent" without one."""
    parts = []
    for f in (db, db.with_name("storage.sqlite-wal")):
        try:
            st = f.stat()
        except FileNotFoundError:
            if f == db:
                return "absent"
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    return "/".join(parts)


def point_alias(client: QdrantClient, collection: str, alias: str) -> None:
    """One ``update_collection_aliases`` call: the old alias deleted and the new
    one created together, so a reader never finds it missing. A legacy
    collection of that name must have been moved away first."""
    from qdrant_client import models as qm

    ops: list[Any] = []
    if alias_target(client, alias) is not None:
        ops.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias)))
    ops.append(
        qm.CreateAliasOperation(
            create_alias=qm.CreateAlias(collection_name=collection, alias_name=alias)
        )
    )
    client.update_collection_aliases(ops)


def alias_target(client: QdrantClient, alias: str) -> str | None:
    """The collection ``alias`` names, or None."""
    aliases = client.get_aliases().aliases
    return next((a.collection_name for a in aliases if a.alias_name == alias), None)


def create_indexes(call: Callable[..., Any], client: QdrantClient, collection: str) -> None:
    """The keyword payload indexes filters use (a server's; local mode has none),
    through the store's retry loop (``call(what, fn)``)."""
    from qdrant_client import models as qm

    for key in INDEXED_KEYS:
        call(
            f"payload index {key}",
            lambda key=key: client.create_payload_index(
                collection, key, qm.PayloadSchemaType.KEYWORD, wait=True
            ),
        )


def point_struct(point: Point, has_sparse: bool) -> Any:
    """A point as qdrant-client writes it: dense, and sparse when the collection keeps it."""
    from qdrant_client import models as qm

    vector: Any = list(point.vector)
    if point.sparse is not None and has_sparse:
        sparse = qm.SparseVector(indices=point.sparse.indices, values=point.sparse.values)
        vector = {"": vector, SPARSE_NAME: sparse}
    return qm.PointStruct(id=point.id, vector=vector, payload=point.payload)


def delete_points(
    call: Callable[..., Any],
    client: QdrantClient,
    collection: str,
    ids: list[str],
    step: int,
    ordering: Any,
) -> int:
    """Delete points by ID, ``step`` at a time; returns how many were asked."""
    from qdrant_client import models as qm

    for i in range(0, len(ids), step):
        batch = ids[i : i + step]
        call(
            "delete",
            lambda batch=batch: client.delete(
                collection,
                points_selector=qm.PointIdsList(points=batch),
                wait=True,
                ordering=ordering,
            ),
        )
    return len(ids)
