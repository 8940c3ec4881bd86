"""Builds the resources the settings describe: tokenizer, chunker, embedder, store, state."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mdindex.chunking import Chunker
from mdindex.config import Settings
from mdindex.embedding import Embedder, ModelEmbedder, ModelInfo, load_counter, resolve_model
from mdindex.planning import Planner
from mdindex.state import State
from mdindex.stores import Store
from mdindex.sync import GROUP_CHARS, Hooks, Indexer
from mdindex.tokens import TokenCounter
from mdindex.versions import physical_name, version_of

if TYPE_CHECKING:
    from mdindex.stores.qdrant import ClusterSpec

API_KEY_ENV = "MDINDEX_QDRANT_API_KEY"
API_KEY_CREDENTIAL = "qdrant-api-key"


def api_key() -> str | None:
    """From the environment, else a systemd credential; never from a flag."""
    if os.environ.get(API_KEY_ENV):
        return os.environ[API_KEY_ENV]
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds:
        path = Path(creds) / API_KEY_CREDENTIAL
        if path.is_file():
            return path.read_text(encoding="utf-8").strip() or None
    return None


def cluster_spec(settings: Settings) -> ClusterSpec:
    from mdindex.stores.qdrant import ClusterSpec

    return ClusterSpec(
        shard_number=settings.shard_number,
        replication_factor=settings.replication_factor,
        write_consistency_factor=settings.write_consistency_factor,
        on_disk_vectors=settings.on_disk_vectors,
        on_disk_payload=settings.on_disk_payload,
        quantization=settings.quantization,
        write_ordering=settings.write_ordering,
    )


def collection_of(settings: Settings) -> str:
    """The physical collection of the version these settings build (mdindex.versions)."""
    return physical_name(settings.collection, version_of(settings))


def make_store(settings: Settings) -> Store:
    """The store of the version these settings build; for the live version, give
    ``versions.reader_settings(settings)``."""
    collection = collection_of(settings)
    common = {
        "retry_budget_s": settings.retry_budget_s,
        "batch_points": settings.upsert_batch_points,
        "batch_bytes": settings.upsert_batch_bytes,
    }
    # Each engine imported only when used: qdrant_client alone takes 1.6 s.
    if settings.store == "edge" and not settings.qdrant_url:
        from mdindex.stores.edge import EdgeStore

        return EdgeStore(
            collection,
            path=settings.store_path / collection,
            index_min_points=settings.edge_index_min_points,
            **common,  # type: ignore[arg-type]
        )
    from mdindex.stores.qdrant import QdrantStore

    if settings.qdrant_url:
        return QdrantStore(
            collection,
            url=settings.qdrant_url,
            api_key=api_key(),
            prefer_grpc=settings.qdrant_grpc,
            timeout_s=settings.qdrant_timeout_s,
            cluster=cluster_spec(settings),
            **common,  # type: ignore[arg-type]
        )
    return QdrantStore(collection, path=settings.store_path, **common)  # type: ignore[arg-type]


@dataclass
class Models:
    """The tokenizer, chunker and embedder the settings name, and the planner
    over them: enough for `mdindex chunk`, with no store or state."""

    settings: Settings
    info: ModelInfo
    counter: TokenCounter
    embedder: ModelEmbedder
    chunker: Chunker
    planner: Planner


def make_models(
    settings: Settings, *, queries_only: bool = False, embedder: ModelEmbedder | None = None
) -> Models:
    """``queries_only``: for a short-lived process that only embeds queries (the
    cached ONNX export, without torch, when there is one). ``embedder``: one
    already loaded for the same model, shared (two versions of one index)."""
    info = resolve_model(settings.model)
    counter = load_counter(info, settings.max_tokens)
    embedder = embedder or ModelEmbedder(
        info,
        settings.device,
        settings.batch_size,
        settings.precision,
        backend=settings.backend,
        cache_dir=settings.cache_dir,
        queries_only=queries_only,
    )
    chunker = Chunker(
        counter,
        settings.strategy,
        overlap_tokens=settings.overlap_tokens,
        noise_sections=settings.noise_sections,
        threshold=settings.semantic_threshold,
        min_sentences=settings.min_sentences,
        embed=embedder,
    )
    planner = Planner(settings, info, counter, chunker)
    return Models(settings, info, counter, embedder, chunker, planner)


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
) -> Indexer:
    """The sync core on the settings' store and state; ``store`` and ``embedder``
    stand in for the settings' own (benchmarks measure through them)."""
    m = models or make_models(settings)
    return Indexer(
        settings,
        planner=m.planner,
        embedder=embedder or m.embedder,
        store=store or make_store(settings),
        state=State(state_path(settings)),
        hooks=hooks,
        group_chars=group_chars,
        siblings=siblings,
    )


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party libraries are noisy at INFO; their warnings still show.
    for name in ("httpx", "sentence_transformers", "transformers", "urllib3", "watchdog"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
