"""The Qdrant store: qdrant-client in embedded local mode or against a server.

Every call goes through ``_call``, which retries transient failures with
exponential backoff and jitter within the retry budget and translates
qdrant-client's errors into mdindex's own.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mdindex.embedding.sparse import SPARSE_NAME, Sparse
from mdindex.errors import StoreError
from mdindex.outside import redact
from mdindex.sinks.base import (
    Hit,
    Point,
    Retrier,
    Scrolling,
    StoreQuery,
    paged,
    sparse_by_id,
    waiting_for_lock,
)
from mdindex.sinks.folder import folder_bytes
from mdindex.sinks.qdrant.clients import (
    connect_local,
    connect_server,
    folder_lock,
    local_made,
    release,
    said,
    transient,
)
from mdindex.sinks.qdrant.collection import (
    ClusterSpec,
    alias_target,
    check_existing,
    create_indexes,
    delete_points,
    describe_server,
    local_signature,
    point_alias,
    point_struct,
    tune_local,
)
from mdindex.sinks.qdrant.query import batches, docs_filter, request

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

# qdrant-client takes ~0.6 s to import; a no-op backfill never opens the store,
# so the import waits until it does.

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        self._retry = Retrier("qdrant", self.where, retry_budget_s, transient, path)
        if path is not None:  # local mode is not thread-safe: one lock per folder
            self._retry.lock = folder_lock(path)
        self._sparse: bool | None = None  # the collection has the sparse vector; None: unread

    @property
    def has_sparse(self) -> bool:
        if self._sparse is None:
            if not self.exists():
                return False
            info = self._info()
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
            self._client = waiting_for_lock(lambda: self._call("open", self._connect))
        said(caught)
        return self

    def _connect(self) -> QdrantClient:
        if self.path is None:
            assert self.url is not None
            return connect_server(self.url, self._api_key, self._grpc, self._timeout)
        return connect_local(self.path)

    @property
    def client(self) -> QdrantClient:
        return self.open()._client  # type: ignore[return-value]

    def close(self) -> None:
        if self._client is None:
            return
        with self._retry.lock:
            release(self._client, self.path)
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
        if self._client is None and self.path is not None and not local_made(self.path):
            return False  # opening local mode makes the folder: status creates nothing
        return self._call(
            "collection check", lambda: self.client.collection_exists(self.collection)
        )

    def _info(self) -> Any:
        return self._call("collection info", lambda: self.client.get_collection(self.collection))

    def ensure_collection(self, dimension: int, sparse: bool = True) -> None:
        """Create the collection, or refuse one whose vector settings differ."""
        if self.exists():
            info = self._info()
            self._sparse = check_existing(info, self.collection, dimension, sparse)
            tune_local(self.client, self.collection)
            return
        log.info(
            "creating collection %s (%d-d cosine) at %s", self.collection, dimension, self.where
        )
        # Local mode has no shards, replicas or quantization; a server gets them all.
        spec = ClusterSpec() if self.local else self.cluster
        params = spec.create_params(dimension, sparse)
        self._call(
            "create collection", lambda: self.client.create_collection(self.collection, **params)
        )
        self._sparse = sparse
        if self.local:
            log.info("embedded store: payload indexes are not supported in local mode; skipped")
            tune_local(self.client, self.collection)
            return
        create_indexes(self._call, self.client, self.collection)

    def count(self) -> int:
        if not self.exists():
            return 0
        return self._call("count", lambda: self.client.count(self.collection, exact=True).count)

    def signature(self) -> str:
        """A cheap fingerprint of the embedded store's files; empty for a server."""
        if self.path is None:
            return ""
        return local_signature(self.path / "collection" / self.collection / "storage.sqlite")

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
        written = 0
        for group in batches(points, self.batch_points, self.batch_bytes):
            batch = [point_struct(point, self.has_sparse) for point in group]
            written += self._upsert_batch(batch)
        return written

    def _ordering(self) -> Any:
        from qdrant_client import models as qm

        return None if self.local else qm.WriteOrdering(self.cluster.write_ordering)

    def _upsert_batch(self, batch: list[Any]) -> int:
        ordering = self._ordering()
        self._call(
            "upsert",
            lambda: self.client.upsert(self.collection, points=batch, wait=True, ordering=ordering),
        )
        return len(batch)

    def delete(self, ids: Sequence[str]) -> int:
        step, ordering = self.batch_points * 4, self._ordering()
        return delete_points(self._call, self.client, self.collection, list(ids), step, ordering)

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
        if not self.exists():
            return []
        args = request(query, self.has_sparse)
        if args is None:
            return []
        result = self._call(
            "search",
            lambda: self.client.query_points(
                self.collection, limit=query.k, with_payload=True, **args
            ),
        )
        return [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in result.points]

    def sparse_vectors(self, ids: Sequence[str]) -> dict[str, Sparse]:
        if not ids or not self.has_sparse:
            return {}
        records = self._call(
            "retrieve",
            lambda: self.client.retrieve(
                self.collection, ids=list(ids), with_vectors=[SPARSE_NAME], with_payload=False
            ),
        )
        return sparse_by_id(records)

    def _docs_filter(self, docs: Sequence[tuple[str, str]]) -> Any:
        return docs_filter(docs)

    def describe(self, points: int | None = None) -> dict[str, Any]:
        if self.local:
            return {"engine": "qdrant-client local mode"}
        if not self._retry.lock.acquire(blocking=False):  # busy writing; status must not wait
            return {"engine": "qdrant server", "write_ordering": self.cluster.write_ordering}
        try:
            return describe_server(self.client, self.collection, self.cluster)
        finally:
            self._retry.lock.release()

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        return True  # local mode has no index to build; a server optimizes on its own

    # -- versions ----------------------------------------------------------

    def drop(self) -> None:
        self._call("drop collection", lambda: self.client.delete_collection(self.collection))
        self._sparse = None

    def point_alias(self, alias: str) -> bool:
        """See ``collection.point_alias``."""
        self._call("switch alias", lambda: point_alias(self.client, self.collection, alias))
        return True

    def alias_target(self, alias: str) -> str | None:
        return self._call("aliases", lambda: alias_target(self.client, alias))

    def disk_bytes(self) -> int | None:
        if self.path is None:
            return None
        return folder_bytes(self.path / "collection" / self.collection)
