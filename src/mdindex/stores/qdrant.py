"""The Qdrant store: qdrant-client in embedded local mode or against a server.

Every call goes through ``_call``, which retries transient failures with
exponential backoff and jitter within the retry budget and translates
qdrant-client's errors into mdindex's own.
"""

from __future__ import annotations

import atexit
import gc
import json
import logging
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mdindex.config import redact
from mdindex.errors import LayoutMismatch, LockError, StoreError, StoreMismatch
from mdindex.sparse import SPARSE_NAME, Sparse
from mdindex.stores.base import (
    INDEXED_KEYS,
    Hit,
    Point,
    Retrier,
    Scrolling,
    SearchFilter,
    StoreQuery,
    folder_bytes,
    paged,
    short,
    sparse_of,
)

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

# qdrant-client takes ~0.6 s to import; a no-op backfill never opens the store,
# so the import waits until it does.

log = logging.getLogger(__name__)
T = TypeVar("T")

# One local-mode folder is one QdrantClient (it locks the folder), however many
# collections in it are open: the versions of a collection live side by side.
_LOCAL_CLIENTS: dict[Path, tuple[QdrantClient, int]] = {}
_LOCAL_LOCKS: dict[Path, threading.RLock] = {}


@atexit.register
def _close_local_clients() -> None:
    """Clients a caller never closed, closed while the interpreter still can."""
    for client, _ in list(_LOCAL_CLIENTS.values()):
        try:
            client.close()
        except Exception as exc:  # exiting anyway
            log.debug("closing qdrant client at exit: %s", exc)
    _LOCAL_CLIENTS.clear()


def _transient(exc: BaseException) -> bool:
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, ResponseHandlingException):
        return True  # connection refused, reset, timeout
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code is not None and (exc.status_code >= 500 or exc.status_code == 429)
    if isinstance(exc, sqlite3.OperationalError | OSError | TimeoutError):
        return True  # local store: read-only folder, disk full, busy
    return type(exc).__name__ in ("RpcError", "_InactiveRpcError", "AioRpcError")


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


class QdrantStore(Scrolling):
    def __init__(
        self,
        collection: str,
        *,
        path: Path | None = None,
        url: str | None = None,
        api_key: str | None = None,
        prefer_grpc: bool = False,
        timeout_s: float = 10.0,
        retry_budget_s: float = 30.0,
        batch_points: int = 256,
        batch_bytes: int = 8_000_000,
        cluster: ClusterSpec | None = None,
    ) -> None:
        if (path is None) == (url is None):
            raise StoreError("give exactly one of a local store path or a server URL")
        self.collection = collection
        self.path = path
        self.url = url
        self.retry_budget_s = retry_budget_s
        self.batch_points = batch_points
        self.batch_bytes = batch_bytes
        self._api_key = api_key
        self._grpc = prefer_grpc
        self._timeout = timeout_s
        self.cluster = cluster or ClusterSpec()
        self._client: QdrantClient | None = None
        self._retry = Retrier("qdrant", self.where, retry_budget_s, _transient, path)
        if path is not None:  # local mode is not thread-safe: one lock per folder
            self._retry.lock = _LOCAL_LOCKS.setdefault(path.resolve(), threading.RLock())
        self._sparse: bool | None = None  # the collection has the sparse vector; None: unread

    @property
    def has_sparse(self) -> bool:
        if self._sparse is None:
            if not self.exists():
                return False
            info = self._call(
                "collection info", lambda: self.client.get_collection(self.collection)
            )
            self._sparse = SPARSE_NAME in (info.config.params.sparse_vectors or {})
        return self._sparse

    @property
    def local(self) -> bool:
        return self.path is not None

    @property
    def where(self) -> str:
        # Shown in status and logs, and part of the state's store identity: never
        # with the credentials of a user:password@ URL.
        return str(self.path) if self.path is not None else redact(str(self.url))

    # -- connection ------------------------------------------------------

    def open(self) -> QdrantStore:
        if self._client is not None:
            return self
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._client = self._call("open", self._connect)
        for warning in caught:
            text = str(warning.message).splitlines()[0]
            log.warning("qdrant-client: %s", text)
            if "not recommended" in text:
                log.warning(
                    "a store this size is better on qdrant-edge (bench/stores.py: edits 6-10x "
                    "faster, reopening 8-16x, a sixth of the memory); `mdindex migrate --to edge` "
                    "moves it without embedding, then use --store edge"
                )
        return self

    def _connect(self) -> QdrantClient:
        from qdrant_client import QdrantClient

        if self.path is None:
            return QdrantClient(
                url=self.url,
                api_key=self._api_key,
                prefer_grpc=self._grpc,
                timeout=int(self._timeout),
                # Its background version probe dies noisily on an unreachable
                # server; reachability is checked, with retries, by our first call.
                check_compatibility=False,
            )
        self.path.mkdir(parents=True, exist_ok=True)
        key = self.path.resolve()
        if key in _LOCAL_CLIENTS:
            client, users = _LOCAL_CLIENTS[key]
            _LOCAL_CLIENTS[key] = (client, users + 1)
            return client
        try:
            client = QdrantClient(path=str(self.path))
            _LOCAL_CLIENTS[key] = (client, 1)
            return client
        except RuntimeError as exc:
            if "already accessed" not in str(exc):
                raise StoreError(f"cannot open embedded store {self.path}: {exc}") from exc
        # qdrant-client leaves its lock file open on that path. Out here the
        # traceback that held the half-built client is gone, so it can be
        # closed now, quietly, rather than at some later garbage collection.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        raise LockError(
            f"embedded store {self.path} is open in another process; "
            "stop it or ask the running daemon (mdindex search/status use it)"
        )

    @property
    def client(self) -> QdrantClient:
        return self.open()._client  # type: ignore[return-value]

    def close(self) -> None:
        if self._client is None:
            return
        with self._retry.lock:
            if self.path is not None:
                key = self.path.resolve()
                _, users = _LOCAL_CLIENTS.pop(key, (None, 1))
                if users > 1:  # another version in the folder still uses it
                    _LOCAL_CLIENTS[key] = (self._client, users - 1)
                    self._client = None
                    return
            try:
                self._client.close()
            except Exception as exc:  # closing must never mask the real outcome
                log.debug("closing qdrant client: %s", exc)
            self._client = None

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        def quiet() -> T:
            with warnings.catch_warnings():
                # Local mode warns once it holds many points; that is logged, not raised.
                warnings.simplefilter("ignore", UserWarning)
                return fn()

        return self._retry(what, quiet)

    # -- collection ------------------------------------------------------

    def exists(self) -> bool:
        return self._call(
            "collection check", lambda: self.client.collection_exists(self.collection)
        )

    def ensure_collection(self, dimension: int, sparse: bool = True) -> None:
        """Create the collection, or refuse one whose vector settings differ."""
        from qdrant_client import models as qm

        if self.exists():
            info = self._call(
                "collection info", lambda: self.client.get_collection(self.collection)
            )
            params = info.config.params.vectors
            if not isinstance(params, qm.VectorParams):
                raise StoreMismatch(
                    f"collection {self.collection!r} uses named vectors; "
                    "choose another collection for mdindex"
                )
            if params.size != dimension or params.distance != qm.Distance.COSINE:
                raise StoreMismatch(
                    f"collection {self.collection!r} has {params.size}-d {params.distance.value} "
                    f"vectors but the model gives {dimension}-d Cosine; "
                    "use another --collection or delete that one"
                )
            have = info.config.params.sparse_vectors or {}
            self._sparse = SPARSE_NAME in have
            if sparse and not self._sparse:
                raise LayoutMismatch(
                    f"collection {self.collection!r} has no {SPARSE_NAME!r} sparse vector"
                )
            self._tune_local()
            return
        log.info(
            "creating collection %s (%d-d cosine) at %s", self.collection, dimension, self.where
        )
        # Local mode has no shards, replicas or quantization; a server gets them all.
        spec = ClusterSpec() if self.local else self.cluster
        create = spec.create_params(dimension, sparse)
        self._call(
            "create collection", lambda: self.client.create_collection(self.collection, **create)
        )
        self._sparse = sparse
        if self.local:
            log.info("embedded store: payload indexes are not supported in local mode; skipped")
            self._tune_local()
            return
        for key in INDEXED_KEYS:
            self._call(
                f"payload index {key}",
                lambda key=key: self.client.create_payload_index(  # type: ignore[misc]
                    self.collection, key, qm.PayloadSchemaType.KEYWORD, wait=True
                ),
            )

    def _tune_local(self) -> None:
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
            local: Any = self.client._client  # QdrantLocal
            conn = local.collections[self.collection].storage.storage
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        except Exception as exc:
            log.debug("embedded store left with default SQLite settings: %s", exc)

    def count(self) -> int:
        if not self.exists():
            return 0
        return self._call("count", lambda: self.client.count(self.collection, exact=True).count)

    def signature(self) -> str:
        """A cheap fingerprint of the embedded store's files; empty for a server."""
        if self.path is None:
            return ""
        db = self.path / "collection" / self.collection / "storage.sqlite"
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

    # -- points ----------------------------------------------------------

    retrieve_batch = 512

    def _retrieve(self, ids: list[str]) -> Sequence[Any]:
        return self._call(
            "retrieve",
            lambda: self.client.retrieve(
                self.collection, ids=ids, with_vectors=True, with_payload=["vector_key"]
            ),
        )

    def upsert(self, points: Sequence[Point]) -> int:
        """Write points in batches bounded by count and bytes; returns points written."""
        from qdrant_client import models as qm

        batch: list[Any] = []
        size = 0
        written = 0
        for point in points:
            est = len(json.dumps(point.payload, ensure_ascii=False)) + 12 * len(point.vector)
            if batch and (len(batch) >= self.batch_points or size + est > self.batch_bytes):
                written += self._upsert_batch(batch)
                batch, size = [], 0
            vector: Any = list(point.vector)
            if point.sparse is not None and self.has_sparse:
                vector = {
                    "": vector,
                    SPARSE_NAME: qm.SparseVector(
                        indices=point.sparse.indices, values=point.sparse.values
                    ),
                }
            batch.append(qm.PointStruct(id=point.id, vector=vector, payload=point.payload))
            size += est
        if batch:
            written += self._upsert_batch(batch)
        return written

    def _ordering(self) -> Any:
        from qdrant_client import models as qm

        return None if self.local else qm.WriteOrdering(self.cluster.write_ordering)

    def _upsert_batch(self, batch: list[Any]) -> int:
        self._call(
            "upsert",
            lambda: self.client.upsert(
                self.collection, points=batch, wait=True, ordering=self._ordering()
            ),
        )
        return len(batch)

    def delete(self, ids: Sequence[str]) -> int:
        from qdrant_client import models as qm

        ids = list(ids)
        for i in range(0, len(ids), self.batch_points * 4):
            batch = ids[i : i + self.batch_points * 4]
            self._call(
                "delete",
                lambda batch=batch: self.client.delete(  # type: ignore[misc]
                    self.collection,
                    points_selector=qm.PointIdsList(points=batch),
                    wait=True,
                    ordering=self._ordering(),
                ),
            )
        return len(ids)

    def _records(
        self, where: Any, payload: Sequence[str] | bool, with_vectors: bool, page: int
    ) -> Iterator[Any]:
        selector = list(payload) if not isinstance(payload, bool) else payload
        return paged(
            lambda offset: self._call(
                "scroll",
                lambda: self.client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=page,
                    offset=offset,
                    with_payload=selector,
                    with_vectors=with_vectors,
                ),
            )
        )

    def search(self, query: StoreQuery) -> list[Hit]:
        from qdrant_client import models as qm

        if not self.exists():
            return []
        where = self._filter(query.filter)
        dense = list(query.dense) if query.dense is not None else None
        sparse = (
            qm.SparseVector(indices=query.sparse.indices, values=query.sparse.values)
            if query.sparse is not None and self.has_sparse
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
                    qm.Prefetch(query=dense, filter=where, limit=query.candidates),
                    qm.Prefetch(
                        query=sparse, using=SPARSE_NAME, filter=where, limit=query.candidates
                    ),
                ],
                "query": fusion,
            }
        elif sparse is not None:
            request = {"query": sparse, "using": SPARSE_NAME, "query_filter": where}
        elif dense is not None:
            request = {"query": dense, "query_filter": where}
        else:
            return []
        result = self._call(
            "search",
            lambda: self.client.query_points(
                self.collection, limit=query.k, with_payload=True, **request
            ),
        )
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in result.points]

    def _filter(self, spec: SearchFilter) -> Any:
        from qdrant_client import models as qm

        if not spec:
            return None
        must: list[Any] = []
        if spec.roots:
            must.append(qm.FieldCondition(key="root", match=qm.MatchAny(any=list(spec.roots))))
        if spec.path_prefix:
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
        return qm.Filter(must=must)

    def sparse_vectors(self, ids: Sequence[str]) -> dict[str, Sparse]:
        if not ids or not self.has_sparse:
            return {}
        records = self._call(
            "retrieve",
            lambda: self.client.retrieve(
                self.collection, ids=list(ids), with_vectors=[SPARSE_NAME], with_payload=False
            ),
        )
        out: dict[str, Sparse] = {}
        for rec in records:
            found = sparse_of(rec.vector)
            if found is not None:
                out[str(rec.id)] = found
        return out

    def _doc_filter(self, root: str, rel: str) -> Any:
        from qdrant_client import models as qm

        return qm.Filter(
            must=[
                qm.FieldCondition(key="root", match=qm.MatchValue(value=root)),
                qm.FieldCondition(key="doc_path", match=qm.MatchValue(value=rel)),
            ]
        )

    def describe(self) -> dict[str, Any]:
        if self.local:
            return {"engine": "qdrant-client local mode"}
        out: dict[str, Any] = {
            "engine": "qdrant server",
            "write_ordering": self.cluster.write_ordering,
        }
        if not self._retry.lock.acquire(blocking=False):
            return out  # busy writing; status must not wait
        try:
            info = self.client.get_collection(self.collection)
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
        except Exception as exc:  # status answers even when the server does not
            out["collection_status"] = f"unknown ({short(exc)})"
        finally:
            self._retry.lock.release()
        return out

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """Nothing to do: qdrant-client's local mode has no index, and a server
        optimizes on its own."""
        return True

    # -- versions ----------------------------------------------------------

    def drop(self) -> None:
        self._call("drop collection", lambda: self.client.delete_collection(self.collection))
        self._sparse = None

    def point_alias(self, alias: str) -> bool:
        """One ``update_collection_aliases`` call: the old alias deleted and the
        new one created together, so a reader never finds it missing. A legacy
        collection of that name must have been moved away first."""
        from qdrant_client import models as qm

        ops: list[Any] = []
        if self.alias_target(alias) is not None:
            ops.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias)))
        ops.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=self.collection, alias_name=alias)
            )
        )
        self._call("switch alias", lambda: self.client.update_collection_aliases(ops))
        return True

    def alias_target(self, alias: str) -> str | None:
        aliases = self._call("aliases", lambda: self.client.get_aliases().aliases)
        return next((a.collection_name for a in aliases if a.alias_name == alias), None)

    def disk_bytes(self) -> int | None:
        if self.path is None:
            return None
        return folder_bytes(self.path / "collection" / self.collection)
