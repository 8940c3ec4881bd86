"""Versions: fingerprints of the index settings, and the catalog that names the live one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import index_params
from mdindex.errors import ConfigError
from mdindex.index.runtime import physical_name, version_of
from mdindex.versions.catalog import Catalog, Version, reader_settings
from tests.conftest import TinyEmbedder, run_rollout, settings_for


@pytest.mark.parametrize(
    "change",
    [
        {"model": "another-model"},
        {"strategy": "token"},
        {"max_tokens": 100},
        {"overlap_tokens": 8},
        {"noise_sections": ["Contributors"]},
        {"prepend_context": False},
        {"sparse_vectors": False},
    ],
)
def test_each_index_setting_makes_another_version(tmp_path: Path, change: dict) -> None:
    base = settings_for(tmp_path, [])
    assert version_of(settings_for(tmp_path, [], **change)) != version_of(base)


@pytest.mark.parametrize(
    "change",
    [
        {"base_url": "https://example.org"},  # payloads only: rewritten in place
        {"url_style": "html"},
        {"search_mode": "dense"},
        {"batch_size": 7},
        {"semantic_threshold": 0.2},  # not a heading chunker's parameter
        {"keep_versions": 3},
    ],
)
def test_settings_that_leave_points_and_vectors_keep_the_version(
    tmp_path: Path, change: dict
) -> None:
    base = settings_for(tmp_path, [])
    assert version_of(settings_for(tmp_path, [], **change)) == version_of(base)


def test_semantic_parameters_count_under_the_semantic_chunker(tmp_path: Path) -> None:
    a = settings_for(tmp_path, [], strategy="semantic")
    b = settings_for(tmp_path, [], strategy="semantic", semantic_threshold=0.2)
    assert version_of(a) != version_of(b)


def test_a_versions_settings_come_back_from_its_params(tmp_path: Path) -> None:
    token = settings_for(tmp_path, [], strategy="token", max_tokens=64, prepend_context=False)
    heading = settings_for(tmp_path, [])
    catalog = Catalog.load(heading)
    fp = version_of(token)
    catalog.versions[fp] = Version(physical_name("mdindex", fp), index_params(token))
    back = catalog.settings_for(heading, fp)
    assert version_of(back) == fp
    assert (back.strategy, back.max_tokens, back.prepend_context) == ("token", 64, False)
    assert back.state_dir == heading.state_dir  # everything else stays the settings'


def test_catalog_round_trip_live_and_pin(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [])
    old = settings_for(tmp_path, [], strategy="token")
    catalog = Catalog.load(s)
    assert catalog.live is None and catalog.target(s) == version_of(s)
    fp = version_of(old)
    catalog.versions[fp] = Version(physical_name("mdindex", fp), index_params(old), "complete")
    catalog.live = fp
    catalog.pinned = {"fingerprint": fp, "over": version_of(s)}
    catalog.commit()
    again = Catalog.load(s)
    assert again.live == fp and again.versions[fp].status == "complete"
    # the pin holds while the settings are those it was made over
    assert again.target(s) == fp
    other = settings_for(tmp_path, [], prepend_context=False)
    assert again.target(other) == version_of(other)
    # searches use the live version's settings
    assert reader_settings(s).strategy == "token"


def test_find_names_one_version_by_a_unique_prefix(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [])
    catalog = Catalog.load(s)
    for fp in ("abc123", "abd456"):
        catalog.versions[fp] = Version(physical_name("mdindex", fp), index_params(s))
    assert catalog.find("abc") == "abc123"
    with pytest.raises(ConfigError, match="several"):
        catalog.find("ab")
    with pytest.raises(ConfigError, match="names no version"):
        catalog.find("zzz")


def test_an_unreadable_catalog_is_a_clear_error(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [])
    s.state_dir.mkdir(parents=True)
    (s.state_dir / "mdindex.versions.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"versions\.json is unreadable"):
        Catalog.load(s)


@pytest.mark.parametrize(
    "edit",
    [
        lambda c, fp: c["versions"][fp].update(collection="../victim/important"),
        lambda c, fp: c["versions"][fp]["params"].update(collection="../victim/important"),
        lambda c, fp: c["versions"][fp]["params"].update(state_dir="/"),
        lambda c, fp: c["versions"].update({"../x": c["versions"].pop(fp)}),
        lambda c, fp: c.update(live="../../etc"),
        lambda c, fp: c["versions"][fp].update(status="gone", points="many"),
        lambda c, fp: c.update(extra=1),
        lambda c, fp: c.clear() or c.update(alias="other"),
    ],
)
def test_a_hand_edited_catalog_never_names_a_path_outside(
    tmp_path: Path, edit: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23, defect 12: the catalog was trusted: `"collection": "../victim/important"`
    made `versions drop` delete a file outside the state folder."""
    from mdindex.cli import main

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nApples.\n")
    s = settings_for(tmp_path, [root], keep_versions=1)
    run_rollout(s, TinyEmbedder())
    run_rollout(settings_for(tmp_path, [root], keep_versions=1, strategy="token"), TinyEmbedder())
    path = s.state_dir / "mdindex.versions.json"
    catalog = json.loads(path.read_text())
    old = next(fp for fp in catalog["versions"] if fp != catalog["live"])
    victims = tmp_path / "victim"
    victims.mkdir()
    for name in (f"important__{old}.sqlite3", "important.sqlite3", "important"):
        (victims / name).write_text("keep me")
    edit(catalog, old)
    path.write_text(json.dumps(catalog))
    code = main(["versions", "drop", "--state-dir", str(s.state_dir)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "versions.json is unreadable" in err
    assert sorted(p.read_text() for p in victims.iterdir()) == ["keep me"] * 3


def test_a_catalog_that_is_no_mapping_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23, defect 12: a catalog of `[]` was an internal error (exit 3)."""
    from mdindex.cli import main

    s = settings_for(tmp_path, [])
    s.state_dir.mkdir(parents=True)
    for garbage in ("[]", "null", '"x"', '{"alias": "mdindex", "versions": []}'):
        (s.state_dir / "mdindex.versions.json").write_text(garbage)
        assert main(["versions", "list", "--state-dir", str(s.state_dir)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "unreadable" in err, err


def test_a_catalog_nested_past_any_parser_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile review: `'[' * 100000` in the catalog was exit 3
    "internal error" (RecursionError); the docs promise one line and exit 2."""
    from mdindex.cli import main

    s = settings_for(tmp_path, [])
    s.state_dir.mkdir(parents=True)
    for garbage in ("[" * 100_000, '{"versions": ' + "{" * 100_000):
        (s.state_dir / "mdindex.versions.json").write_text(garbage)
        for command in (["versions", "list"], ["status"]):
            assert main([*command, "--state-dir", str(s.state_dir)]) == 2
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and "unreadable" in err, err
