"""One version of the index as a reader sees it: its store and state, with the
model that embeds its queries. ``indexer.Indexer`` is the same view with the
power to write."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Self

from mdindex.config import Settings, StoreGroup
from mdindex.documents.files import Failure, FileRef, PathFilter
from mdindex.documents.reading import load_document
from mdindex.embedding.embedder import Embedder
from mdindex.embedding.sparse import Sparse
from mdindex.index import graph, vectors
from mdindex.index.changes import Changes, Detector, Key
from mdindex.index.planning import Planner
from mdindex.index.search import PathsUnder, Query, search
from mdindex.index.state import DocRow, State, names_files, points_under
from mdindex.index.tables import languages as state_languages
from mdindex.sinks import Store

log = logging.getLogger(__name__)

# The state's record of how the last run that embedded anything embedded it.
LAST_RUN_EMBEDDING = "last_run_embedding"


def path_namer(state: Path | None, storage: StoreGroup) -> PathsUnder | None:
    """Where a search finds the documents under a path prefix
    (``index.search.name_paths``): the state at ``state``, on edge only. A
    server may hold points other writers made, and qdrant-client's local mode
    tests a named path against every point in Python (6,000 points, 3,000
    named: 3.90 s, and 0.06 s as a prefix)."""
    return partial(points_under, state) if state is not None and storage.edge else None


def _read_ahead(store: Store) -> None:
    try:
        store.read_ahead()
    except Exception as exc:  # a thread's exception would reach no one
        log.warning("reading the store ahead failed: %s", exc)


class IndexView:
    """Reads one version: what changed in the files, search, what status shows,
    stored vectors."""

    def __init__(
        self,
        settings: Settings,
        *,
        planner: Planner,
        embedder: Embedder,
        store: Store,
        state: State,
    ) -> None:
        self.settings = settings
        self.planner = planner
        self.embedder = embedder
        self.store = store
        self.state = state
        self.roots = settings.root_list()
        self.detector = Detector(
            self.roots,
            PathFilter(settings.include, settings.exclude),
            settings.follow_symlinks,
            planner.doc_fingerprint,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.state.close()
            close = getattr(self.embedder, "close", None)  # an embedding server's connections
            if close is not None:
                close()

    def load_model(self) -> None:
        """Load the embedding model now, not on the first call (a daemon starts with it)."""
        self.embedder.load()

    # -- change detection --------------------------------------------------

    def changes(
        self, paths: Iterable[str] | None = None, folders: Iterable[str] | None = None
    ) -> Changes:
        """What differs between the files and the state: under every root when
        neither ``paths`` nor ``folders`` is given, else at those absolute paths
        (files) and below those folders."""
        whole = paths is None and folders is None
        seen = self.detector.tree() if whole else self.detector.paths(paths or (), folders or ())
        return self.detector.compare(seen, self.state)

    def scanned_folders(self) -> dict[tuple[int, int], str]:
        """The folders the last ``changes`` listed (the whole tree, or below the
        folders it was given), by device and inode."""
        return self.detector.folders

    def confirm(self, changes: Changes) -> tuple[list[FileRef], list[Failure]]:
        """Of the files ``changes`` flags (by size, mtime or settings), those whose
        text did change, and those that cannot be read now. Reads and parses each
        one; writes nothing (for status)."""
        changed: list[FileRef] = []
        failed: list[Failure] = []
        for ref in changes.files:
            doc = load_document(ref, self.settings, self.known_hash(ref, changes.rows))
            if isinstance(doc, Failure):
                failed.append(doc)
            elif doc is not None:
                changed.append(ref)
        return changed, failed

    def known_hash(self, ref: FileRef, rows: dict[Key, DocRow]) -> str:
        """The hash a file must still have to count as only touched; "" if none."""
        return self.detector.known_hash(ref, rows)

    # -- what status and search read ---------------------------------------

    def search(self, query: Query) -> list[dict[str, Any]]:
        """The chunks that best answer ``query``, as users see them."""
        return search(
            self.embedder,
            self.planner.sparse,
            self.store,
            query,
            self.planner.query_prompt,
            self.planner.model_languages,
            path_namer(self.state.path, self.settings.storage),
        )

    def store_status(self, points: int | None = None) -> dict[str, Any]:
        """Where the store is, how many points it holds, and what its engine says
        about itself. ``points`` when the caller knows them (a daemon must not
        wait behind a long write to count); else counted, without any write."""
        if points is None:
            points = self.store.count()  # opens the store only where it exists
        return {"store": self.store.where, "points": points, **self.store.describe(points)}

    def store_unchanged_since_last_run(self) -> bool:
        """The store's files are as the last run that opened it left them."""
        sig = self.store.signature()
        return names_files(sig) and self.state.get("store_signature") == sig

    def known_points(self) -> int | None:
        """The store's points as the state counts them, where that count is the
        store's (its files unchanged since the last run, no write pending); None
        otherwise. Offline status then opens no store."""
        if not self.store_unchanged_since_last_run():
            return None
        committed, pending = self.state.point_counts()
        return None if pending else committed

    def embedding_status(self) -> dict[str, Any]:
        """How the embedder computes and why (``mdindex.embedding.calibration``),
        and how the last run that embedded anything did, where that differs
        (a one-shot run chooses for its own count of texts)."""
        described = self.embedder.describe()
        try:
            last = json.loads(self.state.get(LAST_RUN_EMBEDDING) or "{}")
        except (ValueError, RecursionError):  # the state is a cache: damaged, not shown
            last = {}
        return described | ({"last_run": last} if last and last != described else {})

    def point_tally(self) -> tuple[int, int, int]:
        """Points the state committed, those it has pending, and those the store
        holds: a version is complete when the first and last agree and none wait."""
        committed, pending = self.state.point_counts()
        return committed, pending, self.store.open().count()

    def point_alias(self, alias: str) -> bool:
        """Make ``alias`` name this store's collection (stores with aliases)."""
        return self.store.point_alias(alias)

    def counts(self) -> tuple[int, int]:
        """Documents and points the state records as indexed."""
        return self.state.doc_count(), self.state.point_counts()[0]

    def graph_digests(self) -> dict[tuple[str, str], str]:
        """Each document's recorded link graph, as ``Graph.digest`` (for verify)."""
        return graph.digests(self.state.db)

    def misresolved_links(self) -> set[tuple[str, str]]:
        """Documents with a link recorded as going elsewhere than it resolves now."""
        return graph.misresolved(self.state.db)

    def unresolved_links(self) -> int:
        """Local links to no indexed document (``index.graph``)."""
        return graph.unresolved_count(self.state.db)

    def languages(self) -> dict[str, int]:
        """Documents indexed per language ("" unknown)."""
        return state_languages(self.state.db)

    def last_sync(self) -> str | None:
        return self.state.get("last_sync")

    def failures(self) -> list[dict[str, str]]:
        """Files the last syncs could not index, with why."""
        return self.state.failures()

    # -- stored vectors ----------------------------------------------------

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float]]]:
        return self.store.vectors(ids)

    @property
    def has_sparse(self) -> bool:
        """The store keeps sparse vectors beside the dense ones."""
        return self.store.has_sparse

    def stored_sparse(self, ids: Sequence[str]) -> dict[str, Sparse]:
        return self.store.sparse_vectors(ids)

    def stored_payloads(
        self, docs: Sequence[tuple[str, str]] | None = None, keys: Sequence[str] | bool = True
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The stored points' payloads (the ``keys`` of them), of every document
        or of ``docs`` alone, streamed from the store a page at a time."""
        self.store.open()
        for pid, payload, _ in self.store.scroll(payload=keys, docs=docs):
            yield pid, payload

    def let_go(self) -> None:
        """Give back the memory the store's points read so far took (``Store.let_go``)."""
        self.store.let_go()

    def read_ahead(self) -> None:
        """Have the store's files that searches read at random read into the page
        cache, in a thread (``Store.read_ahead``): the daemon's first searches
        after its start or an index build then wait on no disk."""
        threading.Thread(
            target=_read_ahead, args=(self.store,), name="read-ahead", daemon=True
        ).start()

    def vector_donors(self) -> dict[str, str]:
        """A stored point for every vector key the state knows."""
        return vectors.donors(self.state.db)
