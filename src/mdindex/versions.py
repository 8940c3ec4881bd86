"""Versions: every index fingerprint in a collection of its own, behind one name.

The configured ``collection`` is a name users and tools search by. What
answers to it is one *version*: a physical collection ``NAME__<fingerprint>``
built with one set of index settings (model, chunking and its parameters,
context prefix, sparse vectors on or off). Changing any of them makes a new
fingerprint, which is built beside the live version and switched to in one
step once complete (``mdindex.rollout``); settings that only change payloads
(``base_url``, ``url_style``) are rewritten in place, vectors reused.

The catalog, ``STATE_DIR/NAME.versions.json``, records every version, its
settings and which one is live. It is replaced in one atomic rename, so a
switch recorded there is a single commit. On a store with aliases (a Qdrant
server, qdrant-client's local mode) the alias ``NAME`` is switched as well,
in one ``update_collection_aliases`` call, before the catalog; qdrant-edge
has no aliases, and the catalog alone names the live version.

A rollback (``mdindex versions use``) pins a version: it stays live, and is
kept up to date, while the settings are those it was pinned over. Changing
the settings again, or using the configured version, ends the pin.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mdindex.chunking import CHUNKER_VERSION
from mdindex.config import Settings
from mdindex.errors import ConfigError
from mdindex.sparse import SparseEncoder

SEPARATOR = "__"
FINGERPRINT_CHARS = 12

Status = Literal["building", "complete", "dropping"]


def index_params(settings: Settings) -> dict[str, Any]:
    """The settings that decide a version's points and vectors, as settings keys
    (so a version's settings can be rebuilt from them)."""
    params: dict[str, Any] = {
        "model": settings.model,
        "strategy": settings.strategy,
        "max_tokens": settings.max_tokens,
        "overlap_tokens": settings.overlap_tokens,
        "noise_sections": sorted(settings.noise_sections),
        "prepend_context": settings.prepend_context,
        "sparse_vectors": settings.sparse_vectors,
    }
    if settings.strategy == "semantic":
        params |= {
            "semantic_threshold": settings.semantic_threshold,
            "min_sentences": settings.min_sentences,
        }
    return params


def fingerprint(params: dict[str, Any]) -> str:
    """A version's name: its settings and the code versions that shape it."""
    sparse = SparseEncoder.params() if params.get("sparse_vectors") else None
    key = {"params": params, "chunker": CHUNKER_VERSION, "sparse": sparse}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:FINGERPRINT_CHARS]


def physical_name(collection: str, fp: str) -> str:
    return f"{collection}{SEPARATOR}{fp}"


def version_of(settings: Settings) -> str:
    """The fingerprint of the version these settings build."""
    return fingerprint(index_params(settings))


@dataclass
class Version:
    collection: str  # the physical collection
    params: dict[str, Any]
    status: Status = "building"
    created_at: str = ""
    completed_at: str = ""
    live_since: str = ""
    points: int = 0
    documents: int = 0
    embedded: int = 0  # chunks embedded to build it; the rest came from other versions

    def summary(self) -> str:
        """Its settings in a few words, for `versions list`."""
        p = self.params
        parts = [str(p.get("model")), str(p.get("strategy"))]
        if p.get("max_tokens"):
            parts.append(f"max_tokens={p['max_tokens']}")
        parts.append("prefix" if p.get("prepend_context") else "no prefix")
        parts.append("sparse" if p.get("sparse_vectors") else "dense only")
        return ", ".join(parts)


@dataclass
class Catalog:
    """Every version of one configured collection, and which one is live."""

    path: Path
    alias: str
    live: str | None = None
    # a rollback: {"fingerprint": the version used, "over": the settings' own}
    pinned: dict[str, str] | None = None
    versions: dict[str, Version] = field(default_factory=dict)
    # a switch under way: its alias may have moved before this catalog did
    switching: str | None = None
    # a collection from before versions, copied into a version, still to remove
    adopted_from: str | None = None

    @classmethod
    def load(cls, settings: Settings) -> Catalog:
        path = catalog_path(settings)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path, settings.collection)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"versions: {path} is unreadable ({exc}); restore it, or remove it to "
                "adopt the collections afresh"
            ) from exc
        versions = {fp: Version(**v) for fp, v in dict(raw.get("versions") or {}).items()}
        return cls(
            path,
            settings.collection,
            raw.get("live"),
            raw.get("pinned"),
            versions,
            raw.get("switching"),
            raw.get("adopted_from"),
        )

    def commit(self) -> None:
        """Write the catalog: one rename, so a crash leaves the old or the new one."""
        data = {
            "alias": self.alias,
            "live": self.live,
            "pinned": self.pinned,
            "versions": {fp: asdict(v) for fp, v in self.versions.items()},
            "switching": self.switching,
            "adopted_from": self.adopted_from,
        }
        write_atomic(self.path, data)

    def target(self, settings: Settings) -> str:
        """The version the settings ask for: their own, or the one a rollback pinned."""
        own = version_of(settings)
        pin = self.pinned
        if pin and pin.get("over") == own and pin.get("fingerprint") in self.versions:
            return pin["fingerprint"]
        return own

    def settings_for(self, settings: Settings, fp: str) -> Settings:
        """The settings a version was built with: ``settings`` with its index settings."""
        version = self.versions.get(fp)
        if version is None:
            return settings
        return settings.model_copy(update=version.params)

    def reader_settings(self, settings: Settings) -> Settings:
        """What a search uses: the live version's settings (its model), else the
        settings' own (a first build that is not complete yet)."""
        return self.settings_for(settings, self.live) if self.live else settings

    def find(self, prefix: str) -> str:
        """The version a fingerprint (or its unique start) names."""
        found = [fp for fp in self.versions if fp.startswith(prefix)] if prefix else []
        if len(found) != 1:
            known = ", ".join(sorted(self.versions)) or "none"
            what = "matches several versions" if found else "names no version"
            raise ConfigError(f"versions: {prefix!r} {what} (known: {known})")
        return found[0]


def catalog_path(settings: Settings) -> Path:
    return settings.state_dir / f"{settings.collection}.versions.json"


def reader_settings(settings: Settings) -> Settings:
    """The settings searches use now (see ``Catalog.reader_settings``)."""
    return Catalog.load(settings).reader_settings(settings)


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """Written beside, flushed to disk, then renamed over: all or nothing, even
    across a power cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
