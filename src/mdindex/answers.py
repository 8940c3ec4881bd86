"""The typed answers of `mdindex.Index`: hits, the status, versions, and what
`use_version` and `drop_versions` did. Each keeps the answer as the command
line prints it with ``--json`` in ``fields`` (`Switch` and `Dropped` say it with
their own fields)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mdindex.index.summary import Summary


@dataclass(frozen=True)
class Hit:
    """One search hit: a passage of a document, where it is, and how well it
    answers (the keys of interface.md's "Every point", typed)."""

    score: float
    text: str
    root: str
    doc_path: str
    title: str
    section: str
    heading_path: tuple[str, ...]
    url: str
    line_start: int
    line_end: int
    char_start: int
    char_end: int
    lang: str
    tags: tuple[str, ...]
    meta: dict[str, Any]
    fields: dict[str, Any] = field(repr=False)
    """The hit as `mdindex search --json` prints it: every key, the score first."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hit:
        def whole(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) else 0

        return cls(
            score=float(data.get("score") or 0.0),
            text=str(data.get("text", "")),
            root=str(data.get("root", "")),
            doc_path=str(data.get("doc_path", "")),
            title=str(data.get("title", "")),
            section=str(data.get("section", "")),
            heading_path=tuple(str(h) for h in data.get("heading_path") or ()),
            url=str(data.get("url", "")),
            line_start=whole("line_start"),
            line_end=whole("line_end"),
            char_start=whole("char_start"),
            char_end=whole("char_end"),
            lang=str(data.get("lang", "")),
            tags=tuple(str(t) for t in data.get("tags") or ()),
            meta=dict(data.get("meta") or {}),
            fields=dict(data),
        )


@dataclass(frozen=True)
class Version:
    """One version of the index (`mdindex versions list`): its fingerprint, whether
    it is live or what the settings ask for (``target``), and its counts."""

    fingerprint: str
    status: str  # building, complete, dropping, or "not built"
    live: bool
    target: bool
    documents: int
    points: int
    settings: str  # its model and chunking, in a line
    fields: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Version:
        return cls(
            fingerprint=str(row.get("fingerprint", "")),
            status=str(row.get("status", "")),
            live=bool(row.get("live")),
            target=bool(row.get("target")),
            documents=int(row.get("documents") or 0),
            points=int(row.get("points") or 0),
            settings=str(row.get("settings", "")),
            fields=dict(row),
        )


@dataclass(frozen=True)
class Status:
    """How fresh the index is (`mdindex status`; docs/commands.md names every field)."""

    phase: str  # starting, reconciling, watching, degraded, or stopped (no daemon)
    reason: str
    documents: int
    files_seen: int
    points: int
    failed: list[dict[str, str]]
    daemon: bool  # a watch daemon answered
    caught_up: bool | None  # with ``wait``: every change made before the call is searchable
    versions: list[Version]
    fields: dict[str, Any] = field(repr=False)
    """The status as `mdindex status --json` prints it."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        caught_up = data.get("caught_up")
        return cls(
            phase=str(data.get("phase", "")),
            reason=str(data.get("reason", "")),
            documents=int(data.get("documents") or 0),
            files_seen=int(data.get("files_seen") or 0),
            points=int(data.get("points") or 0),
            failed=list(data.get("failed") or []),
            daemon=bool(data.get("daemon")),
            caught_up=None if caught_up is None else bool(caught_up),
            versions=[Version.from_dict(r) for r in data.get("versions") or []],
            fields=dict(data),
        )


@dataclass(frozen=True)
class Switch:
    """What `Index.use_version` did: the version asked for (``target``), the live
    one now, and the sync that caught it up here (None: no roots are set, or the
    daemon did it)."""

    target: str
    live: str | None
    daemon: bool  # the watch daemon caught it up and switched
    summary: Summary | None = None

    @property
    def done(self) -> bool:
        """Whether the version asked for is live (a daemon may still be catching it up)."""
        return self.live == self.target


@dataclass(frozen=True)
class Dropped:
    """What `Index.drop_versions` did: the versions deleted, and by whom."""

    fingerprints: list[str]
    daemon: bool  # the watch daemon dropped them


__all__ = ["Dropped", "Hit", "Status", "Switch", "Version"]
