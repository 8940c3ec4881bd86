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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from mdindex.config import Settings
from mdindex.documents.files import (
    FileRef,
)
from mdindex.embedding.embedder import Embedder
from mdindex.errors import PruneRefused
from mdindex.index import consistency, graph, guard
from mdindex.index.changes import Changes, Key
from mdindex.index.groups import GROUP_CHARS, GROUP_DOCS, Groups
from mdindex.index.lookahead import Lookahead
from mdindex.index.planning import DocWork, Planner, now_iso
from mdindex.index.probe import check_model
from mdindex.index.state import State
from mdindex.index.summary import Summary
from mdindex.index.view import LAST_RUN_EMBEDDING, IndexView
from mdindex.index.writer import Staged, Writer
from mdindex.sinks import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hooks:
    """What the daemon hears from the core while it works."""

    on_progress: Callable[[int], None] | None = None  # files read so far in this sync
    stop_requested: Callable[[], bool] | None = None  # checked between groups
    on_indexed: Callable[[list[FileRef]], None] | None = None  # files just committed
    alive: Callable[[], None] | None = None  # called while the writes wait (systemd's ping)


# (changes, summary) -> None: the Ray backfill's own way of syncing what changed
SyncRunner = Callable[[Changes, Summary], None]


class Indexer(IndexView):
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
        super().__init__(settings, planner=planner, embedder=embedder, store=store, state=state)
        self.hooks = hooks or Hooks()
        self.groups = Groups(
            settings,
            planner,
            docs=group_docs,
            chars=group_chars,
            on_progress=self.hooks.on_progress,
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
        self.writer.vectors.siblings = []

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """The store's housekeeping after a sync (an edge store may build its
        search index); False when it gave way to ``idle()`` turning False, or
        the store was never reached (a build it owes waits until it is)."""
        if not self._store_checked:
            return False
        return self.store.settle(idle)

    # -- store and state consistency ---------------------------------------

    def open_store(self) -> bool:
        """Open the store and make sure the state describes it; rebuild the state
        if not. Whether it looked now: the state may then have changed (rebuilt,
        or writes left unfinished taken in); after, it is the process's to keep."""
        if self._store_checked:
            return False
        # the files are about to change: until close() records them, no reader
        # takes them as the last run left them (index.state.store_reopened)
        self.state.put("store_signature", "")
        self.store.open()
        self.store.ensure_collection(self.embedder.dimension, sparse=self.settings.sparse_vectors)
        check_model(self.store, self.planner.payload_model)  # before anything is written
        reason = consistency.mismatch(self.store, self.state)
        if reason:
            consistency.rebuild_state(self.store, self.state, reason)
        self.state.put("store", consistency.store_identity(self.store))
        self._store_checked = True
        return True

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
        missing = [root for root in self.roots if not root.path.is_dir()]
        if missing and not force and not keep_going:
            raise PruneRefused(guard.not_a_folder(missing))
        seen = self.detector.tree()
        changes = self.detector.compare(seen, self.state, prune)
        changes = self._guarded(changes, force, keep_going)
        must_open = bool(changes or self.state.fresh)
        opens = not dry_run and (must_open or not self.store_unchanged_since_last_run())
        if opens and self.open_store():  # the state may have changed: compare again
            changes = self.detector.compare(seen, self.state, prune)
            changes = self._guarded(changes, force, keep_going)
        summary.refused = changes.refused
        if missing and not force and not summary.refused:  # nothing of it was indexed
            summary.refused = f"root {missing[0].label!r} ({missing[0].path}) is not a folder"
        if runner is not None and not dry_run:
            self._account(changes, summary)
            runner(changes, summary)
            self._finish(changes, summary)
        else:
            self.apply(changes, summary, dry_run=dry_run, guarded=False)
        if not dry_run and not summary.interrupted and not summary.refused:
            self.state.put(guard.STATE_KEY, json.dumps(guard.identities(self.roots)))
            # where each root was: `mdindex links` finds files there without a config
            folders = {root.label: str(root.path.absolute()) for root in self.roots}
            self.state.put(graph.ROOT_FOLDERS_KEY, json.dumps(folders))
        if not dry_run:
            summary.languages = self.languages()
            summary.model_languages = list(self.planner.model_languages)
        summary.seconds = time.monotonic() - started
        return summary

    def deletion_refused(
        self, deleted: Sequence[Key], present: dict[str, int] | None = None
    ) -> str:
        """Why deleting these documents would be a guess (``mdindex.index.guard``);
        "" if not. ``present``: files per root label, when a whole scan counted
        them (None: paths that file events named)."""
        return guard.refusal_in(self.state, self.roots, deleted, present)

    def _guarded(self, changes: Changes, force: bool, keep_going: bool) -> Changes:
        """The changes with the deletions the guard refuses: raised, or left out."""
        reason = "" if force else self.deletion_refused(changes.deleted, changes.present)
        return guard.withheld(changes, reason, keep_going)

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
        started = time.monotonic()
        summary = summary if summary is not None else Summary(dry_run=dry_run)
        if guarded:  # a watcher's paths
            changes = self._guarded(changes, False, True)
            summary.refused = changes.refused
        self._account(changes, summary)
        # Two stages: while the worker thread embeds one group, this thread
        # writes the group before it and reads and chunks the group after it.
        writer = self.writer
        ahead = Lookahead(self.embedder, writer.vectors.unknown_keys)
        staged: Staged | None = None
        with writer.pool() as pool:

            def push(works: list[DocWork]) -> None:
                nonlocal staged
                nxt = writer.stage(works, pool, staged)
                if staged is not None:
                    writer.write(staged, summary)
                    self.seal()
                staged = nxt

            known = partial(self.known_hash, rows=changes.rows)
            touch = None if dry_run else writer.touch
            for loaded in self.groups.read(changes.files, known, summary, touch):
                if self._stopping(len(loaded) + ahead.waiting, staged):
                    summary.interrupted = True
                    return summary
                works = self.groups.plan(loaded, summary)
                if dry_run:
                    writer.count_dry(works, summary)
                elif works:
                    for ready in ahead.take(works):
                        push(ready)
            for ready in ahead.finish():
                push(ready)
            if staged is not None:
                writer.write(staged, summary)
                self.seal()
        writer.delete_docs(changes.deleted, summary, dry_run=dry_run)
        if not dry_run:
            if summary.chunks_embedded:  # how, and why: for status after a one-shot run
                summary.embedding = self.embedder.describe()
                self.state.put(LAST_RUN_EMBEDDING, json.dumps(summary.embedding))
            self._finish(changes, summary)
        # the daemon's line said "in 0.00s" after embedding (sync() sets its own total)
        summary.seconds = time.monotonic() - started
        return summary

    def seal(self) -> None:
        """Build the segment the writes filled (``Store.seal_due``) while they
        wait: a cold backfill has no quiet moment before its end. It gives way
        to a stop (and is tried again once a tenth more is written)."""
        if not self.store.seal_due():
            return

        def going_on() -> bool:
            if self.hooks.alive is not None:
                self.hooks.alive()
            return self.hooks.stop_requested is None or not self.hooks.stop_requested()

        self.store.settle(going_on)

    def _account(self, changes: Changes, summary: Summary) -> None:
        summary.files_seen += changes.seen
        summary.files_unchanged += changes.unchanged
        for failure in changes.failures:
            summary.fail(failure)

    def _finish(self, changes: Changes, summary: Summary) -> None:
        """Remember when the store last matched the files, and what failed."""
        self.state.note_failures(changes.scope, summary.failures, now_iso())
        self.state.put("last_sync", now_iso())

    def _stopping(self, unwritten: int, staged: Staged | None) -> bool:
        """Whether a stop was asked for; ``unwritten``: documents read or held
        back (``Lookahead``), none of them written."""
        stop = self.hooks.stop_requested
        if stop is None or not stop():
            return False
        # Nothing of these documents was written yet (the staged group's points
        # are not even marked pending): abandoning them is clean, and the next
        # start or rescan picks them up.
        waiting = unwritten + (len(staged.works) if staged is not None else 0)
        log.info("stop requested; abandoning %d documents not yet written", waiting)
        return True
