"""The sync core: what backfill, watch, verify and the Ray driver call.

It owns the store and the local state, and does three jobs:

- consistency: the state must describe the store it sits beside, or it is
  rebuilt from it (``open_store``);
- change detection: what differs between the files and the state, for a whole
  tree or for the paths a watcher names, as one ``Changes`` (``changes``,
  through ``changes.Detector``);
- writing: reading and planning what changed in groups, which ``writer.Writer``
  writes: new points before deletes of old ones, the state last (``apply``).

Planning (text to points) is ``planning.Planner``; verify and repair are in
``verify``. An ``Indexer`` is a context manager: leaving it closes the store
and the state.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mdindex import guard
from mdindex.changes import Changes, Detector, Key
from mdindex.config import Settings
from mdindex.embedding import Embedder
from mdindex.errors import PruneRefused
from mdindex.files import (
    Failure,
    FileRef,
    PathFilter,
    under_failed_folder,
)
from mdindex.models import Document, Summary
from mdindex.planning import DocWork, Planner, now_iso
from mdindex.search import Query, search
from mdindex.state import DocRow, PointRow, State
from mdindex.stores import Store
from mdindex.writer import Writer, _Staged, crash_point

log = logging.getLogger(__name__)

# Larger groups give the embedder longer runs to sort into batches of like
# length: 256 documents made the corpus backfill 10 % faster than 64.
GROUP_DOCS = 256
GROUP_CHARS = 512_000  # about 500 chunks: one embedding call, one upsert round


def store_identity(store: Store) -> str:
    """Which store a state describes: its place and collection."""
    return f"{store.where}#{store.collection}"


@dataclass(frozen=True)
class Hooks:
    """What the daemon hears from the core while it works."""

    on_progress: Callable[[int], None] | None = None  # files read so far in this sync
    stop_requested: Callable[[], bool] | None = None  # checked between groups
    on_indexed: Callable[[list[FileRef]], None] | None = None  # files just committed


# (changes, summary) -> None: the Ray backfill's own way of syncing what changed
SyncRunner = Callable[[Changes, Summary], None]


class Indexer:
    """Makes the store equal to the files, touching only what changed."""

    def __init__(
        self,
        settings: Settings,
        *,
        planner: Planner,
        embedder: Embedder,
        store: Store,
        state: State,
        hooks: Hooks | None = None,
        group_docs: int = GROUP_DOCS,
        group_chars: int = GROUP_CHARS,
        siblings: Sequence[Indexer] = (),
    ) -> None:
        self.settings = settings
        self.planner = planner
        self.embedder = embedder
        self.store = store
        self.state = state
        self.hooks = hooks or Hooks()
        self.group_docs = group_docs
        self.group_chars = group_chars
        self.roots = settings.root_list()
        self.detector = Detector(
            self.roots,
            PathFilter(settings.include, settings.exclude),
            settings.follow_symlinks,
            planner.doc_fingerprint,
        )
        self._store_checked = False
        self.writer = Writer(
            store,
            state,
            embedder,
            planner.doc_fingerprint,
            ensure_open=self.open_store,
            on_indexed=self.hooks.on_indexed,
            siblings=[(s.store, s.state) for s in siblings],
        )

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Indexer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store, remembering what it looked like (for the next fast
        path), then the state."""
        try:
            self.store.close()
            if self._store_checked:
                self.state.put("store_signature", self.store.signature())
            self._store_checked = False
        finally:
            self.state.close()

    def release_siblings(self) -> None:
        """Stop taking vectors from other versions (they are about to close)."""
        self.writer.siblings = []

    def load_model(self) -> None:
        """Load the embedding model now, not on the first change (a daemon starts with it)."""
        self.embedder.load()

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """The store's housekeeping after a sync (an edge store may build its
        search index); False when it gave way to ``idle()`` turning False."""
        if not self._store_checked:
            return True
        return self.store.settle(idle)

    # -- store and state consistency ---------------------------------------

    def open_store(self) -> None:
        """Open the store and make sure the state describes it; rebuild the state if not."""
        if self._store_checked:
            return
        self.store.open()
        self.store.ensure_collection(self.embedder.dimension, sparse=self.settings.sparse_vectors)
        identity = store_identity(self.store)
        reason = ""
        described = self.state.get("store")
        if self.state.fresh or (described is None and self.state.is_empty()):
            # a new state (or one a read-only command left empty, never told a store)
            reason = "no local state" if self.store.count() else ""
        elif described != identity:
            reason = "state belongs to another store"
        else:
            self._recover_inflight()
            interrupted = self.state.invalidate_pending_docs()
            if interrupted:
                log.info(
                    "%d documents were interrupted mid-write; they will be re-synced", interrupted
                )
            committed, pending = self.state.point_counts()
            # An interrupted write may have added its new points and deleted some old ones.
            at_risk = self.state.committed_at_risk()
            stored = self.store.count()
            if not committed - at_risk <= stored <= committed + pending:
                reason = f"state knows {committed} points, store holds {stored}"
        if reason:
            self.rebuild_state(reason)
        self.state.put("store", identity)
        self._store_checked = True

    def _recover_inflight(self) -> None:
        """Documents other processes were writing when a run stopped: whatever the
        store holds for them becomes pending here, so the next sync of each
        document deletes what its plan no longer has."""
        docs = self.state.inflight()
        if not docs:
            return
        log.info("%d documents were being written by workers; reading back their points", len(docs))
        found = [
            (
                root,
                path,
                [PointRow(pid, key) for pid, key in self.store.doc_points(root, path).items()],
            )
            for root, path in docs
        ]
        self.state.mark_pending(found)
        self.state.clear_inflight(docs)

    def rebuild_state(self, reason: str, level: int = logging.WARNING) -> None:
        log.log(level, "rebuilding local state from the store (%s)", reason)
        records = (
            (pid, str(p.get("root", "")), str(p.get("doc_path", "")), str(p.get("vector_key", "")))
            for pid, p, _ in self.store.scroll(payload=["root", "doc_path", "vector_key"])
        )
        n = self.state.rebuild(records)
        self.state.fresh = False
        log.info("state rebuilt with %d points; files will be re-chunked and compared", n)

    def store_unchanged_since_last_run(self) -> bool:
        sig = self.store.signature()
        return bool(sig) and sig != "absent" and self.state.get("store_signature") == sig

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

    def confirm(self, changes: Changes) -> tuple[list[FileRef], list[Failure]]:
        """Of the files ``changes`` flags (by size, mtime or settings), those whose
        text did change, and those that cannot be read now. Reads and parses each
        one; writes nothing (for status)."""
        changed: list[FileRef] = []
        failed: list[Failure] = []
        for ref in changes.files:
            doc = self.planner.read(ref, self.known_hash(ref, changes.rows))
            if isinstance(doc, Failure):
                failed.append(doc)
            elif doc is not None:
                changed.append(ref)
        return changed, failed

    def known_hash(self, ref: FileRef, rows: dict[Key, DocRow]) -> str:
        """The hash a file must still have to count as only touched; "" if none."""
        return self.detector.known_hash(ref, rows)

    # -- backfill ----------------------------------------------------------

    def backfill(
        self,
        *,
        dry_run: bool = False,
        prune: bool = True,
        force: bool = False,
        runner: SyncRunner | None = None,
        keep_going: bool = False,
    ) -> Summary:
        """Make the store equal to the roots. ``runner`` does the syncing of what
        changed (the Ray backfill hands its own); deciding what changed, the
        guard on deletions and the state stay here. Deletions the guard refuses
        raise PruneRefused before anything is written, or, with ``keep_going``
        (the daemon), are left out while the rest is synced, and
        ``summary.refused`` says why."""
        started = time.monotonic()
        summary = Summary(dry_run=dry_run)
        for root in self.roots:
            if not root.path.is_dir() and not force:
                raise PruneRefused(
                    f"root {root.label!r}: {root.path} is not a folder; fix the path, "
                    "or pass --force to prune its documents"
                )
        seen = self.detector.tree()
        present = Counter(label for label, _ in seen.present)
        changes = self.detector.compare(seen, self.state, prune)
        changes = self._guarded(changes, force, keep_going, present)
        must_open = bool(changes or self.state.fresh)
        if not dry_run and (must_open or not self.store_unchanged_since_last_run()):
            self.open_store()
            # the state may have been rebuilt from the store
            changes = self.detector.compare(seen, self.state, prune)
            changes = self._guarded(changes, force, keep_going, present)
        summary.refused = changes.refused
        if runner is not None and not dry_run:
            self._account(changes, summary)
            runner(changes, summary)
            self._finish(changes, summary)
        else:
            self.apply(changes, summary, dry_run=dry_run, guarded=False)
        if not dry_run and not summary.interrupted and not summary.refused:
            self.state.put(guard.STATE_KEY, json.dumps(guard.identities(self.roots)))
        summary.seconds = time.monotonic() - started
        return summary

    def deletion_refused(
        self, deleted: Sequence[Key], present: dict[str, int] | None = None
    ) -> str:
        """Why deleting these documents would be a guess (``mdindex.guard``); "" if
        not. ``present``: files per root label, when a whole scan counted them."""
        if not deleted:
            return ""
        indexed = self.state.doc_count_by_root()
        gone = Counter(label for label, _ in deleted)
        if any(n > indexed.get(label, 0) / 2 for label, n in gone.items()):
            # documents known only by their points count too (a state rebuilt
            # from the store has no rows yet); costlier, so only when it matters
            indexed = self.state.doc_count_by_root(with_points=True)
        return guard.refusal(
            self.roots,
            deleted,
            indexed,
            guard.parse_recorded(self.state.get(guard.STATE_KEY)),
            present,
        )

    def check_deletes(self, deleted: Sequence[Key], present: dict[str, int] | None = None) -> None:
        """Raise PruneRefused when deleting these documents would be a guess."""
        reason = self.deletion_refused(deleted, present)
        if reason:
            raise PruneRefused(reason)

    def _guarded(
        self,
        changes: Changes,
        force: bool,
        keep_going: bool,
        present: dict[str, int] | None = None,
    ) -> Changes:
        """The changes with the deletions the guard refuses: raised, or left out."""
        reason = "" if force else self.deletion_refused(changes.deleted, present)
        if not reason:
            return changes
        if not keep_going:
            raise PruneRefused(reason)
        log.error("not deleting: %s", reason)
        return replace(changes, deleted=[], refused=reason)

    # -- writing -----------------------------------------------------------

    def apply(
        self,
        changes: Changes,
        summary: Summary | None = None,
        *,
        dry_run: bool = False,
        guarded: bool = True,
    ) -> Summary:
        """Index the changed files and remove the deleted documents.

        Deletes run after all writes, so a file renamed within the same batch
        finds its old vectors still in the store and reuses them. With
        ``guarded`` (a watcher's paths), deletions the guard refuses are not
        made, the changed files still are, and ``summary.refused`` says why.
        """
        summary = summary if summary is not None else Summary(dry_run=dry_run)
        if guarded:
            changes = self._guarded(changes, force=False, keep_going=True)
            summary.refused = changes.refused
        self._account(changes, summary)
        # Two stages: while the worker thread embeds one group, this thread
        # writes the group before it and reads and chunks the group after it.
        writer = self.writer
        staged: _Staged | None = None
        with writer.pool() as pool:
            for loaded in self._groups(changes.files, changes.rows, summary, dry_run):
                if self._stopping(loaded, staged):
                    summary.interrupted = True
                    return summary
                works = self._plan(loaded, summary)
                if dry_run:
                    writer.count_dry(works, summary)
                    continue
                nxt = writer.stage(works, pool, staged) if works else None
                if staged is not None:
                    writer.write(staged, summary)
                staged = nxt
            if staged is not None:
                writer.write(staged, summary)
        writer.delete_docs(changes.deleted, summary, dry_run=dry_run)
        if not dry_run:
            self._finish(changes, summary)
        return summary

    def _account(self, changes: Changes, summary: Summary) -> None:
        summary.files_seen += changes.seen
        summary.files_unchanged += changes.unchanged
        for failure in changes.failures:
            summary.fail(failure)

    def _finish(self, changes: Changes, summary: Summary) -> None:
        """Remember when the store last matched the files, and what failed."""
        self.state.note_failures(changes.scope, summary.failures, now_iso())
        self.state.put("last_sync", now_iso())

    def _groups(
        self,
        files: Iterable[FileRef],
        rows: dict[Key, DocRow],
        summary: Summary,
        dry_run: bool,
    ) -> Iterator[list[tuple[FileRef, Document]]]:
        """Read and parse candidates, in groups bounded by documents and characters."""
        loaded: list[tuple[FileRef, Document]] = []
        chars = 0
        for done, ref in enumerate(files, 1):
            item = self._load(ref, self.known_hash(ref, rows), summary, dry_run)
            if item is not None:
                loaded.append(item)
                chars += len(item[1].text)
            if self.hooks.on_progress is not None:
                self.hooks.on_progress(done)
            if len(loaded) >= self.group_docs or chars >= self.group_chars:
                yield loaded
                loaded, chars = [], 0
        yield loaded

    def _stopping(self, loaded: list[tuple[FileRef, Document]], staged: _Staged | None) -> bool:
        stop = self.hooks.stop_requested
        if stop is None or not stop():
            return False
        # Nothing of these documents was written yet (the staged group's points
        # are not even marked pending): abandoning them is clean, and the next
        # start or rescan picks them up.
        waiting = len(loaded) + (len(staged.works) if staged is not None else 0)
        log.info("stop requested; abandoning %d documents not yet written", waiting)
        return True

    def _load(
        self, ref: FileRef, known_hash: str, summary: Summary, dry_run: bool
    ) -> tuple[FileRef, Document] | None:
        """Read and parse one candidate; None when it failed or only its mtime moved."""
        doc = self.planner.read(ref, known_hash)
        if isinstance(doc, Failure):
            summary.fail(doc)
            return None
        if doc is None:
            if not dry_run:
                self.writer.touch(ref)
            summary.files_unchanged += 1
            return None
        for warning in doc.warnings:
            summary.warn(ref.root, ref.rel, warning)
        return ref, doc

    def _plan(self, loaded: list[tuple[FileRef, Document]], summary: Summary) -> list[DocWork]:
        """Chunk a group of documents in one batch and plan their points."""
        if not loaded:
            return []
        works = []
        for item in self.planner.plan(loaded):
            if isinstance(item, Failure):
                summary.fail(item)
            else:
                works.append(item)
        crash_point("after_chunk")
        return works

    def plan_all(self, summary: Summary) -> tuple[list[DocWork], set[Key]]:
        """Every document under the roots, planned from its text, and the known
        documents below folders that could not be listed (for verify). Failures
        land in ``summary``; nothing is written."""
        seen = self.detector.tree()
        for failure in seen.failures:
            summary.fail(failure)
        works = [
            work
            for loaded in self._groups(seen.present.values(), {}, summary, dry_run=True)
            for work in self._plan(loaded, summary)
        ]
        kept = {k for k in self.state.known_docs() if under_failed_folder(k, seen.unlisted)}
        return works, kept

    # -- vectors -----------------------------------------------------------

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, tuple[str, list[float]]]:
        return self.store.vectors(ids)

    def stored_payloads(self) -> Iterator[tuple[str, dict[str, Any]]]:
        self.open_store()
        for pid, payload, _ in self.store.scroll(payload=True):
            yield pid, payload

    # -- what the Ray driver and verify write through (and ``writer``) -----

    def vector_donors(self) -> dict[str, str]:
        """A stored point for every vector key the state knows."""
        return self.state.vector_donors()

    def mark_inflight(self, docs: Iterable[Key]) -> None:
        """Documents workers are about to write: their points are known only to the store."""
        self.state.mark_inflight(docs)

    def clear_inflight(self, docs: Iterable[Key]) -> None:
        self.state.clear_inflight(docs)

    def rewrite(
        self,
        works: Sequence[DocWork],
        drop: Sequence[str],
        distrust: Collection[str],
        committed: Iterable[DocWork],
        summary: Summary,
    ) -> None:
        """Repair: write ``works`` again (keys in ``distrust`` re-embedded), delete
        the points ``drop``, and start the state over from the store, with
        ``committed`` recorded as written."""
        planned = [p for w in works for p in w.points]
        if planned:
            vectors = self.writer.vectors_for(planned, summary, distrust=distrust)
            stamp = now_iso()
            self.store.upsert([p.point(vectors[p.vector_key], stamp) for p in planned])
            summary.points_upserted += len(planned)
        summary.points_deleted += self.store.delete(drop)
        self.rebuild_state("after repair", logging.INFO)
        self.state.commit_docs(self.writer.rows(committed), now_iso())

    # -- what status and search read ---------------------------------------

    def search(self, query: Query) -> list[dict[str, Any]]:
        """The chunks that best answer ``query``, as users see them."""
        return search(self.embedder, self.planner.sparse, self.store, query)

    def store_status(self, points: int | None = None) -> dict[str, Any]:
        """Where the store is, how many points it holds, and what its engine says
        about itself. ``points`` when the caller knows them (a daemon must not
        wait behind a long write to count); else counted, without any write."""
        if points is None:
            points = self.store.open().count()
        return {"store": self.store.where, "points": points, **self.store.describe()}

    def embedding_status(self) -> dict[str, Any]:
        """How the embedder computes and why (``mdindex.calibration``)."""
        return self.embedder.describe()

    def counts(self) -> tuple[int, int]:
        """Documents and points the state records as indexed."""
        return self.state.doc_count(), self.state.point_counts()[0]

    def last_sync(self) -> str | None:
        return self.state.get("last_sync")

    def failures(self) -> list[dict[str, str]]:
        """Files the last syncs could not index, with why."""
        return self.state.failures()
