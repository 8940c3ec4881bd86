"""What every store offers the sync core, and the retry loop they share."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mdindex.embedding.sparse import Sparse
from mdindex.errors import LockError, StoreError, StoreUnavailable
from mdindex.retry import retry, short
from mdindex.sinks.folder import check_writable

log = logging.getLogger(__name__)
T = TypeVar("T")

# Keyword payload indexes, so per-document lookups and deletes are indexed.
INDEXED_KEYS = ("root", "doc_path", "content_hash", "tags", "lang")
# Below this much free space a local store counts as full (see EdgeStore.upsert).
MIN_FREE_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class Point:
    id: str
    vector: Sequence[float]
    payload: dict[str, Any]
    sparse: Sparse | None = None  # written where the collection has sparse vectors


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Which points a search may return, applied inside the engine: any of
    ``roots``; ``doc_path`` starting with ``path_prefix``; and for each
    (key, values) of ``where``, ``meta.<key>`` equal to one of the values (a
    list in the frontmatter matches when any item does); and each of ``tags``
    among the payload's ``tags``; ``lang`` the payload's ``lang``.

    ``doc_paths``, when given, names every document under ``path_prefix``
    (``index.search.name_paths``): the engine then finds them through its
    keyword index on ``doc_path`` instead of testing the prefix on each point."""

    roots: tuple[str, ...] = ()
    path_prefix: str = ""
    where: tuple[tuple[str, tuple[str | int | bool, ...]], ...] = ()
    tags: tuple[str, ...] = ()
    lang: str = ""
    doc_paths: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.roots or self.path_prefix or self.where or self.tags or self.lang)


# Below this much vector data (KB) a filtered search scans the points the
# filter leaves instead of walking the graph (Qdrant's default, on a server
# and as edge's shard.create sets it); sparse vectors scan below SPARSE_SCAN
# points (Qdrant's default too).
FULL_SCAN_KB = 10_000
SPARSE_SCAN = 5_000


@dataclass(frozen=True, slots=True)
class StoreQuery:
    """One search as a store runs it: dense only, sparse only, or both fused
    in one request (prefetch ``candidates`` of each, then ``fusion``)."""

    k: int
    dense: Sequence[float] | None = None
    sparse: Sparse | None = None
    filter: SearchFilter = SearchFilter()
    fusion: str = "dbsf"  # or "rrf"
    candidates: int = 100
    rrf_k: int = 60  # reciprocal rank fusion's constant, the same on every engine
    exact: bool = False  # scan every vector instead of the index (recall's baseline)


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]


class Store(Protocol):
    """A Qdrant collection as the sync core sees it: IDs are UUID strings, vectors
    are cosine, and every call either succeeds or raises a StoreError."""

    collection: str

    @property
    def where(self) -> str: ...

    def open(self) -> Store: ...

    def close(self) -> None: ...

    def exists(self) -> bool: ...

    def ensure_collection(self, dimension: int, sparse: bool = True) -> None:
        """Create the collection (with a sparse vector when ``sparse``), or check
        an existing one; raises LayoutMismatch when it lacks a sparse vector
        that ``sparse`` asks for."""
        ...

    @property
    def has_sparse(self) -> bool:
        """The collection has the sparse vector (known once ensure_collection ran)."""
        ...

    def count(self) -> int: ...

    def signature(self) -> str:
        """A cheap fingerprint of an embedded store's files ("" for a server,
        "absent" when there is none), read without opening the store."""
        ...

    def vectors(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float]]]:
        """Stored points by ID: the vector key their payload names, and their vector."""
        ...

    def upsert(self, points: Sequence[Point]) -> int: ...

    def delete(self, ids: Sequence[str]) -> int: ...

    def scroll(
        self,
        payload: Sequence[str] | bool = True,
        with_vectors: bool = False,
        page: int = 1024,
        docs: Sequence[tuple[str, str]] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any], list[float] | None]]:
        """Every point, or those of ``docs`` ((root, path) each; a filtered
        scroll, indexed on a server and on edge), a page at a time."""
        ...

    def search(self, query: StoreQuery) -> list[Hit]: ...

    def sparse_vectors(self, ids: Sequence[str]) -> dict[str, Sparse]:
        """The stored sparse vectors of these points (for checks; writing never reads them)."""
        ...

    def doc_points(self, root: str, rel: str) -> dict[str, str]:
        """Every point the store holds for one document: ID -> vector key
        (a filtered scroll, indexed on a server and on edge)."""
        ...

    def let_go(self) -> None:
        """Give back the memory reading points took in this process (an embedded
        store's mapped pages): a pass over every point calls it as it goes."""
        ...

    def read_ahead(self) -> int:
        """Have the files searches read at random read into the page cache (an
        embedded store's; the daemon asks); the bytes asked for."""
        ...

    def describe(self, points: int | None = None) -> dict[str, Any]:
        """What `status` shows about the engine; never waits for a busy store.
        ``points``: the store's count where the caller knows it (a closed store
        may then describe itself from its files)."""
        ...

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """Housekeeping between syncs (building an index); ``idle`` says whether
        it may go on, and is asked often. False when it gave way unfinished."""
        ...

    def seal_due(self) -> bool:
        """Whether the writes should wait for ``settle`` now: an edge store whose
        points outside its index fill a segment (``sinks.edge.optimize``)."""
        ...

    def drop(self) -> None:
        """Delete the collection and everything in it."""
        ...

    def point_alias(self, alias: str) -> bool:
        """Make ``alias`` name this collection, in one atomic step; False when
        the engine has no aliases (the catalog then names the live version)."""
        ...

    def alias_target(self, alias: str) -> str | None:
        """The collection ``alias`` names; None when none (or no aliases)."""
        ...

    def disk_bytes(self) -> int | None:
        """Bytes the collection takes on this machine's disk; None for a server."""
        ...


class Scrolling:
    """What both stores build on their own scroll: every point, and one document's."""

    def exists(self) -> bool:
        raise NotImplementedError

    def _records(
        self, where: Any, payload: Sequence[str] | bool, with_vectors: bool, page: int
    ) -> Iterator[Any]:
        """Every record matching the engine's filter ``where`` (None: all), paged."""
        raise NotImplementedError

    def _docs_filter(self, docs: Sequence[tuple[str, str]]) -> Any:
        """The engine's filter for the points of these documents."""
        raise NotImplementedError

    retrieve_batch = 512  # IDs per retrieve call

    def let_go(self) -> None:
        """A server holds the points: nothing of them is in this process."""

    def read_ahead(self) -> int:
        return 0

    def seal_due(self) -> bool:
        return False  # a server builds its segments itself; local mode has none

    def _retrieve(self, ids: list[str]) -> Sequence[Any]:
        """Records of these IDs with their vector and vector key (a store call)."""
        raise NotImplementedError

    def vectors(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float]]]:
        """Stored points by ID: the vector key their payload names, and their vector."""
        out: dict[str, tuple[str, list[float]]] = {}
        for i in range(0, len(ids), self.retrieve_batch):
            for rec in self._retrieve(list(ids[i : i + self.retrieve_batch])):
                vector = dense_of(rec.vector)
                if vector is not None:
                    key = str((rec.payload or {}).get("vector_key", ""))
                    out[str(rec.id)] = (key, vector)
        return out

    def scroll(
        self,
        payload: Sequence[str] | bool = True,
        with_vectors: bool = False,
        page: int = 1024,
        docs: Sequence[tuple[str, str]] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any], list[float] | None]]:
        if not self.exists() or (docs is not None and not docs):
            return iter(())
        where = self._docs_filter(docs) if docs is not None else None
        return as_rows(self._records(where, payload, with_vectors, page))

    def doc_points(self, root: str, rel: str) -> dict[str, str]:
        if not self.exists():
            return {}
        records = self._records(self._docs_filter([(root, rel)]), ["vector_key"], False, 1024)
        return {str(r.id): str((r.payload or {}).get("vector_key", "")) for r in records}


# The calls that write points: refused while a local store's folder cannot take
# a write, which would SIGBUS (``folder.check_writable``).
WRITES = ("upsert", "delete")


class Retrier:
    """Runs store calls under one lock, retrying transient failures within a
    budget (``mdindex.retry``), and translating the rest to StoreError."""

    def __init__(
        self,
        name: str,
        where: str,
        budget_s: float,
        transient: Callable[[BaseException], bool],
        path: Path | None = None,
    ) -> None:
        self.name = name
        self.where = where
        self.budget_s = budget_s
        self.transient = transient
        self.path = path
        # The daemon searches from its HTTP thread while the main thread writes.
        self.lock = threading.RLock()

    def __call__(self, what: str, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self.lock:
                if what in WRITES and self.path is not None:
                    check_writable(self.path)
                return fn()

        return retry(
            locked,
            what=f"{self.name} {what}",
            budget_s=self.budget_s,
            transient=self.transient,
            failed=lambda exc: StoreError(
                f"{self.name} {what} failed at {self.where}: {short(exc)}"
            ),
            gave_up=lambda exc, attempts: StoreUnavailable(
                f"{self.name} at {self.where} unreachable or refusing writes during "
                f"{what} after {attempts} attempts over {self.budget_s:.0f}s: "
                f"{short(exc)}{diagnose(self.path)}"
            ),
        )


# An embedded store is locked by whoever has it open: a short-lived reader (a
# search without a daemon) holds it for about a second, so an opener waits.
LOCK_WAIT_S = 10.0


def waiting_for_lock(opener: Callable[[], T]) -> T:
    """``opener()``, tried again while another process holds the store's lock,
    for up to LOCK_WAIT_S; then its LockError."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return opener()
        except LockError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def paged(fetch: Callable[[Any], tuple[Sequence[Any], Any]]) -> Iterator[Any]:
    """Every record of a scroll: ``fetch(offset)`` gives a page and the next offset."""
    offset: Any = None
    while True:
        records, offset = fetch(offset)
        yield from records
        if offset is None:
            return


def as_rows(records: Iterator[Any]) -> Iterator[tuple[str, dict[str, Any], list[float] | None]]:
    """A scroll's records as the (id, payload, dense vector) rows stores return."""
    for rec in records:
        yield str(rec.id), dict(rec.payload or {}), dense_of(rec.vector)


def dense_of(vector: Any) -> list[float] | None:
    """The dense vector of a record: the vector itself, or the unnamed one of a
    collection that also has a sparse vector."""
    if isinstance(vector, dict):
        vector = vector.get("")
    return vector if isinstance(vector, list) else None


def sparse_of(vector: Any) -> Sparse | None:
    """The sparse vector of a record, when it has one."""
    from mdindex.embedding.sparse import SPARSE_NAME

    found = vector.get(SPARSE_NAME) if isinstance(vector, dict) else None
    if found is None:
        return None
    pairs = sorted(zip(found.indices, found.values, strict=True))
    return Sparse([int(i) for i, _ in pairs], [float(v) for _, v in pairs])


def sparse_by_id(records: Iterable[Any]) -> dict[str, Sparse]:
    """The sparse vectors of retrieved records, by point ID (those that have one)."""
    out: dict[str, Sparse] = {}
    for rec in records:
        found = sparse_of(rec.vector)
        if found is not None:
            out[str(rec.id)] = found
    return out


def diagnose(path: Path | None) -> str:
    """Why a local store may refuse writes, when the filesystem can tell."""
    if path is None:
        return ""
    try:
        probe = path if path.exists() else path.parent
        stat = os.statvfs(probe)
        if stat.f_flag & os.ST_RDONLY:
            return " (the store folder is on a read-only file system)"
        if stat.f_bavail * stat.f_frsize < MIN_FREE_BYTES:
            return " (the store's disk is full)"
        if not os.access(probe, os.W_OK):
            return " (the store folder is not writable: immutable, or not this user's)"
    except OSError:
        pass
    return ""


def free_bytes(path: Path) -> int | None:
    try:
        stat = os.statvfs(path if path.exists() else path.parent)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize
