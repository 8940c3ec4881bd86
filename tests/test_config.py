from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import load_settings
from mdindex.errors import ConfigError
from mdindex.outside import redact


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
    monkeypatch.setenv("MDINDEX_ROOTS", f"docs={tmp_path / 'd'},{tmp_path / 'wiki'}")
    roots = load_settings({}).root_list()
    assert [(r.label, r.path) for r in roots] == [
        ("docs", tmp_path / "d"),
        ("wiki", tmp_path / "wiki"),
    ]


def test_overlapping_roots_are_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "docs" / "api").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "docs")
    for inner in (tmp_path / "docs" / "api", tmp_path / "link"):
        # parsed and checked once, when the settings are made
        with pytest.raises(ConfigError) as exc:
            load_settings({"roots": [f"docs={tmp_path / 'docs'}", f"api={inner}"]})
        assert exc.value.exit_code == 2
        message = str(exc.value)
        assert "docs=" in message and "api=" in message and "overlap" in message
    # siblings whose names share a prefix do not overlap
    (tmp_path / "docs2").mkdir()
    s = load_settings({"roots": [str(tmp_path / "docs"), str(tmp_path / "docs2")]})
    assert [r.label for r in s.root_list()] == ["docs", "docs2"]


def test_credentials_in_urls_are_masked() -> None:
    from mdindex.sinks.qdrant import QdrantStore

    assert redact("http://admin:hunter2@qdrant:6333/x") == "http://***@qdrant:6333/x"
    assert redact("failed: https://u@h/ and http://h2/") == "failed: https://***@h/ and http://h2/"
    store = QdrantStore("c", url="https://admin:hunter2@qdrant.example:6333")
    assert "hunter2" not in store.where and "qdrant.example:6333" in store.where
    with pytest.raises(ConfigError) as exc:
        load_settings({"qdrant_url": "ftp://admin:hunter2@h"})
    assert "hunter2" not in str(exc.value)


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
        ({"embedding_input_type": True}, "", {}, "set embedding_url too"),
        ({"query_prompt": "query:\x07"}, "", {}, "query_prompt: holds a control character"),
        ({"document_prompt": "p" * 201}, "", {}, "document_prompt"),
        ({}, "", {"MDINDEX_EMBEDDING_INPUT_TYPE": "maybe"}, "embedding_input_type"),
        ({"edge_segment_points": 40}, "", {}, "edge_segment_points (40) must be 0 (no bound)"),
        ({"edge_segment_points": -1}, "", {}, "edge_segment_points"),
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


def test_the_suites_own_variables_are_not_settings(tmp_path: Path, monkeypatch) -> None:
    # a CLI spawned by a test inherits them; MDINDEX_FAULTS=long is the documented long mode
    monkeypatch.setenv("MDINDEX_TEST_CORPUS", str(tmp_path))
    monkeypatch.setenv("MDINDEX_TEST_INFINITY", str(tmp_path / "infinity_emb"))
    monkeypatch.setenv("MDINDEX_FAULTS", "long")
    assert load_settings({"state_dir": str(tmp_path)}).state_dir == tmp_path
    monkeypatch.setenv("MDINDEX_TESTCORPUS", "x")
    with pytest.raises(ConfigError, match="MDINDEX_TESTCORPUS: unknown setting"):
        load_settings({"state_dir": str(tmp_path)})


def test_duplicate_root_labels(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="used twice"):
        load_settings({"roots": [f"a={tmp_path}", f"a={tmp_path / 'x'}"]})


def test_an_index_built_on_client_stays_there_unless_a_store_is_named(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert load_settings({"state_dir": str(state)}).store == "edge"  # the default
    (state / "qdrant" / "collection" / "mdindex").mkdir(parents=True)
    assert load_settings({"state_dir": str(state)}).store == "client"  # no re-embedding
    assert load_settings({"state_dir": str(state), "store": "edge"}).store == "edge"
    # another collection has no client index: the default
    assert load_settings({"state_dir": str(state), "collection": "wiki"}).store == "edge"
    (state / "edge" / "mdindex").mkdir(parents=True)  # after `mdindex migrate --to edge`
    assert load_settings({"state_dir": str(state)}).store == "edge"


def test_credentials_are_masked_up_to_the_last_at() -> None:
    """Issue 23, defect 13: `http://alice:hunter2@secret@host` showed as `***@secret@host`;
    a password with an unescaped "/", "?" or "#" showed whole."""
    assert redact("http://alice:hunter2@secret@host:6333/x") == "http://***@host:6333/x"
    assert (
        redact("failed at http://admin:s3cr?t@127.0.0.1:1: x")
        == "failed at http://***@127.0.0.1:1: x"
    )
    assert redact("http://a:b/c#d@host/p") == "http://***@host/p"
    assert redact("at http://u:p@h1 and https://h2/x") == "at http://***@h1 and https://h2/x"
    assert redact("https://host:6333") == "https://host:6333"


def test_a_password_with_a_space_is_masked() -> None:
    """Found by a hostile review: `http://alice:hun ter2@host` showed "ter2"."""
    assert redact("http://alice:hun ter2@host:6333/x") == "http://***@host:6333/x"
    assert (
        redact("at http://u:a b@h1 and https://v:c d@h2/x")
        == "at http://***@h1 and https://***@h2/x"
    )
    assert (
        redact("http://host:6333 unreachable\nhttp://h/")
        == "http://host:6333 unreachable\nhttp://h/"
    )


# One value other than the default for each index setting: a new index setting
# needs its line here, so that this file tests it.
INDEX_CHANGES = {
    "model": "another-model",
    "strategy": "token",
    "max_tokens": 100,
    "max_chars": 500,
    "overlap_tokens": 8,
    "noise_sections": ["Contributors"],
    "prepend_context": False,
    "sparse_vectors": False,
    "semantic_threshold": 0.2,
    "min_sentences": 3,
    "embedding_model": "all-MiniLM-L6-v2",  # with embedding_url: a server's vectors
    "language": "de",
    "embedding_input_type": True,
    "query_prompt": "query: ",
    "document_prompt": "passage: ",
    "quantization": "int8",  # what a search finds
}
# Settings that come with an index setting: a server's model needs its URL.
SERVER = {"embedding_url": "http://127.0.0.1:9/v1", "embedding_model": "all-MiniLM-L6-v2"}
WITH = {
    "embedding_model": {"embedding_url": SERVER["embedding_url"]},
    "embedding_input_type": SERVER,
}
# Every other setting, by what it changes: payloads only (rewritten in place,
# vectors reused), or nothing stored at all. A new setting must be placed.
PAYLOAD_ONLY = {"base_url", "url_style"}
NOT_STORED = {
    "backend", "batch_size", "cache_dir", "collection", "device", "edge_index_min_points",
    "edge_segment_points",
    "exclude", "file_time_budget_s", "follow_symlinks", "fusion", "http_host", "http_port",
    "include", "keep_versions", "log_format", "log_level", "max_file_bytes",
    "mcp_allow_refresh", "on_disk_payload", "on_disk_vectors", "precision", "qdrant_grpc",
    "qdrant_path", "qdrant_timeout_s", "qdrant_url", "queue_size",
    "quiet_period_ms", "replication_factor", "rescan_interval_s", "retry_budget_s", "roots",
    "search_mode", "shard_number", "state_dir", "store", "upsert_batch_bytes",
    "upsert_batch_points", "write_consistency_factor", "write_ordering",
    "embedding_url", "embedding_batch", "embedding_concurrency", "embedding_timeout_s",
    "model_languages",
}  # fmt: skip


def test_every_setting_is_placed_and_every_index_setting_makes_a_version(tmp_path: Path) -> None:
    """One source of the settings that shape chunks (``config.INDEX_KEYS``): each
    makes another version, and no other setting does."""
    from mdindex.config import INDEX_KEYS, Settings
    from mdindex.runtime import version_of

    assert set(INDEX_CHANGES) == set(INDEX_KEYS)
    assert set(Settings.model_fields) == set(INDEX_KEYS) | PAYLOAD_ONLY | NOT_STORED
    state = {"state_dir": str(tmp_path / "state")}
    base = load_settings({"strategy": "semantic", **state})  # semantic: every key counts
    for key, value in INDEX_CHANGES.items():
        changed = {"strategy": "semantic", **state, key: value, **WITH.get(key, {})}
        assert version_of(load_settings(changed)) != version_of(base), key
    for key in PAYLOAD_ONLY:
        assert version_of(
            load_settings({**state, key: {"base_url": "https://x.org", "url_style": "html"}[key]})
        ) == version_of(load_settings(state))


def test_point_ids_come_from_the_index_settings_alone(tmp_path: Path) -> None:
    """The chunker and the point IDs are built from ``settings.index.params()``: every index
    setting that shapes chunks or their embedded text changes the IDs' fingerprint,
    and sparse vectors (beside the same chunks) do not."""
    from mdindex.runtime import make_models

    state = {"state_dir": str(tmp_path / "state")}

    def ids(**change: object) -> str:
        return make_models(
            load_settings({"strategy": "semantic", **state, **change})
        ).planner.id_fingerprint

    base = ids()
    for key, value in INDEX_CHANGES.items():
        skip = ("model", "sparse_vectors", "embedding_model", "embedding_input_type", "language")
        if key in skip:
            continue  # another model cannot load here; the others change no chunk
        if key in ("query_prompt", "quantization"):
            assert ids(**{key: value}) == base  # they change searches, not chunks
            continue
        assert ids(**{key: value}) != base, key
    assert ids(sparse_vectors=False) == base
    # a server's vectors: the same chunks, under another vector key (no reuse of
    # in-process vectors), in the version of their own the test above shows
    server = {"embedding_model": "all-MiniLM-L6-v2", **WITH["embedding_model"]}
    assert ids(**server) == base
    planner = make_models(load_settings({**state, **server})).planner
    assert planner.vector_model == "server:all-MiniLM-L6-v2"
    assert make_models(load_settings(state)).planner.vector_model == "all-MiniLM-L6-v2"
    typed = make_models(load_settings({**state, **server, "embedding_input_type": True}))
    assert typed.planner.vector_model == "server:all-MiniLM-L6-v2:passage"


def test_language_is_auto_or_a_code_and_part_of_the_index(monkeypatch) -> None:

    assert load_settings({}).language == "auto"
    assert load_settings({"language": " DE "}).language == "de"
    monkeypatch.setenv("MDINDEX_LANGUAGE", "zh")
    s = load_settings({})
    assert s.language == "zh" and s.index.params()["language"] == "zh"
    # "cn" and "jp" (country codes, for Chinese and Japanese) were taken: Chinese
    # notes got no segmentation (2 BM25 terms for a sentence, 12 as "zh"), and
    # `--lang cn` was then refused as no language
    for bad in ("german", "d", "zh-Hans", "1x", "cn", "jp", "xx"):
        with pytest.raises(ConfigError, match="language must be auto or a two-letter") as exc:
            load_settings({"language": bad})
        assert str(exc.value).count(repr(bad)) == 1, exc.value  # named once, not "(got ...)" too


def test_settings_recorded_only_when_set_keep_older_versions_and_reset_when_absent(
    tmp_path: Path,
) -> None:
    """Prompts and input types at their defaults are not in a version's settings
    (a version built before they existed keeps its name), and a version that
    recorded none is searched without the prompts set now."""
    from mdindex.config import WHEN_SET_KEYS
    from mdindex.versions.catalog import Catalog, Version

    state = {"state_dir": str(tmp_path / "state")}
    assert not set(WHEN_SET_KEYS) & set(load_settings(state).index.params())
    old = load_settings(state)
    now = load_settings({**state, "query_prompt": "query: ", "document_prompt": "passage: "})
    catalog = Catalog(
        tmp_path / "c.json", "mdindex", versions={"a" * 12: Version("x", old.index.params())}
    )
    before = catalog.settings_for(now, "a" * 12)
    assert (before.query_prompt, before.document_prompt) == ("", "")


def test_quantization_is_an_edge_setting_and_a_new_version(tmp_path: Path) -> None:
    """Issue 37: quantization and on_disk_vectors apply to qdrant-edge too (not
    to qdrant-client's local mode); int8 is a version of its own, and the
    default leaves every fingerprint as it was."""
    from mdindex.runtime import make_store, version_of

    state = {"state_dir": str(tmp_path / "state")}
    plain = load_settings(state)
    quantized = load_settings({**state, "quantization": "int8", "on_disk_vectors": True})
    assert "quantization" not in plain.index.params()
    assert quantized.index.params()["quantization"] == "int8"
    assert version_of(quantized) != version_of(plain)
    store = make_store(quantized)
    assert (store.quantization, store.on_disk_vectors) == ("int8", True)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="quantization applies to a Qdrant server or to store"):
        load_settings({**state, "store": "client", "quantization": "int8"})


@pytest.mark.parametrize(
    "line",
    [
        'strategy = "' + "x" * 4000 + '"',
        "max_tokens = " + "9" * 4000 + ".5",
        "semantic_threshold = 1e400",
        'language = "' + "中" * 4000 + '"',
        "batch_size = " + "-9" * 2000,
        'model_languages = ["' + "x" * 4000 + '"]',
        'fusion = "' + "\x1b" * 4000 + '"',
    ],
)
def test_a_huge_value_is_quoted_in_at_most_a_line(tmp_path: Path, line: str) -> None:
    """Found by a hostile review: a 4 KB or 4,000-digit value was repeated whole
    in the error (4,079 characters)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(line.replace("\x1b", "\\u001b") + "\n")
    with pytest.raises(ConfigError) as exc:
        load_settings({}, cfg)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 250, str(exc.value)


@pytest.mark.parametrize(
    "content", [b"a = " + b"[" * 100_000, b"a = { x = " * 50_000, b"a = '\xff'", b"#" * (2 << 20)]
)
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path: Path, content: bytes) -> None:
    """A deep one was a RecursionError, one not UTF-8 a UnicodeDecodeError (exit 3,
    "internal error"); /dev/zero was read until memory ran out."""
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(content)
    for path in (cfg, tmp_path, Path("/dev/zero")):
        with pytest.raises(ConfigError) as exc:
            load_settings({}, path)
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)


from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(
    key=st.sampled_from(["state_dir", "cache_dir", "qdrant_path", "roots"]),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
@example(key="state_dir", before="~", after="")  # found by CI: pwd saw the NUL first
def test_a_path_with_a_nul_byte_is_a_config_error(key: str, before: str, after: str) -> None:
    """Found by a review: state_dir = "st\\u0000x" in a TOML file (or the
    Python API's state_dir=) was taken, and the first open raised ValueError:
    "internal error" on the command line, and no MdindexError from the API."""
    value = f"{before}\0{after}"
    with pytest.raises(ConfigError, match=f"^{key}: a path cannot hold a NUL byte") as raised:
        load_settings({key: [value] if key == "roots" else value})
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("key", ["state_dir", "qdrant_path"])
def test_a_state_path_that_is_not_utf8_is_a_config_error(key: str) -> None:
    """Found by a review: Index(state_dir=os.fsdecode(b"odd\\xff")).sync()
    raised UnicodeEncodeError where the state records the store's path."""
    import os

    with pytest.raises(ConfigError, match=f"^{key}: the state records it: give a UTF-8 path"):
        load_settings({key: os.fsdecode(b"odd\xff/state")})
    assert load_settings({"cache_dir": os.fsdecode(b"odd\xff")})  # recorded nowhere


def test_a_root_named_in_bytes_not_utf8_is_indexed_under_a_printable_label(
    tmp_path: Path,
) -> None:
    """The label taken from a folder named b"caf\\xe9" held a surrogate, and
    the first write to the state raised UnicodeEncodeError."""
    import os

    from tests.conftest import TinyEmbedder, run_backfill, settings_for

    root = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9")
    os.mkdir(root)
    Path(root, "a.md").write_text("# A\n\nApples.\n")
    s = settings_for(tmp_path, [root])
    assert [r.label for r in s.root_list()] == ["caf\\xe9"]
    summary = run_backfill(s, TinyEmbedder())
    assert summary["files_changed"] == 1 and summary["files_failed"] == 0


def test_folders_are_made_absolute_once_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "~/state" made a folder named "~" in the working folder, and a relative
    state_dir moved with the working folder of whatever called next."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    s = load_settings({"state_dir": "~/state", "cache_dir": "work/../cache", "qdrant_path": "q"})
    assert s.state_dir == tmp_path / "home" / "state"
    assert (s.cache_dir, s.qdrant_path) == (tmp_path / "work" / ".." / "cache", tmp_path / "q")
    monkeypatch.chdir("/")
    assert s.store_path.is_relative_to(tmp_path)  # where it was when loaded


@pytest.mark.parametrize("values", [{"state_dir": "~nosuchuser/s"}, {"roots": ["~nosuchuser/n"]}])
def test_a_home_that_is_not_there_is_a_config_error(values: dict[str, Any]) -> None:
    """ "~nosuchuser/notes" raised RuntimeError out of Python's expanduser: an
    internal error, where every other bad path names the setting."""
    with pytest.raises(ConfigError, match=r"nosuchuser.*no home folder for its ~") as raised:
        load_settings(values).root_list()
    assert "\n" not in str(raised.value)


def test_a_folder_is_checked_once_expanded_and_from_a_working_folder_that_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a hostile review: "~/st" under a HOME that is not UTF-8 passed
    the check and failed later with UnicodeEncodeError, after the folders
    were made; a relative state_dir in a deleted working folder raised
    FileNotFoundError out of the settings."""
    monkeypatch.setenv("HOME", os.fsdecode(bytes(tmp_path) + b"/h\xff"))
    with pytest.raises(ConfigError, match="state_dir: the state records it: give a UTF-8 path"):
        load_settings({"state_dir": "~/st"})
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(ConfigError, match="'relst' is relative, and the working folder cannot"):
        load_settings({"state_dir": "relst"})
    # a link before '..' decides where it leads, as the system reads the path
    assert load_settings({"state_dir": "/a/link/../st"}).state_dir == Path("/a/link/../st")
