"""What the settings build: the store of each version (edge, client or server),
its collection and state, and the models and chunker of its index settings."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mdindex.chunking import CHUNKER_VERSION
from mdindex.chunking.chars import count_chars
from mdindex.documents.parsing import parse_document
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import resolve_model
from mdindex.index.state import State
from mdindex.runtime import (
    API_KEY_ENV,
    api_key,
    collection_of,
    make_indexer,
    make_models,
    make_store,
    state_path,
    version_of,
)
from mdindex.sinks import Point
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.optimize import segment_points
from mdindex.sinks.edge.shard import read_config
from mdindex.sinks.qdrant import QdrantStore
from tests.conftest import Factory, TinyEmbedder, stored_points


def test_each_version_has_its_collection_and_its_state(make_settings: Factory) -> None:
    s = make_settings()
    assert collection_of(s) == f"mdindex__{version_of(s)}"
    assert state_path(s) == s.state_dir / f"mdindex__{version_of(s)}.sqlite3"
    other = make_settings(strategy="token")
    assert collection_of(other) != collection_of(s) and state_path(other) != state_path(s)
    # settings that do not shape the points are the same version
    same = make_settings(base_url="https://x.example", file_time_budget_s=3.0)
    assert (collection_of(same), state_path(same)) == (collection_of(s), state_path(s))
    named = make_settings(collection="notes")
    assert collection_of(named) == f"notes__{version_of(s)}"
    assert state_path(named).name == f"notes__{version_of(s)}.sqlite3"


def written(store: EdgeStore | QdrantStore) -> None:
    store.open()
    store.ensure_collection(4)
    store.upsert([Point(str(uuid.uuid4()), [1.0, 0.0, 0.0, 0.0], {"doc_path": "a.md"})])
    store.close()


def test_the_default_store_is_edge_one_folder_per_version(make_settings: Factory) -> None:
    s = make_settings(edge_index_min_points=7, upsert_batch_points=3, edge_segment_points=20_480)
    store = make_store(s)
    assert isinstance(store, EdgeStore)
    folder = s.state_dir / "edge" / collection_of(s)
    assert store.where == str(folder)
    assert store.index_min_points == 7 and store.batch_points == 3
    written(store)
    assert (folder / "edge_config.json").is_file()
    assert segment_points(read_config(folder)) == 20_480  # 320 KB of 4-d vectors
    assert [p.name for p in (s.state_dir / "edge").iterdir()] == [collection_of(s)]
    # a store path of its own holds the version folders too
    mine = make_store(make_settings(qdrant_path=str(s.state_dir.parent / "mine")))
    assert isinstance(mine, EdgeStore)
    assert mine.where == str(s.state_dir.parent / "mine" / collection_of(s))


def test_client_store_keeps_its_versions_in_one_local_folder(make_settings: Factory) -> None:
    s = make_settings(store="client", upsert_batch_bytes=4096)
    store = make_store(s)
    assert isinstance(store, QdrantStore) and store.local
    assert store.where == str(s.state_dir / "qdrant") and store.collection == collection_of(s)
    assert store.batch_bytes == 4096
    written(store)
    assert (s.state_dir / "qdrant" / "collection" / collection_of(s)).is_dir()
    assert not (s.state_dir / "edge").exists()


def test_a_server_url_makes_a_server_store_whatever_the_engine(
    make_settings: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(API_KEY_ENV, "secret-key")
    s = make_settings(qdrant_url="http://alice:pw@127.0.0.1:9", store="edge", qdrant_timeout_s=2)
    store = make_store(s)
    assert isinstance(store, QdrantStore) and not store.local
    assert store.collection == collection_of(s)
    assert store.where == "http://***@127.0.0.1:9"  # never the password
    assert store.signature() == "" and store.disk_bytes() is None


def test_the_api_key_comes_from_the_environment_or_a_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    assert api_key() is None
    creds = tmp_path / "creds"
    creds.mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    assert api_key() is None
    (creds / "qdrant-api-key").write_text("\n")
    assert api_key() is None
    (creds / "qdrant-api-key").write_text("from-systemd\n")
    assert api_key() == "from-systemd"
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert api_key() == "from-env"


def test_the_chunker_is_built_from_the_index_settings(make_settings: Factory) -> None:
    s = make_settings(
        strategy="token",
        max_tokens=64,
        max_chars=300,
        overlap_tokens=8,
        noise_sections=["Changelog"],
        prepend_context=False,
        sparse_vectors=False,
    )
    m = make_models(s)
    assert m.info == resolve_model("all-MiniLM-L6-v2") and m.counter.limit == 64
    assert m.chunker.params() == {
        "version": CHUNKER_VERSION,
        "strategy": "token",
        "max_tokens": 64,
        "max_chars": 300,
        "overlap_tokens": 8,
        "noise_sections": ["changelog"],
    }
    assert m.planner.chunker is m.chunker and m.chunker.embed is m.embedder
    assert not m.planner.prepend_context and m.planner.sparse is None
    doc = parse_document("# T\n\n" + "one two three four five. " * 200, "t.md")
    chunks = m.chunker.chunk(doc)
    assert len(chunks) > 5 and max(c.token_count for c in chunks) <= 64
    assert max(count_chars(c.text) for c in chunks) <= 300
    assert make_models(make_settings()).chunker.params()["max_chars"] == 1397  # 5.5 x 254
    semantic = make_models(make_settings(strategy="semantic", semantic_threshold=0.3))
    assert semantic.chunker.params()["threshold"] == 0.3
    assert semantic.chunker.params()["min_sentences"] == 2
    # the semantic settings shape nothing else: the same heading chunker, the same IDs
    heading = make_models(make_settings(semantic_threshold=0.3, min_sentences=5))
    plain = make_models(make_settings())
    assert heading.chunker.params() == plain.chunker.params()
    assert heading.planner.id_fingerprint == plain.planner.id_fingerprint


def test_models_share_an_embedder_when_given_one(make_settings: Factory) -> None:
    shared = make_models(make_settings()).embedder
    other = make_models(make_settings(strategy="token"), embedder=shared)
    assert isinstance(shared, ModelEmbedder)
    assert other.embedder is shared and other.chunker.embed is shared


def test_make_indexer_syncs_the_settings_store_and_state(
    docs_tree: Path, make_settings: Factory
) -> None:
    s = make_settings(docs_tree)
    with make_indexer(s, embedder=TinyEmbedder()) as indexer:
        summary = indexer.backfill()
    points = stored_points(s)
    assert summary.points_upserted == len(points) > 0
    assert {p["doc_path"] for p in points.values()} == {"index.md", "guide/a.md", "guide/b.md"}
    state = State(state_path(s))
    try:
        assert state.point_counts() == (len(points), 0) and state.doc_count() == 3
    finally:
        state.close()
