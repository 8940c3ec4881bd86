"""Adoption: an index from before versions (one collection named like the alias)
becomes the first version without embedding, on both embedded engines; and
``settle_alias``, what a crash left between the alias and the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mdindex.config import Settings
from mdindex.errors import ConfigError
from mdindex.index.indexer import Indexer
from mdindex.index.state import State
from mdindex.runtime import collection_of, make_models, make_store, state_path, version_of
from mdindex.sinks import Store
from mdindex.versions.adopt import adopt, settle_alias
from mdindex.versions.catalog import Catalog, reader_settings
from tests.conftest import (
    TinyEmbedder,
    assert_same,
    rollout_for,
    run_rollout,
    settings_for,
    stored_points,
)
from tests.faults.helpers import fresh_points

ENGINES = ["edge", "client"]


def live_points(settings: Settings) -> dict[str, dict[str, Any]]:
    """What a search sees: the live version's points, with vectors."""
    return stored_points(reader_settings(settings), vectors=True)


def alias_of(settings: Settings) -> str | None:
    store = make_store(settings)
    try:
        return store.open().alias_target(settings.collection)
    finally:
        store.close()


def legacy_store(settings: Settings) -> Store:
    """A collection named like the alias, as releases before versions made it."""
    from mdindex.sinks.edge import EdgeStore
    from mdindex.sinks.qdrant import QdrantStore

    if settings.store == "edge":
        return EdgeStore(settings.collection, path=settings.store_path / settings.collection)
    return QdrantStore(settings.collection, path=settings.store_path)


def build_legacy(settings: Settings, embedder: Any) -> dict[str, Any]:
    """Index ``settings`` as a release before versions did: a collection named
    like the alias, a state named like it; returns the summary."""
    models = make_models(settings)
    models.chunker.embed = embedder
    state = State(settings.state_dir / f"{settings.collection}.sqlite3")
    store = legacy_store(settings)
    with Indexer(
        settings, planner=models.planner, embedder=embedder, store=store, state=state
    ) as old:
        return old.backfill().as_dict()


def legacy_points(settings: Settings) -> dict[str, dict[str, Any]]:
    store = legacy_store(settings)
    try:
        store.open()
        points = {pid: payload for pid, payload, _ in store.scroll(payload=True)}
    finally:
        store.close()
    for payload in points.values():
        payload.pop("indexed_at", None)
    assert points
    return points


def legacy_exists(settings: Settings) -> bool:
    store = legacy_store(settings)
    try:
        return store.open().exists() and store.alias_target(settings.collection) is None
    finally:
        store.close()


# -- adoption, through a whole run -------------------------------------------------


@pytest.mark.parametrize("store", ENGINES)
def test_an_index_from_before_versions_is_adopted_without_embedding(
    docs_tree: Path, make_settings: Any, tmp_path: Path, store: str
) -> None:
    s = make_settings(docs_tree, store=store)
    build_legacy(s, TinyEmbedder())
    legacy = legacy_store(s)
    held = {pid: p for pid, p, _ in legacy_store(s).open().scroll(payload=True, with_vectors=False)}
    legacy.close()

    tiny = TinyEmbedder()
    result = run_rollout(s, tiny)

    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == 0
    assert result["points_upserted"] == 0  # the old state was adopted with its store
    catalog = Catalog.load(s)
    assert catalog.live == version_of(s) and list(catalog.versions) == [version_of(s)]
    got = live_points(s)
    assert got.keys() == held.keys()
    assert_same(got, fresh_points(tmp_path, docs_tree, store=store))
    assert not (s.state_dir / f"{s.collection}.sqlite3").exists()
    if store == "edge":
        assert not (s.store_path / s.collection).exists()
    else:
        assert alias_of(s) == make_store(s).collection  # the alias took the old name


@pytest.mark.parametrize("store", ENGINES)
def test_a_dense_only_index_from_before_versions_gains_sparse_vectors_without_embedding(
    docs_tree: Path, make_settings: Any, tmp_path: Path, store: str
) -> None:
    """Adopted as what it is (no sparse vectors), then the settings' version,
    with them, is built beside it from its vectors."""
    build_legacy(make_settings(docs_tree, store=store, sparse_vectors=False), TinyEmbedder())
    s = make_settings(docs_tree, store=store)
    tiny = TinyEmbedder()
    result = run_rollout(s, tiny)
    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == 0
    catalog = Catalog.load(s)
    dense = make_settings(docs_tree, store=store, sparse_vectors=False)
    assert catalog.live == version_of(s) and set(catalog.versions) == {
        version_of(s),
        version_of(dense),
    }
    assert_same(live_points(s), fresh_points(tmp_path, docs_tree, store=store))
    assert all(p["_sparse"] is not None for p in live_points(s).values())


def test_a_legacy_index_of_another_model_is_adopted_as_that_model(
    docs_tree: Path, make_settings: Any
) -> None:
    """The model its points name is the adopted version's, so the settings'
    model gets a version of its own (it cannot reuse the other's vectors)."""
    s = make_settings(docs_tree)
    build_legacy(s, TinyEmbedder())
    other = s.model_copy(update={"model": "sentence-transformers/some-other-model"})
    rollout = rollout_for(other, TinyEmbedder())
    live = rollout.catalog.versions[rollout.live or ""]
    assert live.params["model"] == s.model and rollout.live == version_of(s)
    assert rollout.target() == version_of(other) != rollout.live


@pytest.mark.model
def test_with_the_real_model_a_dense_only_legacy_index_gains_sparse_embedding_nothing(
    tmp_path: Path, docs_tree: Path
) -> None:
    from mdindex.index.search import Query
    from mdindex.index.search import search as run_search

    dense_only = settings_for(tmp_path, [docs_tree], sparse_vectors=False)
    models = make_models(dense_only)
    first = build_legacy(dense_only, models.embedder)
    assert first["chunks_embedded"] > 0
    s = settings_for(tmp_path, [docs_tree])
    second = rollout_for(s, models.embedder).backfill()
    assert second.chunks_embedded == 0 and second.files_changed == first["files_changed"]
    store = make_store(reader_settings(s)).open()
    try:
        assert store.has_sparse
        hits = run_search(
            models.embedder,
            make_models(s).planner.sparse,
            store,
            Query("apples", k=1, mode="sparse"),
        )
        assert hits[0]["doc_path"] == "guide/a.md"
    finally:
        store.close()


# -- adopt itself ------------------------------------------------------------------


@pytest.mark.parametrize("store", ENGINES)
def test_without_a_legacy_index_nothing_is_adopted(
    docs_tree: Path, make_settings: Any, store: str
) -> None:
    s = make_settings(docs_tree, store=store)
    catalog = Catalog.load(s)
    adopt(s, catalog)
    assert (catalog.live, catalog.versions, catalog.adopted_from) == (None, {}, None)
    assert not catalog.path.exists()  # nothing recorded


def test_a_name_that_is_already_the_alias_is_not_adopted(
    docs_tree: Path, make_settings: Any, tmp_path: Path
) -> None:
    """Versions exist (the name is an alias): a fresh catalog adopts nothing."""
    s = make_settings(docs_tree, store="client")
    run_rollout(s, TinyEmbedder())
    assert alias_of(s) == collection_of(s)
    fresh = Catalog(tmp_path / "another.versions.json", s.collection)
    adopt(s, fresh)
    assert (fresh.live, fresh.versions) == (None, {})


def test_an_edge_index_is_adopted_by_renaming_its_folder(
    docs_tree: Path, make_settings: Any
) -> None:
    s = make_settings(docs_tree, store="edge")
    build_legacy(s, TinyEmbedder())
    before = legacy_points(s)
    catalog = Catalog.load(s)
    adopt(s, catalog)
    fp = version_of(s)
    assert not (s.store_path / s.collection).exists()
    assert (s.store_path / collection_of(s)).is_dir()
    assert stored_points(s) == before  # the same points, now the version's
    assert catalog.live == fp and catalog.versions[fp].status == "complete"
    assert catalog.adopted_from is None  # nothing left to remove
    assert Catalog.load(s).live == fp  # recorded
    # the old state is the version's now
    assert not (s.state_dir / f"{s.collection}.sqlite3").exists()
    assert state_path(s).exists()


def test_an_edge_adoption_refuses_to_overwrite_a_version(
    docs_tree: Path, make_settings: Any
) -> None:
    s = make_settings(docs_tree, store="edge")
    build_legacy(s, TinyEmbedder())
    (s.store_path / collection_of(s)).mkdir(parents=True)
    catalog = Catalog.load(s)
    with pytest.raises(ConfigError, match=r"both .* exist; remove one"):
        adopt(s, catalog)
    assert (s.store_path / s.collection).exists()  # nothing moved
    assert catalog.versions == {} and not catalog.path.exists()


def test_a_client_index_is_copied_and_the_copy_recorded_before_removing_it(
    docs_tree: Path, make_settings: Any
) -> None:
    """adopt copies and records; the legacy collection goes in settle_alias, so a
    crash in between leaves it to remove on the next open."""
    s = make_settings(docs_tree, store="client")
    build_legacy(s, TinyEmbedder())
    held = legacy_points(s)
    catalog = Catalog.load(s)
    adopt(s, catalog)
    fp = version_of(s)
    assert catalog.live == fp and catalog.adopted_from == s.collection
    assert Catalog.load(s).adopted_from == s.collection  # recorded before anything is removed
    assert legacy_exists(s)
    assert stored_points(s) == held  # copied into the version's collection

    settle_alias(s, Catalog.load(s))

    assert not legacy_exists(s)
    assert alias_of(s) == collection_of(s)  # the alias took the old name
    assert Catalog.load(s).adopted_from is None


# -- settle_alias: what a crash left ---------------------------------------------


def two_versions(docs_tree: Path, make_settings: Any) -> tuple[Settings, Settings]:
    """Settings a and b (client), each a complete version, b live."""
    a = make_settings(docs_tree, store="client")
    b = make_settings(docs_tree, store="client", strategy="token")
    run_rollout(a, TinyEmbedder())
    run_rollout(b, TinyEmbedder())
    catalog = Catalog.load(b)
    assert catalog.live == version_of(b) and version_of(a) in catalog.versions
    return a, b


def interrupted_switch(a: Settings, b: Settings, alias_moved: bool) -> None:
    """The catalog as a switch from a to b left it: a live, b switching; the
    alias on b (the crash came after it moved) or on a (before)."""
    catalog = Catalog.load(b)
    catalog.live, catalog.switching = version_of(a), version_of(b)
    catalog.commit()
    store = make_store(b if alias_moved else a)
    try:
        store.open().point_alias(b.collection)
    finally:
        store.close()


def test_a_switch_whose_alias_moved_is_recorded(docs_tree: Path, make_settings: Any) -> None:
    a, b = two_versions(docs_tree, make_settings)
    interrupted_switch(a, b, alias_moved=True)
    settle_alias(b, Catalog.load(b))
    catalog = Catalog.load(b)
    assert (catalog.live, catalog.switching, catalog.pinned) == (version_of(b), None, None)
    assert alias_of(b) == collection_of(b)


def test_a_recorded_switch_does_not_hold_other_settings_off_their_own_version(
    docs_tree: Path, make_settings: Any
) -> None:
    """A switch to b killed after its alias moved, then a run with a's settings
    (the user went back): b is recorded as live but not pinned over a's
    settings, so the run makes a live again. The long fault mode found b pinned
    and every later run with a's settings kept on b."""
    a, b = two_versions(docs_tree, make_settings)
    interrupted_switch(a, b, alias_moved=True)
    settle_alias(a, Catalog.load(a))
    catalog = Catalog.load(a)
    assert (catalog.live, catalog.switching, catalog.pinned) == (version_of(b), None, None)
    assert catalog.target(a) == version_of(a)
    run_rollout(a, TinyEmbedder())
    catalog = Catalog.load(a)
    assert (catalog.live, catalog.pinned) == (version_of(a), None)
    assert alias_of(a) == collection_of(a)


def test_a_rollback_killed_after_its_alias_moved_holds(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a hostile review: `versions use a` killed after the alias moved
    and before the catalog was written was recorded unpinned, and the next run
    with b's settings switched back to b. The rollback is pinned first now."""
    a, b = two_versions(docs_tree, make_settings)

    def power_cut(*args: Any) -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(Catalog, "make_live", power_cut)
    with pytest.raises(SystemExit):
        rollout_for(b, TinyEmbedder()).open().use(version_of(a))
    monkeypatch.undo()
    assert alias_of(b) == collection_of(a) and Catalog.load(b).live == version_of(b)
    run_rollout(b, TinyEmbedder())
    catalog = Catalog.load(b)
    assert catalog.live == version_of(a)
    assert catalog.pinned == {"fingerprint": version_of(a), "over": version_of(b)}
    assert alias_of(b) == collection_of(a)


def test_a_recorded_switch_ends_a_pin_on_another_version(
    docs_tree: Path, make_settings: Any
) -> None:
    """An interrupted switch to b recorded while a pin names a: the pin ends, as
    a clean switch to b would have ended it (found by a hostile review: the old
    pin outlived the switch and took the settings back to a later)."""
    a, b = two_versions(docs_tree, make_settings)
    interrupted_switch(a, b, alias_moved=True)
    catalog = Catalog.load(b)
    catalog.pinned = {"fingerprint": version_of(a), "over": version_of(b)}
    catalog.commit()
    settle_alias(b, Catalog.load(b))
    catalog = Catalog.load(b)
    assert (catalog.live, catalog.switching, catalog.pinned) == (version_of(b), None, None)


def test_a_switch_whose_alias_did_not_move_is_undone(docs_tree: Path, make_settings: Any) -> None:
    a, b = two_versions(docs_tree, make_settings)
    interrupted_switch(a, b, alias_moved=False)
    settle_alias(b, Catalog.load(b))
    catalog = Catalog.load(b)
    assert (catalog.live, catalog.switching) == (version_of(a), None)
    assert alias_of(b) == collection_of(a)  # search goes on reading the live version


def test_an_alias_pointing_elsewhere_is_pointed_back_at_the_live_version(
    docs_tree: Path, make_settings: Any
) -> None:
    """A switch to b recorded as under way while the alias names neither a nor b
    (it was dropped): pointed at the live version again."""
    a, b = two_versions(docs_tree, make_settings)
    catalog = Catalog.load(b)
    catalog.live, catalog.switching = version_of(a), version_of(b)
    catalog.commit()
    from qdrant_client import models as qm

    from mdindex.sinks.qdrant import QdrantStore

    store = make_store(b).open()
    try:
        assert isinstance(store, QdrantStore)
        drop = qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=b.collection))
        store.client.update_collection_aliases([drop])
        assert store.alias_target(b.collection) is None
    finally:
        store.close()
    settle_alias(b, Catalog.load(b))
    assert alias_of(b) == collection_of(a)
    assert Catalog.load(b).switching is None


def test_after_a_clean_run_nothing_is_opened(docs_tree: Path, make_settings: Any) -> None:
    """No switch under way and nothing adopted: settle_alias returns without
    opening a store (here one that cannot be reached)."""
    a = make_settings(docs_tree, store="client")
    run_rollout(a, TinyEmbedder())
    unreachable = a.model_copy(update={"qdrant_url": "http://127.0.0.1:9"})
    catalog = Catalog.load(a)
    settle_alias(unreachable, catalog)  # no StoreUnavailable
    assert Catalog.load(a).live == version_of(a)
