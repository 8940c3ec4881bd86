"""Adoption, and what a crash left between the alias and the catalog.

An index from before versions (one collection named like the alias)
becomes the first version without embedding: the edge folder is renamed; a
qdrant-client or server collection is copied (vectors as stored), then removed
so the alias can take its name (``rollout.Rollout`` finishes that on its next
open after a crash). The old state file is renamed and told its store."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mdindex.config import Settings
from mdindex.errors import ConfigError, StoreError
from mdindex.index.consistency import store_identity
from mdindex.index.planning import now_iso
from mdindex.index.state import State
from mdindex.runtime import code_versions, collection_of, make_store, state_path, version_of
from mdindex.sinks import Store
from mdindex.sinks.edge import EdgeStore
from mdindex.versions.catalog import Catalog, Version
from mdindex.versions.migrate import copy_points

log = logging.getLogger(__name__)


def adopt(s: Settings, catalog: Catalog) -> None:
    """An index from before versions becomes the first version, with the
    settings it was built with as far as it tells them (the model and
    strategy its points name, whether it has sparse vectors), the rest the
    settings' own. When those differ from the settings, the settings'
    version is then built beside it, like after any change."""
    legacy = legacy_store(s)
    try:
        legacy.open()
        if not legacy.exists() or legacy.alias_target(s.collection):
            return
        adopted = s.model_copy(update=_legacy_params(legacy))
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
        _copy_legacy(legacy, adopted)
    params = adopted.index.params()
    catalog.versions[fp] = Version(
        physical, params, "complete", now_iso(), now_iso(), now_iso(), code=code_versions(params)
    )
    catalog.live = fp
    if not isinstance(legacy, EdgeStore):
        catalog.adopted_from = legacy.collection
    catalog.commit()
    old_state = s.state_dir / f"{s.collection}.sqlite3"
    if old_state.exists():
        _move_state(old_state, adopted)


def _legacy_params(legacy: Store) -> dict[str, Any]:
    params: dict[str, Any] = {"sparse_vectors": legacy.has_sparse}
    for _, payload, _ in legacy.scroll(payload=["model", "strategy"], page=1):
        params |= {k: payload[k] for k in ("model", "strategy") if payload.get(k)}
        break
    return params


def legacy_store(settings: Settings) -> Store:
    """The collection named like the alias, from before versions."""
    store = make_store(settings)
    if isinstance(store, EdgeStore):
        return EdgeStore(settings.collection, path=settings.store_path / settings.collection)
    store.collection = settings.collection
    return store


def _copy_legacy(legacy: Store, adopted: Settings) -> None:
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


def _move_state(old: Path, adopted: Settings) -> None:
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


def settle_alias(settings: Settings, catalog: Catalog) -> None:
    """What a crash left between the alias and the catalog (stores with
    aliases): a copied legacy collection still to remove, so the alias can
    take its name; a switch whose alias moved before the catalog did
    (recorded), or did not (the alias pointed back). Nothing to do, and
    nothing opened, after a clean run."""
    live, switching = catalog.live, catalog.switching
    if live is None or not (switching or catalog.adopted_from):
        return
    store = make_store(catalog.settings_for(settings, live))
    try:
        store.open()
        if catalog.adopted_from:
            legacy = legacy_store(settings)
            try:
                if legacy.open().exists() and not legacy.alias_target(legacy.collection):
                    log.info("removing %s, adopted as a version", legacy.collection)
                    legacy.drop()
            finally:
                legacy.close()
            catalog.adopted_from = None
        named = store.alias_target(settings.collection)
        if switching and named == catalog.versions[switching].collection:
            log.info("a switch to version %s was interrupted; recording it", switching)
            # not pinned over these settings: the interrupted run's may have been
            # others, and a pin would keep these off their own version for good
            catalog.make_live(switching, None)
            return
        if named != catalog.versions[live].collection:
            store.point_alias(settings.collection)
        catalog.switching = None
        catalog.commit()
    finally:
        store.close()
