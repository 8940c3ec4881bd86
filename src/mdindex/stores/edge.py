"""The qdrant-edge store: Qdrant's own engine (segments, WAL, HNSW, payload
indexes) embedded in this process, one shard folder per collection.

Index building. Edge has no background optimizer, and ``optimize()`` holds
the GIL for its whole run (about 0.5 ms a point here: 54 s for 100k), which
would freeze the daemon's threads and its systemd watchdog pings. So:

- Below ``index_min_points`` points the store is never optimized and every
  search is exact (recall 1.0). Exact search measured 1.7 ms at 20k points,
  6 ms at 50k and 15 ms at 100k on 2 cores; an index answers in about 1 ms,
  and building one costs about as much CPU as 4,000 to 6,000 exact searches,
  so it pays off only for a large store that is searched a lot.
- Above it, once at least a tenth of the points are not in the index yet,
  ``settle`` closes the shard and optimizes it in a child process, while the
  caller's threads go on. ``settle`` is called only when there is nothing
  else to do, and it gives way: the child is killed as soon as ``idle()``
  says an event arrived or a search is waiting (a killed run leaves the shard
  as it was; tested), and it is tried again at the next quiet moment.
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from mdindex.errors import LayoutMismatch, LockError, StoreError, StoreMismatch
from mdindex.sparse import SPARSE_NAME, Sparse
from mdindex.stores.base import (
    INDEXED_KEYS,
    MIN_FREE_BYTES,
    Hit,
    Point,
    Retrier,
    Scrolling,
    SearchFilter,
    StoreQuery,
    files_signature,
    folder_bytes,
    free_bytes,
    paged,
    sparse_of,
)

if TYPE_CHECKING:
    from qdrant_edge import EdgeShard

log = logging.getLogger(__name__)

CONFIG_FILE = "edge_config.json"
# Queries against the HNSW index look at this many candidates; measured on
# the corpus's real embeddings by bench/stores.py (recall >= 0.99 vs exact).
HNSW_EF = 128
_OPTIMIZE = (
    "import sys\n"
    "from qdrant_edge import EdgeShard\n"
    "shard = EdgeShard.load(sys.argv[1])\n"
    "shard.optimize()\n"
    "shard.close()\n"
)


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
        indexing_threshold_kb: int = 10_000,
    ) -> None:
        self.collection = collection
        self.path = path  # the shard's own folder
        self.batch_points = batch_points
        # In process there is no request size to respect, only the bindings' cost per call.
        self._step = batch_points * 4
        self.batch_bytes = batch_bytes
        self.index_min_points = index_min_points
        # Segments with less vector data than this stay unindexed (Qdrant's default).
        self.indexing_threshold_kb = indexing_threshold_kb
        self._shard: EdgeShard | None = None
        self._retry = Retrier("qdrant-edge", str(path), retry_budget_s, _transient, path)
        self._searches_waiting = 0
        self._sparse: bool | None = None  # the shard has the sparse vector; None: unread

    @property
    def has_sparse(self) -> bool:
        if self._sparse is None:
            if not self.exists():
                return False
            self._sparse = SPARSE_NAME in (self._config().get("sparse_vectors") or {})
        return self._sparse

    @property
    def where(self) -> str:
        return str(self.path)

    # -- shard -----------------------------------------------------------

    def exists(self) -> bool:
        return (self.path / CONFIG_FILE).is_file()

    def open(self) -> EdgeStore:
        # Creation waits for ensure_collection, which knows the vector size.
        if self._shard is None and self.exists():
            self._shard = self._retry("open", self._load)
        return self

    def _load(self) -> EdgeShard:
        from qdrant_edge import EdgeShard

        try:
            return EdgeShard.load(str(self.path))
        except Exception as exc:
            if "WouldBlock" in str(exc):
                raise LockError(
                    f"edge store {self.path} is open in another process; "
                    "stop it or ask the running daemon (mdindex search/status use it)"
                ) from exc
            raise

    @property
    def shard(self) -> EdgeShard:
        self.open()
        if self._shard is None:
            raise StoreError(f"edge store {self.path} has no collection yet")
        return self._shard

    def close(self) -> None:
        with self._retry.lock:
            if self._shard is not None:
                try:
                    self._shard.flush()
                    self._shard.close()
                except Exception as exc:  # closing must never mask the real outcome
                    log.debug("closing edge shard: %s", exc)
                self._shard = None

    def _config(self) -> dict[str, Any]:
        """The shard's own record of how it was created."""
        try:
            config = json.loads((self.path / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreError(f"edge store {self.path}: unreadable {CONFIG_FILE}") from exc
        if not isinstance(config, dict):
            raise StoreError(f"edge store {self.path}: unreadable {CONFIG_FILE}")
        return config

    def ensure_collection(self, dimension: int, sparse: bool = True) -> None:
        """Create the shard with its payload indexes, or refuse one whose vectors differ."""
        if self.exists():
            config = self._config()
            vectors = config.get("vectors")
            params = vectors.get("") if isinstance(vectors, dict) else None
            if not isinstance(vectors, dict) or not isinstance(params, dict) or len(vectors) != 1:
                raise StoreMismatch(
                    f"edge store {self.path} uses named vectors; choose another collection"
                )
            if params.get("size") != dimension or params.get("distance") != "Cosine":
                raise StoreMismatch(
                    f"edge store {self.path} has {params.get('size')}-d "
                    f"{params.get('distance')} vectors but the model gives {dimension}-d Cosine; "
                    "use another --collection or delete that one"
                )
            self._sparse = SPARSE_NAME in (config.get("sparse_vectors") or {})
            if sparse and not self._sparse:
                raise LayoutMismatch(f"edge store {self.path} has no {SPARSE_NAME!r} sparse vector")
            self.open()
            return
        from qdrant_edge import (
            Distance,
            EdgeConfig,
            EdgeOptimizersConfig,
            EdgeShard,
            EdgeSparseVectorParams,
            EdgeVectorParams,
            Modifier,
        )

        log.info("creating edge store %s (%d-d cosine)", self.path, dimension)
        shard_config = EdgeConfig(
            vectors=EdgeVectorParams(size=dimension, distance=Distance.Cosine),
            # IDF is applied by the engine at query time (see mdindex.sparse)
            sparse_vectors=(
                {SPARSE_NAME: EdgeSparseVectorParams(modifier=Modifier.Idf)} if sparse else None
            ),
            optimizers=EdgeOptimizersConfig(indexing_threshold=self.indexing_threshold_kb),
        )

        def create() -> EdgeShard:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return EdgeShard.create(str(self.path), shard_config)

        self._shard = self._retry("create", create)
        self._sparse = sparse
        self._ensure_indexes()

    def _ensure_indexes(self) -> None:
        from qdrant_edge import PayloadSchemaType, UpdateOperation

        have = set(self._retry("info", lambda: self.shard.info().payload_schema))
        for key in INDEXED_KEYS:
            if key not in have:
                op = UpdateOperation.create_field_index(key, PayloadSchemaType.Keyword)
                self._retry(f"payload index {key}", lambda op=op: self.shard.update(op))  # type: ignore[misc]

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
            batch = [EdgePoint(p.id, self._vector(p), p.payload) for p in points[lo : lo + step]]
            op = UpdateOperation.upsert_points(batch)
            self._retry("upsert", lambda op=op: self._update(op))  # type: ignore[misc]
        return len(points)

    def _vector(self, point: Point) -> Any:
        from qdrant_edge import SparseVector

        dense = point.vector if isinstance(point.vector, list) else list(point.vector)
        if point.sparse is None or not self.has_sparse:
            return dense
        return {"": dense, SPARSE_NAME: SparseVector(point.sparse.indices, point.sparse.values)}

    def _update(self, op: Any) -> None:
        # Edge writes through memory maps: on a full disk a write does not fail,
        # the kernel kills the process with SIGBUS. So a nearly full disk is
        # refused here, as an error the retry loop understands.
        free = free_bytes(self.path)
        if free is not None and free < MIN_FREE_BYTES:
            raise OSError(
                errno.ENOSPC,
                f"No space left on device: under {MIN_FREE_BYTES >> 20} MB free for the edge store",
            )
        self.shard.update(op)

    def delete(self, ids: Sequence[str]) -> int:
        from qdrant_edge import UpdateOperation

        ids = list(ids)
        if not ids or not self.exists():
            return 0
        for i in range(0, len(ids), self._step):
            op = UpdateOperation.delete_points(list(ids[i : i + self._step]))
            self._retry("delete", lambda op=op: self._update(op))  # type: ignore[misc]
        return len(ids)

    def _records(
        self, where: Any, payload: Sequence[str] | bool, with_vectors: bool, page: int
    ) -> Iterator[Any]:
        from qdrant_edge import ScrollRequest

        selector = list(payload) if not isinstance(payload, bool) else payload

        def fetch(offset: Any) -> Any:
            request = ScrollRequest(
                offset=offset,
                limit=page,
                filter=where,
                with_payload=selector,
                with_vector=with_vectors,
            )
            return self._retry("scroll", lambda: self.shard.scroll(request))

        return paged(fetch)

    def search(self, query: StoreQuery) -> list[Hit]:
        from qdrant_edge import Fusion, Prefetch, Query, QueryRequest, SearchParams, SparseVector

        if not self.exists():
            return []
        # The bindings turn a Python bool into the integer 1 (MatchValue(True)
        # matches `1`, not `true`), so clauses that may hold a boolean are
        # tested here, on more hits.
        checked = tuple(kv for kv in query.filter.where if any(isinstance(v, bool) for v in kv[1]))
        if checked:
            engine = replace(
                query.filter, where=tuple(w for w in query.filter.where if w not in checked)
            )
            wanted = query.k
            query = replace(query, k=min(query.k * 10, 1000), filter=engine)
        where = self._filter(query.filter)
        params = SearchParams(hnsw_ef=max(HNSW_EF, query.candidates, query.k))
        dense = Query.Nearest(list(query.dense)) if query.dense is not None else None
        sparse = (
            Query.Nearest(
                SparseVector(query.sparse.indices, query.sparse.values), using=SPARSE_NAME
            )
            if query.sparse is not None and self.has_sparse
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
            return []
        self._searches_waiting += 1  # tells a running optimization to give way
        try:
            points = self._retry("search", lambda: self.shard.query(request))
        finally:
            self._searches_waiting -= 1
        hits = [Hit(str(p.id), float(p.score), dict(p.payload or {})) for p in points]
        if checked:
            hits = [h for h in hits if _meta_matches(h.payload, checked)][:wanted]
        return hits

    def _filter(self, spec: SearchFilter) -> Any:
        from qdrant_edge import FieldCondition, Filter, MatchAny, MatchPrefix, MatchValue

        if not spec:
            return None
        must: list[Any] = []
        if spec.roots:
            must.append(FieldCondition(key="root", match=MatchAny(list(spec.roots))))
        if spec.path_prefix:
            must.append(FieldCondition(key="doc_path", match=MatchPrefix(spec.path_prefix)))
        for key, values in spec.where:
            must.append(
                Filter(
                    should=[FieldCondition(key=f"meta.{key}", match=MatchValue(v)) for v in values]
                )
            )
        return Filter(must=must)

    def sparse_vectors(self, ids: Sequence[str]) -> dict[str, Sparse]:
        if not ids or not self.has_sparse:
            return {}
        wanted: list[int | UUID | str] = list(ids)
        records = self._retry(
            "retrieve", lambda: self.shard.retrieve(wanted, with_payload=False, with_vector=True)
        )
        out: dict[str, Sparse] = {}
        for rec in records:
            found = sparse_of(rec.vector)
            if found is not None:
                out[str(rec.id)] = found
        return out

    def _doc_filter(self, root: str, rel: str) -> Any:
        from qdrant_edge import FieldCondition, Filter, MatchValue

        return Filter(
            must=[
                FieldCondition(key="root", match=MatchValue(root)),
                FieldCondition(key="doc_path", match=MatchValue(rel)),
            ]
        )

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": "qdrant-edge"}
        if self._shard is None or not self._retry.lock.acquire(blocking=False):
            return out  # closed, or busy building its index
        try:
            info = self._shard.info()
            out |= {"segments": info.segments_count, "indexed_points": info.indexed_vectors_count}
        except Exception as exc:  # status must answer even when the store cannot
            log.debug("edge info: %s", exc)
        finally:
            self._retry.lock.release()
        return out

    # -- versions ----------------------------------------------------------

    def drop(self) -> None:
        """Delete the collection: the shard folder goes."""
        with self._retry.lock:
            self.close()
            if self.path.exists():
                shutil.rmtree(self.path)
            self._sparse = None

    def point_alias(self, alias: str) -> bool:
        """Edge has no aliases: the catalog alone names the live version."""
        return False

    def alias_target(self, alias: str) -> str | None:
        return None

    def disk_bytes(self) -> int | None:
        return folder_bytes(self.path)

    # -- index building ----------------------------------------------------

    def wants_index(self) -> bool:
        """At least ``index_min_points`` points, and enough of them unindexed: a
        tenth of the store, and no less than a segment the optimizer would index."""
        if not self.exists():
            return False
        info = self._retry("info", lambda: self.shard.info())
        if info.points_count < self.index_min_points:
            return False
        config = self._config()
        threshold_kb = (config.get("optimizers") or {}).get("indexing_threshold") or 10_000
        segment_points = int(threshold_kb) * 1024 // (4 * int(config["vectors"][""]["size"]))
        pending = info.points_count - info.indexed_vectors_count
        return pending >= max(info.points_count // 10, segment_points)

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """Build the HNSW index in a child process if it pays off (see the module
        docstring); gives way as soon as ``idle()`` turns False."""
        if not self.wants_index():
            return True
        with self._retry.lock:
            self.close()
            log.info("building the search index of %s in a child process", self.path)
            started = time.monotonic()
            child = subprocess.Popen(
                [sys.executable, "-c", _OPTIMIZE, str(self.path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                while child.poll() is None:
                    if self._searches_waiting or (idle is not None and not idle()):
                        child.kill()
                        log.info("index build gave way after %.1fs", time.monotonic() - started)
                        break
                    time.sleep(0.1)
            finally:
                if child.poll() is None:
                    child.kill()
                _, err = child.communicate()
            if child.returncode == 0:
                log.info("search index built in %.1fs", time.monotonic() - started)
            elif child.returncode > 0:
                log.warning("index build failed: %s", err.decode(errors="replace")[-300:].strip())
            self.open()
        return child.returncode == 0


def _meta_matches(payload: dict[str, Any], where: Sequence[tuple[str, tuple[Any, ...]]]) -> bool:
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
