"""Versions: every index fingerprint in a collection of its own, behind one name.

The configured ``collection`` is a name users and tools search by. What
answers to it is one *version*: a physical collection ``NAME__<fingerprint>``
built with one set of index settings (model, chunking and its parameters,
context prefix, sparse vectors on or off). Changing any of them makes a new
fingerprint, which is built beside the live version and switched to in one
step once complete (``mdindex.versions.rollout``); settings that only change payloads
(``base_url``, ``url_style``) are rewritten in place, vectors reused.

The catalog, ``STATE_DIR/NAME.versions.json``, records every version, its
settings and which one is live. It is replaced in one atomic rename, so a
switch recorded there is a single commit. On a store with aliases (a Qdrant
server, qdrant-client's local mode) the alias ``NAME`` is switched as well,
in one ``update_collection_aliases`` call, before the catalog; qdrant-edge
has no aliases, and the catalog alone names the live version.

Each version records the code versions its fingerprint was made with (the
chunker's, BM25's), and a version whose recorded settings do not give its
fingerprint is refused: a hand-edited ``params.model`` would otherwise be
used to search and write a version built by another model.

A rollback (``mdindex versions use``) pins a version: it stays live, and is
kept up to date, while the settings are those it was pinned over. Changing
the settings again, or using the configured version, ends the pin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mdindex.config import UNSET, Settings
from mdindex.errors import CollectionMissing, ConfigError, StateError
from mdindex.index.planning import now_iso
from mdindex.jsonfile import load_json, write_json
from mdindex.outside import quoted, shown
from mdindex.runtime import code_versions, fingerprint, make_store, physical_name, version_of
from mdindex.versions import quantization
from mdindex.versions.catalog_file import CatalogFile, VersionFile, first_line

Status = Literal["building", "complete", "dropping"]


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
    # the code versions its fingerprint was made with (``runtime.code_versions``)
    code: dict[str, Any] | None = None

    def summary(self) -> str:
        """Its settings in a few words, for `versions list`."""
        p = self.params
        parts = [str(p.get("model")), str(p.get("strategy"))]
        if p.get("max_tokens"):
            parts.append(f"max_tokens={p['max_tokens']}")
        if p.get("max_chars"):
            parts.append(f"max_chars={p['max_chars']}")
        parts.append("prefix" if p.get("prepend_context") else "no prefix")
        if p.get("query_prompt") or p.get("document_prompt"):
            parts.append("prompts")
        parts.append("sparse" if p.get("sparse_vectors") else "dense only")
        if p.get("quantization") == "int8":
            parts.append("int8")
        return ", ".join(parts)


@dataclass
class Progress:
    """A build under way, for status."""

    fingerprint: str
    documents: int
    files_seen: int


def one_fingerprint(fingerprints: Sequence[str]) -> str:
    """The one FINGERPRINT `versions use` takes (ConfigError if not one)."""
    if len(fingerprints) != 1:
        raise ConfigError("versions use: give one FINGERPRINT (see mdindex versions list)")
    return fingerprints[0]


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
        """The catalog, checked: nothing in it is trusted to name a path, a
        setting or a collection outside what this collection's versions may be."""
        path = catalog_path(settings)
        try:
            raw = load_json(path)  # bounded: '[' * 100000 raised RecursionError (exit 3)
            checked = CatalogFile.model_validate(raw)
            checked.check(settings.collection)
            versions = {fp: _checked_version(fp, v) for fp, v in checked.versions.items()}
        except FileNotFoundError:
            return cls(path, settings.collection)
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise ConfigError(
                f"versions: {path} is unreadable ({first_line(exc)}); restore it, or remove "
                "it to adopt the collections afresh"
            ) from None
        return cls(
            path,
            settings.collection,
            checked.live,
            checked.pinned.model_dump() if checked.pinned else None,
            versions,
            checked.switching,
            checked.adopted_from,
        )

    def commit(self) -> None:
        """Write the catalog: one rename, so a crash leaves the old or the new one.
        A write the disk refuses is a StateError (a daemon is degraded by it)."""
        data = {
            "alias": self.alias,
            "live": self.live,
            "pinned": self.pinned,
            "versions": {fp: asdict(v) for fp, v in self.versions.items()},
            "switching": self.switching,
            "adopted_from": self.adopted_from,
        }
        try:
            write_json(self.path, data)
        except OSError as exc:  # a read-only or full disk: PermissionError ended the daemon
            raise StateError(f"versions: cannot write {self.path}: {exc.strerror or exc}") from None

    def pin(self, fp: str, settings: Settings, asked: str | None = None) -> None:
        """Make ``fp`` what ``settings`` ask for while they are what they are now
        (a rollback); the version they ask for (``asked``, by default the one
        they ask for now) ends the pin. A pin is over the settings as written:
        "auto" decided by the live version's size would end it as the size moves."""
        asked = asked or version_of(self.decided(settings))
        self.pinned = None if fp == asked else {"fingerprint": fp, "over": version_of(settings)}
        self.commit()

    def make_live(self, fp: str, settings: Settings | None) -> None:
        """Record ``fp`` as the live version (its alias already moved), pinned over
        ``settings`` when it is not theirs; ``None``: a switch a crash interrupted,
        whose run's settings are not known, so the pin is left as it was."""
        # what the settings asked for before the switch: a version switched to
        # because they asked for it is not pinned, though "auto" may ask for
        # another once it is live (a first build already large: int8 next)
        asked = version_of(self.decided(settings)) if settings is not None else ""
        self.live, self.switching = fp, None
        self.versions[fp].live_since = now_iso()
        if settings is None:
            if self.pinned and self.pinned.get("fingerprint") != fp:
                self.pinned = None  # as a clean switch to fp would have ended it
            self.commit()
        else:
            self.pin(fp, settings, asked)

    def target(self, settings: Settings) -> str:
        """The version the settings ask for: their own, or the one a rollback pinned."""
        pin = self.pinned
        if (
            pin
            and pin.get("over") == version_of(settings)
            and pin.get("fingerprint") in self.versions
        ):
            return pin["fingerprint"]
        return version_of(self.decided(settings))

    def settings_for(self, settings: Settings, fp: str) -> Settings:
        """The settings a version was built with: ``settings`` with its index settings."""
        version = self.versions.get(fp)
        if version is None:
            return self.decided(settings)
        # a key recorded only when set is at its default where it is absent
        update = UNSET | dict(version.params)
        update |= quantization.layout(settings, update["quantization"])
        if not update.get("embedding_model"):  # embedded here, whatever server is named now
            update |= {"embedding_url": None, "embedding_model": None}
        out = settings.model_copy(update=update)
        out.pin_version(fp)
        return out

    def decided(self, settings: Settings) -> Settings:
        """``settings`` with ``quantization = "auto"`` decided by the live version."""
        live = self.versions.get(self.live or "")
        points, layout = (live.points, live.params.get("quantization")) if live else (0, "")
        return quantization.decided(settings, points, str(layout or "none"))

    def reader_settings(self, settings: Settings) -> Settings:
        """What a search uses: the live version's settings (its model), else the
        settings' own (a first build that is not complete yet)."""
        return self.settings_for(settings, self.live) if self.live else self.decided(settings)

    def find(self, prefix: str) -> str:
        """The version a fingerprint (or its unique start) names."""
        found = [fp for fp in self.versions if fp.startswith(prefix)] if prefix else []
        if len(found) != 1:
            known = ", ".join(sorted(self.versions)) or "none"
            what = "matches several versions" if found else "names no version"
            raise ConfigError(f"versions: {quoted(prefix)} {what} (known: {known})")
        return found[0]

    # -- the rules of `versions use|drop`, for the CLI and the daemon alike -----

    def to_use(self, fingerprints: Sequence[str]) -> str:
        """The one complete version that `versions use` names (ConfigError if not)."""
        fp = self.find(one_fingerprint(fingerprints))
        status = self.versions[fp].status
        if status != "complete":
            raise ConfigError(f"versions: {fp} is {status}; only a complete version can be used")
        return fp

    def to_drop(
        self, settings: Settings, fingerprints: Sequence[str], busy: Sequence[str] = ()
    ) -> list[str]:
        """The versions `versions drop` names, or every old one when it names none;
        never the live one, the one the settings ask for, or one ``busy`` (a build
        uses it)."""
        live = self.live
        if not fingerprints:
            keep = {live, self.target(settings), *busy}
            return [fp for fp in self.versions if fp not in keep]
        fps = [self.find(f) for f in fingerprints]
        for fp in fps:
            if fp == live:
                raise ConfigError(f"versions: {fp} is live; switch to another version first")
            if fp in busy:
                raise ConfigError(f"versions: {fp} is in use by a build; not dropped")
        return fps

    def siblings(self, fp: str, model: str, opened: Sequence[str] = ()) -> list[str]:
        """The other complete versions of ``model`` (but those in ``opened``): a
        build of ``fp`` takes their vectors for the same embedded text."""
        return [
            other
            for other, v in self.versions.items()
            if other != fp
            and other not in opened
            and v.status == "complete"
            and v.params.get("model") == model
        ]

    def to_retire(self, settings: Settings) -> list[str]:
        """What ``keep_versions`` does not keep: the most recently live old
        versions stay; any other old or unfinished one goes."""
        live, target = self.live, self.target(settings)
        old = [fp for fp in self.versions if fp not in (live, target)]
        old.sort(key=lambda fp: self.versions[fp].live_since, reverse=True)
        kept = [fp for fp in old if self.versions[fp].status == "complete"]
        kept = kept[: settings.keep_versions]
        return [fp for fp in old if fp not in kept]

    def rows(self, settings: Settings, building: Progress | None = None) -> list[dict[str, Any]]:
        """Every version as `versions list` and `status` show it."""
        target = self.target(settings)
        out = []
        for fp, v in sorted(self.versions.items(), key=lambda kv: kv[1].created_at, reverse=True):
            row: dict[str, Any] = {
                "fingerprint": fp,
                "collection": v.collection,
                "live": fp == self.live,
                "target": fp == target,
                "status": v.status,
                "documents": v.documents,
                "points": v.points,
                "chunks_embedded": v.embedded,
                "settings": v.summary(),
                "created_at": v.created_at,
                "live_since": v.live_since,
            }
            if building is not None and building.fingerprint == fp:
                row["progress"] = f"{building.documents} of {building.files_seen} documents"
            out.append(row)
        if target not in self.versions:
            params = settings.index.params()
            out.insert(
                0,
                {
                    "fingerprint": target,
                    "collection": physical_name(settings.collection, target),
                    "live": False,
                    "target": True,
                    "status": "not built",
                    "settings": Version("", params).summary(),
                },
            )
        return out


def catalog_path(settings: Settings) -> Path:
    return settings.state_dir / f"{settings.collection}.versions.json"


def reader_settings(settings: Settings) -> Settings:
    """The settings searches use now (see ``Catalog.reader_settings``)."""
    return Catalog.load(settings).reader_settings(settings)


def require_live(settings: Settings) -> None:
    """A read-only command's first check: CollectionMissing when the catalog
    names a live version the store has no collection for, rather than "no
    results" from an index that is not there, or one created empty. Nothing
    is created."""
    catalog = Catalog.load(settings)
    if catalog.live is None:
        return
    store = make_store(catalog.reader_settings(settings))
    try:
        if not store.exists():
            raise CollectionMissing(
                f"live version {catalog.live} has no collection in the store ({store.where}); "
                "run `mdindex backfill` to build it again, or `mdindex versions use` another"
            )
    finally:
        store.close()


def require_indexed(settings: Settings) -> Settings:
    """``require_live``, then the live version's settings; ConfigError where
    nothing is indexed: no live version and no collection (a first run, a
    mistyped --state-dir, or a store deleted with its catalog). verify made an
    empty store there, emptied any state left, and called every file missing."""
    require_live(settings)
    live = reader_settings(settings)
    if Catalog.load(settings).live is not None:
        return live
    store = make_store(live)
    try:
        if store.exists():
            return live
    finally:
        store.close()
    raise nothing_indexed(settings)


def nothing_indexed(settings: Settings) -> ConfigError:
    """The one line for a command that needs an index where none was built."""
    default = Settings.model_fields["collection"].default
    named = "" if settings.collection == default else f" for collection {settings.collection}"
    return ConfigError(
        f"nothing is indexed in {shown(str(settings.state_dir))}{named} yet: "
        "run `mdindex backfill` first, or check the state dir"
        + (" and the collection" if named else "")
    )


# The code versions every release before the catalog recorded them made
# fingerprints with: CHUNKER_VERSION 1 and 2, BM25 before and after the
# per-language analysis (analysis 2). An old catalog's version is checked
# against each in turn, and the one that gives its fingerprint is recorded.
# Later analyses (3: invisible characters dropped) came after the catalog
# recorded code versions, so a version built before one is known by its record.
_BM25_1 = {"k": 1.2, "b": 0.75, "avg_len": 256.0, "tokenizer": "code"}
_LEGACY_SPARSE = (_BM25_1 | {"analysis": 2}, _BM25_1)


def _checked_version(fp: str, version: VersionFile) -> Version:
    """A version as the catalog records it, once its settings and code versions
    are found to give its fingerprint (a hand-edited ``params.model`` otherwise
    named any model for a version another one built)."""
    params = version.params.model_dump(exclude_unset=True)  # the keys recorded, and only those
    if version.code is not None:
        tried = [version.code.model_dump()]
    else:  # written before versions recorded their code: an upgrade
        sparse = _LEGACY_SPARSE if params.get("sparse_vectors") else (None,)
        legacy = [{"chunker": c, "sparse": s} for c in (2, 1) for s in sparse]
        tried = [code_versions(params), *legacy]
    code = next((c for c in tried if fingerprint(params, c) == fp), None)
    if code is None:
        raise ValueError(
            f"version {fp}'s recorded settings ({Version('', params).summary()[:200]}) "
            "do not give its fingerprint: they are not what it was built with"
        )
    return Version(**(version.model_dump() | {"params": params, "code": code}))
