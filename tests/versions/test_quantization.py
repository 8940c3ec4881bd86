"""quantization = "auto", the default: an edge store whose live version is
large is built again beside it as int8 with its originals on disk, its
vectors taken from the live version; a small store, a server's and local
mode's stay as they are, and no version built before changes its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mdindex.config import Settings, load_settings
from mdindex.runtime import make_store, version_of
from mdindex.sinks.edge.shard import read_config
from mdindex.versions import quantization
from mdindex.versions.catalog import Catalog, reader_settings
from mdindex.versions.quantization import AUTO_INT8_POINTS, decided
from tests.conftest import TinyEmbedder, assert_same, rollout_for, run_rollout, stored_points


def settings(tmp_path: Path, **given: Any) -> Settings:
    return load_settings({"state_dir": str(tmp_path / "state"), **given})


def test_auto_is_none_below_the_size_and_int8_with_its_originals_on_disk_from_it(
    tmp_path: Path,
) -> None:
    auto = settings(tmp_path)
    assert auto.quantization == "auto"
    # every version built before "auto" keeps its name: undecided, it is "none"
    assert version_of(auto) == version_of(settings(tmp_path, quantization="none"))
    assert "quantization" not in auto.index.params()

    small = decided(auto, AUTO_INT8_POINTS - 1, "none")
    assert (small.quantization, small.on_disk_vectors) == ("none", False)
    assert version_of(small) == version_of(auto)
    large = decided(auto, AUTO_INT8_POINTS, "none")
    assert (large.quantization, large.on_disk_vectors) == ("int8", True)
    assert large.index.params()["quantization"] == "int8"
    assert version_of(large) == version_of(settings(tmp_path, quantization="int8"))
    # quantized once, it stays so: a store that shrinks is not built again
    assert decided(auto, 10, "int8").quantization == "int8"


def test_what_a_user_set_is_theirs(tmp_path: Path) -> None:
    for given in ("none", "int8"):
        s = settings(tmp_path, quantization=given)
        assert decided(s, 10 * AUTO_INT8_POINTS, "int8" if given == "none" else "none") is s
    in_ram = decided(settings(tmp_path, on_disk_vectors=False), AUTO_INT8_POINTS, "none")
    assert (in_ram.quantization, in_ram.on_disk_vectors) == ("int8", False)
    # qdrant-client's local mode has no quantization; "none" is accepted there
    local = settings(tmp_path, store="client")
    assert decided(local, 10 * AUTO_INT8_POINTS, "none").quantization == "none"
    assert settings(tmp_path, store="client", quantization="none").quantization == "none"


def test_a_catalog_decides_by_its_live_version(tmp_path: Path) -> None:
    s = settings(tmp_path)
    catalog = Catalog.load(s)
    assert catalog.target(s) == version_of(s)  # nothing live: "none"
    assert reader_settings(s).quantization == "none"


def shard_config(s: Settings) -> dict[str, Any]:
    store = make_store(reader_settings(s))
    return read_config(Path(store.where))


def test_a_store_grown_past_the_size_is_built_again_quantized_from_its_own_vectors(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole way, on real edge stores: the next sync after the live version
    reached the size builds the int8 version beside it, embedding nothing, and
    switches; its points are the old version's, IDs, payloads and vectors."""
    s = make_settings(docs_tree, store="edge")
    first = run_rollout(s, TinyEmbedder())
    small = Catalog.load(s).live
    assert first["chunks_embedded"] > 0 and shard_config(s).get("quantization_config") is None
    before = stored_points(reader_settings(s), vectors=True)
    points = len(before)

    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", points + 1)
    assert run_rollout(s, TinyEmbedder())["files_changed"] == 0
    assert Catalog.load(s).live == small  # one point short: nothing built

    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", points)
    second = run_rollout(s, TinyEmbedder())
    catalog = Catalog.load(s)
    large = catalog.live
    assert large != small and second["chunks_embedded"] == 0
    assert catalog.versions[large].params["quantization"] == "int8"
    assert catalog.versions[small].status == "complete"  # kept for a rollback
    config = shard_config(s)
    assert config["quantization_config"]["scalar"]["type"] == "int8"
    assert config["vectors"][""]["memory"] == "cold"  # the originals on disk
    # status and `versions list` say so (a review found both versions listed alike)
    store = make_store(reader_settings(s))
    described = store.open().describe()
    store.close()
    assert (described["quantization"], described["on_disk_vectors"]) == ("int8", True)
    assert catalog.versions[large].summary().endswith(", int8")
    assert not catalog.versions[small].summary().endswith(", int8")
    assert_same(stored_points(reader_settings(s), vectors=True), before)

    # the size no longer counts: a quantized store stays so, and nothing is built
    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", 10**9)
    assert run_rollout(s, TinyEmbedder())["files_changed"] == 0
    assert Catalog.load(s).live == large


def test_a_first_build_already_large_is_not_pinned_and_is_quantized_next(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review found a first build at the size pinned as a rollback: its switch
    asked "auto" again with itself live, large, and took the answer (int8) for
    the settings' own, so nothing was ever quantized."""
    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", 1)
    s = make_settings(docs_tree, store="edge")
    run_rollout(s, TinyEmbedder())
    catalog = Catalog.load(s)
    assert catalog.pinned is None
    assert "quantization" not in catalog.versions[catalog.live or ""].params
    second = run_rollout(s, TinyEmbedder())
    catalog = Catalog.load(s)
    assert catalog.versions[catalog.live or ""].params["quantization"] == "int8"
    assert second["chunks_embedded"] == 0 and catalog.pinned is None


def test_a_rollback_holds_while_its_version_grows_past_the_size(
    docs_tree: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review found `versions use` undone by the tree's growth alone: the pin
    was over the version "auto" asked for, which moved with the live size."""
    token = make_settings(docs_tree, store="edge", strategy="token", keep_versions=3)
    run_rollout(token, TinyEmbedder())
    old = Catalog.load(token).live
    assert old is not None
    s = make_settings(docs_tree, store="edge", keep_versions=3)
    run_rollout(s, TinyEmbedder())
    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", Catalog.load(s).versions[old].points + 1)
    rollout_for(s, TinyEmbedder()).use(old)
    assert Catalog.load(s).live == old and Catalog.load(s).pinned
    (docs_tree / "grown.md").write_text("# Grown\n\nMore words for the index to hold.\n")
    for _ in range(2):  # the pinned version grows past the size, then a sync after it
        run_rollout(s, TinyEmbedder())
        assert Catalog.load(s).live == old
    # the settings changed end the pin, as before
    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", 10**9)
    wider = make_settings(docs_tree, store="edge", keep_versions=3, max_tokens=200)
    run_rollout(wider, TinyEmbedder())
    assert Catalog.load(wider).live == version_of(wider)
