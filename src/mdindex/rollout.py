"""Rollout: a version built beside the live one, switched to, rolled back, dropped.

Every sync goes through here: `mdindex backfill`, the daemon, `mdindex
versions` and the MCP refresh tool. The versions and their catalog are
described in ``mdindex.versions``; the order of every step here is what keeps
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdindex.config import Settings
from mdindex.errors import ConfigError, PruneRefused, SpaceRefused, StoreError
from mdindex.migrate import copy_points
from mdindex.models import Summary
from mdindex.planning import now_iso
from mdindex.runtime import (
    Models,
    collection_of,
    make_indexer,
    make_models,
    make_store,
    state_path,
)
from mdindex.state import State
from mdindex.stores import Store
from mdindex.stores.base import MIN_FREE_BYTES, free_bytes
from mdindex.stores.edge import EdgeStore
from mdindex.sync import GROUP_CHARS, Hooks, Indexer, store_identity
from mdindex.versions import Catalog, Version, index_params, version_of
from mdindex.writer import crash_point

log = logging.getLogger(__name__)

# A new version takes about as much disk as the live one (same files, the same
# model's vectors); this much more is asked for on top, for segments and WAL.
SPACE_MARGIN = 1.2


def remove_state(path: Path) -> None:
    """A version's local state, with SQLite's files beside it."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@dataclass
class Progress:
    """A build under way, for status."""

    fingerprint: str
    documents: int
    files_seen: int


# (settings, hooks=..., group_chars=..., siblings=...) -> the sync core on one version
IndexerFactory = Callable[..., Indexer]


class Rollout:
    """The versions of one configured collection, under the writer lock.
    ``factory`` stands in for the models the settings name (tests, benchmarks)."""

    def __init__(self, settings: Settings, factory: IndexerFactory | None = None) -> None:
        self.settings = settings
        self.factory = factory
        self.catalog = Catalog.load(settings)
        self._models: dict[str, Models] = {}

    # -- what each version is ------------------------------------------------

    @property
    def live(self) -> str | None:
        return self.catalog.live

    def target(self) -> str:
        return self.catalog.target(self.settings)

    def settings_for(self, fp: str) -> Settings:
        return self.catalog.settings_for(self.settings, fp)

    def models(self, settings: Settings) -> Models:
        """The models of a version's settings; one embedder per model, shared."""
        key = version_of(settings)
        if key not in self._models:
            same_model = next(
                (m.embedder for m in self._models.values() if m.settings.model == settings.model),
                None,
            )
            self._models[key] = make_models(settings, embedder=same_model)
        return self._models[key]

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
            self.models(settings),
            hooks=hooks,
            group_chars=group_chars,
            siblings=siblings,
        )

    def siblings(self, fp: str, opened: Sequence[str] = ()) -> list[Indexer]:
        """The other complete versions with the model of ``fp`` (but those in
        ``opened``), each opened for its vectors; the caller closes them."""
        model = self.settings_for(fp).model
        return [
            self.indexer(other)
            for other, v in self.catalog.versions.items()
            if other != fp
            and other not in opened
            and v.status == "complete"
            and v.params.get("model") == model
        ]

    def store(self, fp: str) -> Store:
        return make_store(self.settings_for(fp))

    # -- opening: adoption and settling what a crash left ----------------------

    def open(self) -> Rollout:
        """Adopt an index from before versions, and finish what a crash interrupted
        (a switch, a drop, the retention after a switch)."""
        if not self.catalog.versions:
            self._adopt()
        self._settle_alias()
        # a drop or a switch's clean-up a crash interrupted
        for fp, version in list(self.catalog.versions.items()):
            if version.status == "dropping":
                self.drop(fp)
        self.retain()
        return self

    def _adopt(self) -> None:
        """An index from before versions becomes the first version, with the
        settings it was built with as far as it tells them (the model and
        strategy its points name, whether it has sparse vectors), the rest the
        settings' own. When those differ from the settings, the settings'
        version is then built beside it, like after any change."""
        s = self.settings
        legacy = self._legacy_store()
        try:
            legacy.open()
            if not legacy.exists() or legacy.alias_target(s.collection):
                return
            adopted = s.model_copy(update=self._legacy_params(legacy))
        finally:
            legacy.close()
        fp, physical = version_of(adopted), collection_of(adopted)
        if isinstance(legacy, EdgeStore):
            target = s.store_path / physical
            log.info("adopting %s as version %s (renamed, nothing embedded)", legacy.path, fp)
            if target.exists():
                raise ConfigError(f"versions: both {legacy.path} and {target} exist; remove one")
            legacy.path.rename(target)
        else:
            self._copy_legacy(legacy, adopted)
        self.catalog.versions[fp] = Version(
            physical, index_params(adopted), "complete", now_iso(), now_iso(), now_iso()
        )
        self.catalog.live = fp
        if not isinstance(legacy, EdgeStore):
            self.catalog.adopted_from = legacy.collection
        self.catalog.commit()
        old_state = s.state_dir / f"{s.collection}.sqlite3"
        if old_state.exists():
            self._move_state(old_state, adopted)

    def _legacy_params(self, legacy: Store) -> dict[str, Any]:
        params: dict[str, Any] = {"sparse_vectors": legacy.has_sparse}
        for _, payload, _ in legacy.scroll(payload=["model", "strategy"], page=1):
            params |= {k: payload[k] for k in ("model", "strategy") if payload.get(k)}
            break
        return params

    def _legacy_store(self) -> Store:
        """The collection named like the alias, from before versions."""
        store = make_store(self.settings)
        if isinstance(store, EdgeStore):
            return EdgeStore(
                self.settings.collection, path=self.settings.store_path / self.settings.collection
            )
        store.collection = self.settings.collection
        return store

    def _copy_legacy(self, legacy: Store, adopted: Settings) -> None:
        """Copy a qdrant-client or server collection named like the alias into its
        version's collection (vectors as stored; removed once recorded)."""
        target = make_store(adopted)
        log.info(
            "adopting collection %s as %s (copied, nothing embedded)",
            legacy.collection,
            target.collection,
        )
        try:
            legacy.open()
            if target.open().exists():
                target.drop()  # an adoption a crash interrupted: start it over
            copied, _ = copy_points(legacy, target, adopted.prepend_context, adopted.sparse_vectors)
            if target.count() != legacy.count():
                raise StoreError(
                    f"adopting {legacy.collection}: copied {target.count()} of "
                    f"{legacy.count()} points; run it again"
                )
            log.info("adopted %d points", copied)
        finally:
            target.close()
            legacy.close()

    def _move_state(self, old: Path, adopted: Settings) -> None:
        """The old state describes the adopted version: renamed, and told its store."""
        new = state_path(adopted)
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{old}{suffix}")
            if src.exists():
                src.rename(f"{new}{suffix}")
        state = State(new)
        try:
            state.adopt_store(store_identity(make_store(adopted)))
        finally:
            state.close()

    def _settle_alias(self) -> None:
        """What a crash left between the alias and the catalog (stores with
        aliases): a copied legacy collection still to remove, so the alias can
        take its name; a switch whose alias moved before the catalog did
        (recorded), or did not (the alias pointed back). Nothing to do, and
        nothing opened, after a clean run."""
        live, switching = self.live, self.catalog.switching
        if live is None or not (switching or self.catalog.adopted_from):
            return
        store = self.store(live)
        try:
            store.open()
            if self.catalog.adopted_from:
                legacy = self._legacy_store()
                try:
                    if legacy.open().exists() and not legacy.alias_target(legacy.collection):
                        log.info("removing %s, adopted as a version", legacy.collection)
                        legacy.drop()
                finally:
                    legacy.close()
                self.catalog.adopted_from = None
            named = store.alias_target(self.settings.collection)
            if switching and named == self.catalog.versions[switching].collection:
                log.info("a switch to version %s was interrupted; recording it", switching)
                self._record_live(switching)
                return
            if named != self.catalog.versions[live].collection:
                store.point_alias(self.settings.collection)
            self.catalog.switching = None
            self.catalog.commit()
        finally:
            store.close()

    # -- building ------------------------------------------------------------

    def begin(self, fp: str) -> None:
        """Record a version about to be built, after checking it fits on the disk."""
        if fp in self.catalog.versions:
            return
        self.check_space()
        self.catalog.versions[fp] = Version(
            collection_of(self.settings_for(fp)),
            index_params(self.settings_for(fp)),
            "building",
            now_iso(),
        )
        self.catalog.commit()
        log.info("building version %s beside %s", fp, self.live or "nothing")

    def check_space(self) -> None:
        """Two versions must fit: refuse (exit 2) a build the disk cannot hold."""
        if self.live is None:
            return
        store = self.store(self.live)
        used = store.disk_bytes()
        if used is None:
            return  # a server's disk is not ours to measure
        folder = self.settings.store_path
        free = free_bytes(folder)
        need = int(used * SPACE_MARGIN) + MIN_FREE_BYTES
        if free is not None and free < need:
            raise SpaceRefused(
                f"versions: building a new version needs about {need >> 20} MB on {folder} "
                f"(the live one takes {used >> 20} MB) but {free >> 20} MB are free; free "
                "space or drop old versions (mdindex versions drop), then run it again"
            )

    def complete(self, fp: str, indexer: Indexer, embedded: int, force: bool = False) -> None:
        """Mark a built version complete once its store and state agree, and it
        has at least half the live version's documents (unless ``force``).
        ``embedded``: the chunks its build embedded, for `versions list`."""
        committed, pending = indexer.state.point_counts()
        stored = indexer.store.open().count()
        if pending or stored != committed:
            raise StoreError(
                f"version {fp} is not complete: its store holds {stored} points, its state "
                f"{committed} committed and {pending} pending; run it again"
            )
        documents = indexer.state.doc_count()
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

    def switch(self, fp: str, store: Store | None = None) -> None:
        """Make a complete version live: the alias, then the catalog. ``store``:
        the version's store when this process has it open (edge opens once)."""
        version = self.catalog.versions[fp]
        if version.status != "complete":
            raise ConfigError(f"versions: {fp} is {version.status}, not complete")
        self.catalog.switching = fp
        self.catalog.commit()
        crash_point("before_switch")
        if store is not None:
            store.point_alias(self.settings.collection)
        else:
            store = self.store(fp)
            try:
                store.open().point_alias(self.settings.collection)
            finally:
                store.close()
        self._record_live(fp)
        crash_point("after_switch")
        log.info("version %s is live (%s)", fp, version.summary())

    def _record_live(self, fp: str) -> None:
        self.catalog.live, self.catalog.switching = fp, None
        self.catalog.versions[fp].live_since = now_iso()
        own = version_of(self.settings)
        self.catalog.pinned = None if fp == own else {"fingerprint": fp, "over": own}
        self.catalog.commit()

    # -- retention -----------------------------------------------------------

    def retain(self) -> list[str]:
        """Drop what ``keep_versions`` does not keep: the most recently live old
        versions stay; any other old or unfinished one goes."""
        live, target = self.live, self.target()
        old = [fp for fp in self.catalog.versions if fp not in (live, target)]
        old.sort(key=lambda fp: self.catalog.versions[fp].live_since, reverse=True)
        kept = [fp for fp in old if self.catalog.versions[fp].status == "complete"]
        kept = kept[: self.settings.keep_versions]
        dropped = [fp for fp in old if fp not in kept]
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
        self.switch(target)
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
        """Roll back (or forward) to a complete version: caught up with the files
        when roots are set, then switched to, and pinned over the settings."""
        version = self.catalog.versions[fp]
        if version.status != "complete":
            raise ConfigError(
                f"versions: {fp} is {version.status}; only a complete version can be used"
            )
        summary = None
        if self.settings.root_list():
            with self.indexer(fp, hooks=hooks) as indexer:
                summary = indexer.backfill(prune=True, force=False)
                self.record(fp, indexer)
        self.switch(fp)
        return summary

    def rows(self, building: Progress | None = None) -> list[dict[str, Any]]:
        """Every version as `versions list` and `status` show it."""
        target = self.target()
        out = []
        for fp, v in sorted(
            self.catalog.versions.items(), key=lambda kv: kv[1].created_at, reverse=True
        ):
            row: dict[str, Any] = {
                "fingerprint": fp,
                "collection": v.collection,
                "live": fp == self.live,
                "target": fp == target,
                "status": v.status,
                "documents": v.documents,
                "points": v.points,
                "chunks_embedded": v.embedded,
                "settings": v.summary(),
                "created_at": v.created_at,
                "live_since": v.live_since,
            }
            if building is not None and building.fingerprint == fp:
                row["progress"] = f"{building.documents} of {building.files_seen} documents"
            out.append(row)
        if target not in self.catalog.versions:
            params = index_params(self.settings)
            out.insert(
                0,
                {
                    "fingerprint": target,
                    "collection": collection_of(self.settings),
                    "live": False,
                    "target": True,
                    "status": "not built",
                    "settings": Version("", params).summary(),
                },
            )
        return out
