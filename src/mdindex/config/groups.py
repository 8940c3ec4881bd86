"""The settings in groups, typed, for the code that reads them: what makes an
index version (``IndexGroup``, whose ``params`` its fingerprint hashes), where
points go (``StoreGroup``), and how texts are embedded (``EmbeddingGroup``).
Each is a view of the flat ``Settings`` (``settings.index``, ``.storage``,
``.embedding``): the keys users write in TOML and ``MDINDEX_*`` stay flat.
The daemon's timers (``Timings``, ``settings.timings``) are no keys at all:
the product's, or a test's short ones."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

# The index settings: those that decide a version's points and vectors. Each
# one changes the version fingerprint (mdindex.versions), and the chunker, the
# point IDs and the embedded text are built from ``IndexGroup.params`` alone, so a
# setting cannot shape chunks without making a new version, nor the reverse.
INDEX_KEYS = (
    "model",
    "strategy",
    "max_tokens",
    "max_chars",
    "overlap_tokens",
    "noise_sections",
    "prepend_context",
    "sparse_vectors",
    "semantic_threshold",
    "min_sentences",
    "embedding_model",
    "language",
    "embedding_input_type",
    "query_prompt",
    "document_prompt",
    "quantization",
)
SEMANTIC_KEYS = ("semantic_threshold", "min_sentences")  # they count for semantic only
# The server's model decides the vectors where a server embeds: switching between
# local and remote embedding of one model is a new version, two servers of one
# model are the same version.
SERVER_KEYS = ("embedding_model", "embedding_input_type")  # they count where a server embeds
# Recorded only when set, so that a version built before they existed keeps its
# fingerprint. The query prompt and quantization change no stored vector, but
# what a search of the version finds (e5's "query: " meets "passage: ").
WHEN_SET_KEYS = ("embedding_input_type", "query_prompt", "document_prompt", "quantization")
# Each one's value where a version's params leave it out: quantization's is
# "none", which "auto" (the default, decided by versions.quantization) was before.
UNSET: dict[str, Any] = {
    "embedding_input_type": False,
    "query_prompt": "",
    "document_prompt": "",
    "quantization": "none",
}

# Collection and write settings that only a server (or cluster) honours; qdrant-edge EDGE_KEYS too.
EDGE_KEYS = ("on_disk_vectors", "quantization")
CLUSTER_KEYS = (
    "shard_number",
    "replication_factor",
    "write_consistency_factor",
    "on_disk_vectors",
    "on_disk_payload",
    "quantization",
    "write_ordering",
)


@dataclass(frozen=True)
class IndexGroup:
    """The settings that decide a version's points and vectors."""

    model: str
    strategy: str
    max_tokens: int | None
    max_chars: int | None
    overlap_tokens: int
    noise_sections: list[str]
    prepend_context: bool
    sparse_vectors: bool
    semantic_threshold: float
    min_sentences: int
    embedding_model: str | None
    language: str
    embedding_input_type: bool
    query_prompt: str
    document_prompt: str
    quantization: str
    # each WHEN_SET_KEYS key's default: the value that leaves it out of params()
    unset: dict[str, Any] = field(repr=False)

    def params(self) -> dict[str, Any]:
        """Those that count, as settings keys (a version's settings come back from
        them; its fingerprint is their hash with the code's versions)."""
        params = {
            key: getattr(self, key)
            for key in INDEX_KEYS
            if (key not in SEMANTIC_KEYS or self.strategy == "semantic")
            and (key not in SERVER_KEYS or self.embedding_model)
            and (key not in WHEN_SET_KEYS or getattr(self, key) != self.unset[key])
        }
        params["noise_sections"] = sorted(params["noise_sections"])
        return params


@dataclass(frozen=True)
class StoreGroup:
    """Where points go: the engine, a server or cluster, and how writes are batched."""

    store: str  # edge or client, embedded; qdrant_url: a server
    path: Path  # the embedded store's folder
    qdrant_url: str | None
    qdrant_grpc: bool
    qdrant_timeout_s: float
    edge_index_min_points: int
    edge_segment_points: int
    retry_budget_s: float
    upsert_batch_points: int
    upsert_batch_bytes: int
    shard_number: int | None
    replication_factor: int | None
    write_consistency_factor: int | None
    on_disk_vectors: bool
    on_disk_payload: bool | None
    quantization: str
    write_ordering: str

    @property
    def edge(self) -> bool:
        """An edge shard: written only by the mdindex process holding its lock,
        which records every point in the state before writing it. A server may
        have other writers (Ray workers, another machine)."""
        return self.store == "edge" and not self.qdrant_url


@dataclass(frozen=True)
class EmbeddingGroup:
    """How texts are embedded: the model here, or an embedding server."""

    model: str
    device: str
    precision: str
    backend: str
    cache_dir: Path
    batch_size: int | None
    embedding_url: str | None
    embedding_model: str | None
    embedding_batch: int
    embedding_concurrency: int
    embedding_timeout_s: float
    embedding_input_type: bool
    retry_budget_s: float


@dataclass(frozen=True)
class Timings:
    """The daemon's timers, in one place: how long it waits before trying again,
    before housekeeping, before closing what it no longer serves. The defaults
    are the product's (``settings.timings``); tests give the daemon short ones
    (``Daemon(timings=...)``). The debounce (``quiet_period_ms``) and the
    periodic rescan (``rescan_interval_s``) are settings users change, so they
    stay settings."""

    # The first wait after the store, the embedder, the state or a reader failed
    # (and before a failed build goes on); doubled for each failure in a row.
    store_retry_s: float = 5.0
    # The longest wait between tries while failures go on (degraded: 5 s ... 120 s).
    max_retry_s: float = 120.0
    # Store housekeeping waits for this long a lull after the last write.
    settle_after_s: float = 5.0
    # watchdog can lose track of a folder that is moved and recreated quickly (its
    # inotify path map gets confused); a fast-path rescan this long after any
    # folder event catches whatever it missed.
    dir_rescan_delay_s: float = 2.0
    # A version switched away from is closed this long after, so a search that
    # took it just before the switch still finishes on it.
    retire_after_s: float = 5.0
    # Folders the kernel does not watch (the inotify limit) are rescanned this often.
    unwatched_rescan_s: float = 30.0
    # How long a barrier may take to come through the watcher before a whole
    # reconcile decides instead: its opens queue behind every event before them
    # (a checkout of 1,000 files is through in well under a second).
    barrier_wait_s: float = 10.0
    # A search that arrives while the daemon loads its model waits this long for
    # it (the first load on a machine also exports and measures: about 15 s here).
    starting_wait_s: float = 120.0
    # For a whole HTTP request to arrive on a connection (not per receive).
    request_timeout_s: float = 10.0
    # Of systemd's TimeoutStopSec=15s; the store closes after it.
    watcher_stop_s: float = 3.0

    def backoff(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row: ``store_retry_s``
        doubled each time, up to ``max_retry_s``."""
        return float(min(self.store_retry_s * 2 ** min(max(failures, 1) - 1, 16), self.max_retry_s))


Group = TypeVar("Group", IndexGroup, StoreGroup, EmbeddingGroup)


def group_of(kind: type[Group], flat: Any, **given: Any) -> Group:
    """The group ``kind`` of the flat settings: each field the key of its name
    (``given`` for those that are not keys)."""
    values: dict[str, Any] = {
        f.name: given.get(f.name, getattr(flat, f.name, None)) for f in fields(kind)
    }
    return kind(**values)
