"""Rollout: a version built beside the live one, switched to, rolled back, dropped.

Every sync goes through here: `mdindex backfill`, the daemon, `mdindex
versions` and the MCP refresh tool. The versions and their catalog are
described in ``mdindex.versions.catalog``; the order of every step here is what keeps
search up through a crash at any point:

- **build**: the catalog records the new version as ``building`` before its
  collection exists; the version fills like any index (pending IDs, upserts,
  state commits), taking every vector the live version holds for the same
  model and embedded text. A crash leaves it ``building``; the next run goes
  on from what its state recorded. Nothing reads it meanwhile.
- **complete**: the store must hold exactly the points its state committed,
  nothing pending, and at least half the documents the live version has (an
  unmounted root must not replace the index with an empty one).
- **switch**: the alias first (stores that have aliases), then the catalog in
  one rename. A crash between them is settled on the next open: the alias
  wins when it names a complete version, else it is pointed back.
- **drop**: the catalog marks the version ``dropping`` first, then the
  collection and its state go, then the catalog forgets it; the live version
  is never dropped. A drop a crash interrupted is finished on the next open.
- **adopt**: an index from before versions (one collection named like the
  alias) becomes the first version without embedding: the edge folder is
  renamed; a qdrant-client or server collection is copied (vectors as
  stored), then removed so the alias can take its name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from mdindex.config import Settings
from mdindex.errors import ConfigError, PruneRefused, SpaceRefused, StoreError
from mdindex.index import guard
from mdindex.index.groups import GROUP_CHARS
from mdindex.index.indexer import Hooks, Indexer
from mdindex.index.lock import WriterLock
from mdindex.index.planning import now_iso
from mdindex.index.summary import Summary
from mdindex.index.writer import crash_point
from mdindex.runtime import (
    Loaded,
    code_versions,
    collection_of,
    make_indexer,
    make_store,
    state_path,
)
from mdindex.sinks import Store
from mdindex.sinks.base import MIN_FREE_BYTES, free_bytes
from mdindex.versions.adopt import adopt, settle_alias
from mdindex.versions.catalog import Catalog, Version

log = logging.getLogger(__name__)

# A new version takes about as much disk as the live one (same files, the same
# model's vectors); this much more is asked for on top, for segments and WAL.
SPACE_MARGIN = 1.2


def remove_state(path: Path) -> None:
    """A version's local state, with SQLite's files beside it."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# (settings, hooks=..., group_chars=..., siblings=...) -> the sync core on one version
IndexerFactory = Callable[..., Indexer]


class Rollout:
    """The versions of one configured collection, under the writer lock.
    ``factory`` stands in for the models the settings name (tests, benchmarks);
    ``loaded``, the models an earlier run loaded, shared and added to (the
    Python API's next sync loads no model again)."""

    def __init__(
        self,
        settings: Settings,
        factory: IndexerFactory | None = None,
        loaded: Loaded | None = None,
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.catalog = Catalog.load(settings)
        self.loaded = loaded or Loaded()

    # -- what each version is ------------------------------------------------

    @property
    def live(self) -> str | None:
        return self.catalog.live

    def target(self) -> str:
        return self.catalog.target(self.settings)

    def settings_for(self, fp: str) -> Settings:
        return self.catalog.settings_for(self.settings, fp)

    def indexer(
        self,
        fp: str,
        *,
        hooks: Hooks | None = None,
        group_chars: int = GROUP_CHARS,
        siblings: Sequence[Indexer] = (),
    ) -> Indexer:
        """The sync core on one version; ``siblings``, other versions whose vectors
        it may take (only those of the same model can have any)."""
        settings = self.settings_for(fp)
        siblings = [s for s in siblings if s.settings.model == settings.model]
        if self.factory is not None:
            return self.factory(settings, hooks=hooks, group_chars=group_chars, siblings=siblings)
        return make_indexer(
            settings,
            self.loaded.models(settings),
            hooks=hooks,
            group_chars=group_chars,
            siblings=siblings,
        )

    def siblings(self, fp: str, opened: Sequence[str] = ()) -> list[Indexer]:
        """``Catalog.siblings`` of ``fp``, each opened for its vectors; the caller
        closes them."""
        model = self.settings_for(fp).model
        return [self.indexer(other) for other in self.catalog.siblings(fp, model, opened)]

    def store(self, fp: str) -> Store:
        return make_store(self.settings_for(fp))

    # -- opening: adoption and settling what a crash left ----------------------

    def open(self) -> Rollout:
        """Adopt an index from before versions, and finish what a crash interrupted
        (a switch, a drop, the retention after a switch)."""
        if not self.catalog.versions:
            adopt(self.settings, self.catalog)
        settle_alias(self.settings, self.catalog)
        # a drop or a switch's clean-up a crash interrupted
        for fp, version in list(self.catalog.versions.items()):
            if version.status == "dropping":
                self.drop(fp)
        self.retain()
        return self

    # -- building ------------------------------------------------------------

    def begin(self, fp: str) -> None:
        """Record a version about to be built, after checking it fits on the disk."""
        if fp in self.catalog.versions:
            return
        if self.live is not None:
            check_space(self.settings, self.store(self.live))
        settings = self.settings_for(fp)
        params = settings.index.params()
        self.catalog.versions[fp] = Version(
            collection_of(settings), params, "building", now_iso(), code=code_versions(params)
        )
        self.catalog.commit()
        log.info("building version %s beside %s", fp, self.live or "nothing")

    def complete(self, fp: str, indexer: Indexer, embedded: int, force: bool = False) -> None:
        """Mark a built version complete once its store and state agree, and it
        has at least half the live version's documents (unless ``force``).
        ``embedded``: the chunks its build embedded, for `versions list`."""
        committed, pending, stored = indexer.point_tally()
        if pending or stored != committed:
            raise StoreError(
                f"version {fp} is not complete: its store holds {stored} points, its state "
                f"{committed} committed and {pending} pending; run it again"
            )
        documents = indexer.counts()[0]
        live = self.catalog.versions.get(self.live or "")
        if live is not None and not force and documents < live.documents / 2:
            raise PruneRefused(
                f"version {fp} holds {documents} documents against {live.documents} in the "
                "live one; not switching to it (is a root missing? pass --force if intended)"
            )
        version = self.catalog.versions[fp]
        version.status = "complete"
        version.completed_at = version.completed_at or now_iso()
        version.points, version.documents = stored, documents
        version.embedded += embedded
        self.catalog.commit()

    def record(self, fp: str, indexer: Indexer) -> None:
        """Remember what a version holds after a sync of it (for `versions list`)."""
        version = self.catalog.versions.get(fp)
        if version is None:
            return
        documents, points = indexer.counts()
        if (version.documents, version.points) != (documents, points):
            version.documents, version.points = documents, points
            self.catalog.commit()

    def switch(self, fp: str, indexer: Indexer | None = None) -> None:
        """Make a complete version live: the alias, then the catalog. ``indexer``:
        the version's when this process has it open (edge opens a store once)."""
        version = self.catalog.versions[fp]
        if version.status != "complete":
            raise ConfigError(f"versions: {fp} is {version.status}, not complete")
        self.catalog.switching = fp
        self.catalog.commit()
        crash_point("before_switch")
        if indexer is not None:
            indexer.point_alias(self.settings.collection)
        else:
            store = self.store(fp)
            try:
                store.open().point_alias(self.settings.collection)
            finally:
                store.close()
        self.catalog.make_live(fp, self.settings)
        crash_point("after_switch")
        log.info("version %s is live (%s)", fp, version.summary())

    # -- retention -----------------------------------------------------------

    def retain(self) -> list[str]:
        """Drop what ``keep_versions`` does not keep (``Catalog.to_retire``)."""
        dropped = self.catalog.to_retire(self.settings)
        for fp in dropped:
            self.drop(fp)
        return dropped

    def drop(self, fp: str) -> None:
        """Delete one version that is not live: catalog mark, collection, state, record."""
        if fp == self.live:
            raise ConfigError(f"versions: {fp} is live; switch to another version first")
        version = self.catalog.versions[fp]
        version.status = "dropping"
        self.catalog.commit()
        store = self.store(fp)
        try:
            store.open()
            if store.exists():
                store.drop()
        finally:
            store.close()
        crash_point("during_drop")
        remove_state(state_path(self.settings_for(fp)))
        del self.catalog.versions[fp]
        if self.catalog.pinned and self.catalog.pinned.get("fingerprint") == fp:
            self.catalog.pinned = None
        self.catalog.commit()
        log.info("dropped version %s", fp)

    # -- a whole sync ----------------------------------------------------------

    def backfill(
        self,
        *,
        hooks: Hooks | None = None,
        dry_run: bool = False,
        prune: bool = True,
        force: bool = False,
        run: Callable[[Indexer, bool, bool], Summary] | None = None,
    ) -> Summary:
        """Make the target version equal to the files; when it is not the live one,
        build it beside the live one (which goes on answering) and switch to it
        once complete. ``run(indexer, prune, force)`` does the sync when given (Ray)."""
        target, live = self.target(), self.live
        switch_anyway = force  # a version with far fewer documents than the live one
        missing = "" if force else guard.not_a_folder(self.settings.root_list())
        if missing:  # a typo or an unmounted disk, also for a version not built yet
            raise PruneRefused(missing)
        if target != live and not dry_run:
            self.begin(target)  # before anything of it exists
            # a new version holds nothing to prune: the document count decides
            prune, force = True, True
        if dry_run:
            return self._dry_run(target, live, hooks, prune, force)
        with self._indexers(target, live, hooks) as indexer:
            if run is not None:
                summary = run(indexer, prune, force)
            else:
                summary = indexer.backfill(prune=prune, force=force)
            indexer.settle()
            if target == live:
                self.record(target, indexer)
                return summary
            self.complete(target, indexer, summary.chunks_embedded, force=switch_anyway)
            # this run's store: opened anew, edge rewrote files and the next no-op
            self.switch(target, indexer)  # loaded it (2.8 s at 545k points)
        self.retain()
        return summary

    def _dry_run(
        self, target: str, live: str | None, hooks: Hooks | None, prune: bool, force: bool
    ) -> Summary:
        """What a backfill would do; a version not built yet leaves no state behind."""
        with self._indexers(target, live, hooks) as indexer:
            summary = indexer.backfill(dry_run=True, prune=prune, force=force)
        if target not in self.catalog.versions:
            remove_state(state_path(self.settings_for(target)))
        return summary

    @contextmanager
    def _indexers(self, target: str, live: str | None, hooks: Hooks | None) -> Iterator[Indexer]:
        # a sync of the live version needs no other: its vectors are its own
        siblings = self.siblings(target) if target != live else []
        try:
            with self.indexer(target, hooks=hooks, siblings=siblings) as indexer:
                yield indexer
        finally:
            for sibling in siblings:
                sibling.close()

    def use(self, fp: str, hooks: Hooks | None = None) -> Summary | None:
        """Roll back (or forward) to a version: pinned first (the next run finishes
        a switch a crash cut, as in the daemon), caught up, then switched to."""
        fp = self.catalog.to_use([fp])
        self.catalog.pin(fp, self.settings)
        summary = None
        if self.settings.root_list():
            with self.indexer(fp, hooks=hooks) as indexer:
                summary = indexer.backfill(prune=True, force=False)
                self.record(fp, indexer)
        self.switch(fp)
        return summary


def use_version(
    settings: Settings, fingerprint: str, hooks: Hooks | None = None, loaded: Loaded | None = None
) -> tuple[str, Summary | None]:
    """`versions use` with no daemon: under the writer lock, the version named
    caught up (when roots are set) and switched to; its fingerprint, and the sync."""
    with WriterLock(settings.state_dir, settings.collection, "versions use"):
        rollout = Rollout(settings, loaded=loaded).open()
        fp = rollout.catalog.to_use([fingerprint])
        return fp, rollout.use(fp, hooks=hooks)


def drop_versions(settings: Settings, fingerprints: Sequence[str]) -> list[str]:
    """`versions drop` with no daemon: under the writer lock, those named, or every old one."""
    with WriterLock(settings.state_dir, settings.collection, "versions drop"):
        rollout = Rollout(settings).open()
        targets = rollout.catalog.to_drop(settings, fingerprints)
        for fp in targets:
            rollout.drop(fp)
    return targets


def check_space(settings: Settings, live: Store) -> None:
    """Two versions must fit: refuse (exit 2) a build the disk cannot hold.
    ``live``: the live version's store."""
    used = live.disk_bytes()
    if used is None:
        return  # a server's disk is not ours to measure
    folder = settings.store_path
    free = free_bytes(folder)
    need = int(used * SPACE_MARGIN) + MIN_FREE_BYTES
    if free is not None and free < need:
        raise SpaceRefused(
            f"versions: building a new version needs about {need >> 20} MB on {folder} "
            f"(the live one takes {used >> 20} MB) but {free >> 20} MB are free; free "
            "space or drop old versions (mdindex versions drop), then run it again"
        )
