"""Rollout: a settings change builds a version beside the live one, reusing its
vectors, and switches in one step; rollback, retention, disk space (adoption of
an index from before versions: test_adopt). Both embedded engines, real
stores; the last test runs the real model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mdindex.cli import main
from mdindex.config import Settings
from mdindex.errors import ConfigError, PruneRefused, SpaceRefused
from mdindex.index.indexer import Hooks
from mdindex.runtime import make_store, state_path, version_of
from mdindex.versions import rollout as rollout_module
from mdindex.versions.catalog import Catalog, reader_settings
from tests.conftest import (
    TinyEmbedder,
    assert_same,
    rollout_for,
    run_rollout,
    stored_points,
)
from tests.faults.helpers import fresh_points

ENGINES = ["edge", "client"]


def live_points(settings: Settings) -> dict[str, dict[str, Any]]:
    """What a search sees: the live version's points, with vectors."""
    return stored_points(reader_settings(settings), vectors=True)


def keys(points: dict[str, dict[str, Any]]) -> set[str]:
    return {p["vector_key"] for p in points.values()}


def alias_of(settings: Settings) -> str | None:
    store = make_store(settings)
    try:
        return store.open().alias_target(settings.collection)
    finally:
        store.close()


@pytest.mark.parametrize("store", ENGINES)
def test_a_settings_change_is_built_beside_and_switched_to_when_complete(
    docs_tree: Path, make_settings: Any, tmp_path: Path, store: str
) -> None:
    a = make_settings(docs_tree, store=store)
    run_rollout(a, TinyEmbedder())
    before = stored_points(a, vectors=True)
    b = make_settings(docs_tree, store=store, strategy="token")
    live_during_build: list[str | None] = []
    hooks = Hooks(on_progress=lambda n: live_during_build.append(Catalog.load(b).live))

    summary = rollout_for(b, TinyEmbedder()).backfill(hooks=hooks)

    assert summary.files_changed == 3 and summary.errors == []
    # the old version answered for the whole build; the new one only once complete
    assert live_during_build and set(live_during_build) == {version_of(a)}
    catalog = Catalog.load(b)
    assert catalog.live == version_of(b)
    assert {fp: v.status for fp, v in catalog.versions.items()} == {
        version_of(a): "complete",
        version_of(b): "complete",
    }
    assert_same(live_points(b), fresh_points(tmp_path, docs_tree, store=store, strategy="token"))
    assert_same(stored_points(a, vectors=True), before)  # kept as it was, for a rollback
    if store == "client":  # a real alias, switched in one call
        assert alias_of(b) == make_store(b).collection
    else:
        assert alias_of(b) is None  # edge has none: the catalog names the live version


@pytest.mark.parametrize("store", ENGINES)
def test_vectors_are_reused_across_versions(
    docs_tree: Path, make_settings: Any, tmp_path: Path, store: str
) -> None:
    (docs_tree / "long.md").write_text(
        "# Long\n\n" + " ".join(f"word{i} and more text" for i in range(200)) + "\n"
    )
    a = make_settings(docs_tree, store=store, keep_versions=5)
    run_rollout(a, TinyEmbedder())
    held = keys(stored_points(a))

    # a smaller max_tokens: only the long section's windows are new
    b = make_settings(docs_tree, store=store, keep_versions=5, max_tokens=64)
    tiny = TinyEmbedder()
    result = run_rollout(b, tiny)
    new = keys(live_points(b))
    assert 0 < result["chunks_embedded"] == len(new - held) < len(new)
    assert tiny.texts_embedded == len(new - held)

    # the context prefix off: exactly the chunks whose embedded text changed
    c = make_settings(docs_tree, store=store, keep_versions=5, prepend_context=False)
    held |= new
    result = run_rollout(c, TinyEmbedder())
    assert result["chunks_embedded"] == len(keys(live_points(c)) - held)

    # sparse vectors off: the same embedded texts, nothing dense embedded
    d = make_settings(docs_tree, store=store, keep_versions=5, sparse_vectors=False)
    tiny = TinyEmbedder()
    assert run_rollout(d, tiny)["chunks_embedded"] == 0 and tiny.texts_embedded == 0
    assert all(p["_sparse"] is None for p in live_points(d).values())
    assert_same(
        live_points(d), fresh_points(tmp_path, docs_tree, store=store, sparse_vectors=False)
    )

    # back to the first settings: that version is still there, nothing is embedded
    tiny = TinyEmbedder()
    result = run_rollout(a, tiny)
    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == 0
    assert Catalog.load(a).live == version_of(a)
    assert_same(live_points(a), fresh_points(tmp_path, docs_tree, store=store))


def test_a_dry_run_of_new_settings_counts_reuse_and_writes_nothing(
    docs_tree: Path, make_settings: Any, tmp_path: Path
) -> None:
    a = make_settings(docs_tree)
    run_rollout(a, TinyEmbedder())
    catalog = Catalog.load(a).versions.keys()
    b = make_settings(docs_tree, sparse_vectors=False)
    tiny = TinyEmbedder()
    result = run_rollout(b, tiny, dry_run=True)
    assert result["dry_run"] and result["files_changed"] == 3
    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == 0  # all reused
    assert Catalog.load(b).versions.keys() == catalog and Catalog.load(b).live == version_of(a)
    assert not state_path(b).exists() and not make_store(b).disk_bytes()


@pytest.mark.parametrize("keep", [0, 1])
def test_keep_versions_drops_what_it_does_not_keep(
    docs_tree: Path, make_settings: Any, keep: int
) -> None:
    chain = [
        make_settings(docs_tree, keep_versions=keep, **change)
        for change in ({}, {"strategy": "token"}, {"prepend_context": False})
    ]
    for s in chain:
        run_rollout(s, TinyEmbedder())
    catalog = Catalog.load(chain[-1])
    kept = [version_of(s) for s in chain[-1 - keep :]]
    assert sorted(catalog.versions) == sorted(kept)
    for s in chain:
        fp = version_of(s)
        assert state_path(s).exists() == (fp in kept)
        assert bool(stored_points(s)) == (fp in kept)


def test_use_rolls_back_pins_and_keeps_the_old_version_current(
    docs_tree: Path, make_settings: Any, tmp_path: Path
) -> None:
    a = make_settings(docs_tree)
    b = make_settings(docs_tree, strategy="token")
    run_rollout(a, TinyEmbedder())
    run_rollout(b, TinyEmbedder())

    tiny = TinyEmbedder()
    summary = rollout_for(b, tiny).use(version_of(a))
    assert summary is not None and summary.chunks_embedded == 0
    assert Catalog.load(b).live == version_of(a)

    # settings unchanged (still b's): the rollback holds, and follows the files
    (docs_tree / "guide" / "b.md").write_text("# Beta\n\nBeta text about cherries now.\n")
    run_rollout(b, TinyEmbedder())
    assert Catalog.load(b).live == version_of(a)
    assert_same(live_points(b), fresh_points(tmp_path, docs_tree))

    # other settings end the pin
    c = make_settings(docs_tree, prepend_context=False)
    run_rollout(c, TinyEmbedder())
    catalog = Catalog.load(c)
    assert catalog.live == version_of(c) and catalog.pinned is None


@pytest.mark.parametrize("store", ENGINES)
def test_a_version_built_by_older_code_keeps_its_name_its_vectors_and_its_rollback(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """A release that changes how chunks or sparse vectors are made (CHUNKER_VERSION,
    the BM25 analysis) changes every fingerprint; a version built before it is still
    found under the name it was built with: searched while the new one is built, its
    vectors reused, and a rollback reaches it."""
    from mdindex import runtime

    a = make_settings(docs_tree, store=store, keep_versions=5)
    run_rollout(a, TinyEmbedder())
    old, before = version_of(a), stored_points(a, vectors=True)

    monkeypatch.setattr(runtime, "CHUNKER_VERSION", runtime.CHUNKER_VERSION + 100)
    assert version_of(a) != old
    read_during_build: list[str] = []
    hooks = Hooks(on_progress=lambda n: read_during_build.append(version_of(reader_settings(a))))
    tiny = TinyEmbedder()
    summary = rollout_for(a, tiny).backfill(hooks=hooks)
    assert summary.chunks_embedded == 0 and tiny.texts_embedded == 0
    assert read_during_build and set(read_during_build) == {old}
    assert Catalog.load(a).live == version_of(a)
    assert keys(live_points(a)) == keys(before)

    summary = rollout_for(a, TinyEmbedder()).use(old)
    assert summary is not None and summary.chunks_embedded == 0
    assert version_of(reader_settings(a)) == old
    assert_same(live_points(a), before)


def test_drop_refuses_the_live_version_and_removes_an_old_one(
    docs_tree: Path, make_settings: Any
) -> None:
    a = make_settings(docs_tree)
    b = make_settings(docs_tree, strategy="token")
    run_rollout(a, TinyEmbedder())
    run_rollout(b, TinyEmbedder())
    rollout = rollout_for(b, TinyEmbedder())
    with pytest.raises(ConfigError, match="is live"):
        rollout.drop(version_of(b))
    rollout.drop(version_of(a))
    assert list(Catalog.load(b).versions) == [version_of(b)]
    assert not state_path(a).exists() and stored_points(a) == {}
    assert stored_points(b)


def test_a_build_the_disk_cannot_hold_is_refused_before_it_starts(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    a = make_settings(docs_tree)
    run_rollout(a, TinyEmbedder())
    before = Catalog.load(a).versions.keys()
    monkeypatch.setattr(rollout_module, "free_bytes", lambda path: 1 << 20)
    b = make_settings(docs_tree, strategy="token")
    with pytest.raises(SpaceRefused, match="MB are free"):
        run_rollout(b, TinyEmbedder())
    assert Catalog.load(b).versions.keys() == before and not state_path(b).exists()
    assert not make_store(b).disk_bytes()  # no collection made
    # at the command line: exit 2, one line
    argv = ["backfill", str(docs_tree), "--state-dir", str(a.state_dir), "--strategy", "token"]
    assert main(argv) == 2
    errors = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("mdindex: error")
    ]
    assert len(errors) == 1 and "mdindex versions drop" in errors[0]
    assert Catalog.load(a).live == version_of(a)


def test_a_version_missing_most_documents_is_not_switched_to(
    docs_tree: Path, make_settings: Any, tmp_path: Path
) -> None:
    """A root that is empty now (an unmounted disk) must not replace the index."""
    a = make_settings(docs_tree)
    run_rollout(a, TinyEmbedder())
    empty = tmp_path / "empty"
    empty.mkdir()
    b = make_settings(f"docs={empty}", strategy="token")
    with pytest.raises(PruneRefused, match="not switching"):
        run_rollout(b, TinyEmbedder())
    assert Catalog.load(b).live == version_of(a)
    assert live_points(b)
    # unless that is what is meant
    run_rollout(b, TinyEmbedder(), force=True)
    assert Catalog.load(b).live == version_of(b) and live_points(b) == {}


@pytest.mark.model
@pytest.mark.parametrize("store", ENGINES)
def test_with_the_real_model_switch_and_back_and_search(
    docs_tree: Path, tmp_path: Path, store: str, capsys: Any
) -> None:
    state = str(tmp_path / "state")
    common = ["--state-dir", state, "--store", store, "--json"]

    def backfill(*extra: str) -> dict[str, Any]:
        assert main(["backfill", str(docs_tree), *common, *extra]) == 0
        return dict(json.loads(capsys.readouterr().out))

    first = backfill()
    token = backfill("--strategy", "token")
    assert token["files_changed"] == 3 and token["chunks_embedded"] > 0
    back = backfill()
    assert back["files_changed"] == 0 and back["chunks_embedded"] == 0  # it was kept current
    assert first["chunks_embedded"] > 0

    assert main(["search", "apples", *common]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and hits[0]["strategy"] == "heading" and hits[0]["doc_path"] == "guide/a.md"
    assert main(["versions", "list", *common]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["live"], r["status"]) for r in rows] == [(False, "complete"), (True, "complete")]
    assert {r["settings"].split(", ")[1] for r in rows} == {"heading", "token"}
    assert main(["status", str(docs_tree), *common]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["strategy"] == "heading" and status["caught_up"]
    assert [r["live"] for r in status["versions"]] == [False, True]


def test_a_new_query_prompt_is_a_version_that_embeds_nothing_and_a_document_prompt_all(
    docs_tree: Path, make_settings: Any
) -> None:
    """The query prompt changes no stored vector: its version takes every vector
    from the live one. The document prompt changes every embedded text."""
    a = make_settings(docs_tree, keep_versions=5)
    run_rollout(a, TinyEmbedder())
    b = make_settings(docs_tree, keep_versions=5, query_prompt="query: ")
    tiny = TinyEmbedder()
    assert run_rollout(b, tiny)["chunks_embedded"] == 0 and tiny.texts_embedded == 0
    assert version_of(b) != version_of(a) and Catalog.load(b).live == version_of(b)
    c = make_settings(docs_tree, keep_versions=5, document_prompt="passage: ")
    tiny = TinyEmbedder()
    result = run_rollout(c, tiny)
    assert result["chunks_embedded"] == len(live_points(c)) == tiny.texts_embedded > 0
    assert all(t.startswith("passage: ") for call in tiny.calls for t in call)
