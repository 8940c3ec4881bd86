"""The qdrant-edge store: Qdrant's own engine (segments, WAL, HNSW, payload
indexes) embedded in this process, one shard folder per collection.

Index building, which edge leaves to its caller: ``optimize``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from mdindex.embedding.sparse import SPARSE_NAME, Sparse
from mdindex.errors import StoreError
from mdindex.retry import short
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
from mdindex.sinks.edge.optimize import (
    SEGMENT_POINTS,
    add_written,
    graphs,
    optimize,
    seal_due,
    segment_points,
    wants_index,
    written,
)
from mdindex.sinks.edge.pages import Pages
from mdindex.sinks.edge.query import docs_filter, matches, plan, scroll_request
from mdindex.sinks.edge.shard import (
    CONFIG_FILE,
    check_existing,
    closed_info,
    create,
    ensure_indexes,
    load,
    read_config,
    shard_info,
    update,
    vector_of,
)
from mdindex.sinks.folder import files_signature, folder_bytes, left_open, unwritable

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

log = logging.getLogger(__name__)


def _transient(exc: BaseException) -> bool:
    """Edge raises plain Exceptions; the filesystem's refusals are worth a retry."""
    if isinstance(exc, OSError | TimeoutError):
        return True
    text = str(exc)
    return any(
        s in text
        for s in ("No space left", "Read-only file system", "Permission denied", "os error")
    )


class EdgeStore(Scrolling):
    def __init__(
        self,
        collection: str,
        *,
        path: Path,
        retry_budget_s: float = 30.0,
        batch_points: int = 256,
        batch_bytes: int = 8_000_000,
        index_min_points: int = 50_000,
        segment_points: int = SEGMENT_POINTS,
        indexing_threshold_kb: int = 10_000,
        quantization: str = "none",
        on_disk_vectors: bool = False,
    ) -> None:
        self.collection = collection
        self.path = path  # the shard's own folder
        self.where = str(path)
        self.batch_points = batch_points
        # In process there is no request size to respect, only the bindings' cost per call.
        self._step = batch_points * 4
        self.batch_bytes = batch_bytes
        self.index_min_points = index_min_points
        self._seal_after = 0  # a build during the writes that gave way: not before this
        self._bound: int | None = None  # the shard's segment_points, once read
        self.quantization, self.on_disk_vectors = quantization, on_disk_vectors
        # how a shard created here is made (``shard.create``); segments with less
        # vector data than indexing_threshold_kb stay unindexed (Qdrant's default)
        self._layout = (indexing_threshold_kb, quantization, on_disk_vectors, segment_points)
        self._shard: EdgeShard | None = None
        self._retry = Retrier("qdrant-edge", str(path), retry_budget_s, _transient, path)
        self._searches_waiting = 0
        self._sparse: bool | None = None  # the shard has the sparse vector; None: unread
        self._graphs = 0  # the shard's HNSW graphs when it was opened (query.hnsw_ef)
        self.pages = Pages(path, self._retry.lock)

    @property
    def has_sparse(self) -> bool:
        if self._sparse is None:
            if not self.exists():
                return False
            self._sparse = SPARSE_NAME in (read_config(self.path).get("sparse_vectors") or {})
        return self._sparse

    # -- shard -----------------------------------------------------------

    def exists(self) -> bool:
        try:
            return (self.path / CONFIG_FILE).is_file()
        except OSError as exc:  # a folder this user may not enter: not "no collection"
            raise StoreError(f"qdrant-edge cannot read {self.path}: {short(exc)}") from None

    def open(self) -> EdgeStore:
        # Creation waits for ensure_collection, which knows the vector size.
        if self._shard is None and self.exists():
            waiting_for_lock(lambda: self._retry("open", self._load_if_closed))
        return self

    def _load_if_closed(self) -> None:
        # Looked at again under the lock: a search that waited for a build finds
        # the shard it opened (loaded twice, it is locked by this very process).
        if self._shard is None:
            self._shard = load(self.path)
            self._graphs = graphs(self.path)  # a build (settle) opens the shard again

    @property
    def shard(self) -> EdgeShard:
        self.open()
        if self._shard is None:
            raise StoreError(f"edge store {self.path} has no collection yet")
        return self._shard

    def close(self) -> None:
        with self._retry.lock:
            if self._shard is not None and not left_open(self._shard, self.path):
                try:
                    self._shard.flush()
                    self._shard.close()
                except Exception as exc:  # closing must never mask the real outcome
                    log.debug("closing edge shard: %s", exc)
            self._shard = None

    def ensure_collection(self, dimension: int, sparse: bool = True) -> None:
        """Create the shard with its payload indexes, or refuse one whose vectors differ."""
        if self.exists():
            self._sparse = check_existing(read_config(self.path), self.path, dimension, sparse)
            self.open()
            return
        log.info("creating edge store %s (%d-d cosine)", self.path, dimension)
        how = self._layout
        self._shard = self._retry("create", lambda: create(self.path, dimension, sparse, *how))
        self._sparse = sparse
        ensure_indexes(self.shard, self._retry, self.on_disk_vectors)

    def count(self) -> int:
        from qdrant_edge import CountRequest

        if not self.exists():
            return 0
        return int(self._retry("count", lambda: self.shard.count(CountRequest(exact=True))))

    def signature(self) -> str:
        return files_signature(self.path)

    # -- points ----------------------------------------------------------

    retrieve_batch = 1024

    def _retrieve(self, ids: list[str]) -> Sequence[Any]:
        if not ids or not self.exists():
            return []
        wanted: list[int | UUID | str] = list(ids)
        return self._retry(
            "retrieve",
            lambda: self.shard.retrieve(wanted, with_payload=["vector_key"], with_vector=True),
        )

    def upsert(self, points: Sequence[Point]) -> int:
        """Write points in batches; in-process, so bounded by count alone (the byte
        bound is for requests to a server). Most of the time goes into the
        bindings converting each payload: about 80 us a point for ours, here."""
        from qdrant_edge import Point as EdgePoint
        from qdrant_edge import UpdateOperation

        step = self._step
        for lo in range(0, len(points), step):
            batch = [
                EdgePoint(p.id, vector_of(p, self.has_sparse), p.payload)
                for p in points[lo : lo + step]
            ]
            op = UpdateOperation.upsert_points(batch)
            self._retry("upsert", lambda op=op: update(self.shard, self.path, op))  # type: ignore[misc]
        add_written(self.path, len(points))  # outside the index until the next build
        return len(points)

    def delete(self, ids: Sequence[str]) -> int:
        from qdrant_edge import UpdateOperation

        ids = list(ids)
        if not ids or not self.exists():
            return 0
        for i in range(0, len(ids), self._step):
            op = UpdateOperation.delete_points(list(ids[i : i + self._step]))
            self._retry("delete", lambda op=op: update(self.shard, self.path, op))  # type: ignore[misc]
        return len(ids)

    def _records(
        self, where: Any, payload: Sequence[str] | bool, with_vectors: bool, page: int
    ) -> Iterator[Any]:
        request = scroll_request(where, payload, with_vectors, page)
        return paged(lambda at: self._retry("scroll", lambda: self.shard.scroll(request(at))))

    def search(self, query: StoreQuery) -> list[Hit]:
        if not self.exists():
            return []
        wanted = query.k
        self._searches_waiting += 1  # tells a running build to give way, the store closed
        try:
            self.open()  # a closed store's graphs are counted as it opens
            request, query, checked = plan(query, self.has_sparse, self._graphs)
            if request is None:
                return []
            points = self._retry("search", lambda: self.shard.query(request))
        finally:
            self._searches_waiting -= 1
        self.pages.searched()
        hits = [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in points]
        if checked:
            hits = [h for h in hits if matches(h.payload, checked)][:wanted]
        return hits

    def sparse_vectors(self, ids: Sequence[str]) -> dict[str, Sparse]:
        if not ids or not self.has_sparse:
            return {}
        wanted: list[int | UUID | str] = list(ids)
        sparse = [SPARSE_NAME]  # not True: that paged in the dense matrix (771 MB at 545k)
        records = self._retry("retrieve", lambda: self.shard.retrieve(wanted, False, sparse))
        return sparse_by_id(records)

    def _docs_filter(self, docs: Sequence[tuple[str, str]]) -> Any:
        return docs_filter(docs)

    def let_go(self) -> None:
        self.pages.let_go()

    def read_ahead(self) -> int:
        return self.pages.read_ahead()

    def describe(self, points: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": "qdrant-edge"}
        if not self._retry.lock.acquire(blocking=False):
            return out  # busy: building its index rewrites the files read below
        try:
            if self._shard is not None:
                return out | shard_info(self._shard, read_config(self.path), self.path)
            return out | (closed_info(self.path, points) if points is not None else {})
        finally:
            self._retry.lock.release()

    # -- versions ----------------------------------------------------------

    def drop(self) -> None:
        """Delete the collection: the shard folder goes."""
        with self._retry.lock:
            self.close()
            if self.path.exists():
                shutil.rmtree(self.path)
            self._sparse = self._bound = None

    def point_alias(self, alias: str) -> bool:
        """Edge has no aliases: the catalog alone names the live version."""
        return False

    def alias_target(self, alias: str) -> str | None:
        return None

    def disk_bytes(self) -> int | None:
        return folder_bytes(self.path)

    # -- index building ----------------------------------------------------

    def wants_index(self) -> bool:
        """Enough points, and enough of them unindexed (``optimize.wants_index``),
        in a shard that can be written (closing one that cannot: ``left_open``)."""
        if not self.exists() or unwritable(self.path) is not None:
            return False
        n = int(self._retry("info", lambda: self.shard.info()).points_count)
        return wants_index(self.path, n, read_config(self.path), self.index_min_points)

    def seal_due(self) -> bool:
        """A segment's worth outside the index, and a build would be made of it."""
        if self._bound is None and self.exists():  # set once, when the shard was made
            self._bound = segment_points(read_config(self.path))
        return seal_due(self.path, self._bound or 0, self._seal_after) and self.wants_index()

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """Build the HNSW index in a child process if it pays off (``optimize``);
        gives way as soon as ``idle()`` turns False or a search waits."""
        if not self.wants_index():
            return True
        with self._retry.lock:
            self.close()
            done = optimize(
                self.path,
                lambda: bool(self._searches_waiting) or (idle is not None and not idle()),
            )
            self.open()
        # one that gave way is not asked for again at every batch the writes add
        self._seal_after = 0 if done else (written(self.path) or 0) * 11 // 10
        return done
