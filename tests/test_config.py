from __future__ import annotations

from pathlib import Path

import pytest

from mdindex.config import load_settings
from mdindex.errors import ConfigError


def test_precedence_flag_env_file_default(tmp_path: Path, monkeypatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('collection = "from_file"\nstrategy = "token"\nbatch_size = 8\n')
    s = load_settings({}, cfg)
    assert (s.collection, s.strategy, s.batch_size, s.overlap_tokens) == (
        "from_file",
        "token",
        8,
        32,
    )
    monkeypatch.setenv("MDINDEX_COLLECTION", "from_env")
    monkeypatch.setenv("MDINDEX_BATCH_SIZE", "16")
    s = load_settings({}, cfg)
    assert (s.collection, s.batch_size) == ("from_env", 16)
    s = load_settings({"collection": "from_flag"}, cfg)
    assert s.collection == "from_flag"
    monkeypatch.setenv("MDINDEX_CONFIG", str(cfg))
    assert load_settings({}).strategy == "token"


def test_lists_from_env_and_roots_with_labels(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MDINDEX_ROOTS", f"docs={tmp_path},{tmp_path / 'wiki'}")
    roots = load_settings({}).root_list()
    assert [(r.label, r.path) for r in roots] == [("docs", tmp_path), ("wiki", tmp_path / "wiki")]


@pytest.mark.parametrize(
    ("overrides", "file_text", "env", "message"),
    [
        ({}, "colection = 'x'\n", {}, "colection: unknown key"),
        ({}, "", {"MDINDEX_COLECTION": "x"}, "MDINDEX_COLECTION: unknown setting"),
        ({"strategy": "fancy"}, "", {}, "strategy"),
        ({"batch_size": 0}, "", {}, "batch_size"),
        ({"qdrant_url": "http://x", "qdrant_path": "/tmp/q"}, "", {}, "exclusive"),
        ({"qdrant_url": "localhost:6333"}, "", {}, "must start with http"),
        ({}, "strategy = [", {}, "not valid TOML"),
    ],
)
def test_bad_settings_name_the_key(
    tmp_path, monkeypatch, overrides, file_text, env, message
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(file_text)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError) as exc:
        load_settings(overrides, cfg)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_duplicate_root_labels(tmp_path: Path) -> None:
    s = load_settings({"roots": [f"a={tmp_path}", f"a={tmp_path / 'x'}"]})
    with pytest.raises(ConfigError, match="used twice"):
        s.root_list()
