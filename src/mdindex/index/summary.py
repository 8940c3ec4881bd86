"""What one sync did (``Summary``): the counts, the files that failed and why,
and what was left out; printed by backfill, returned by the daemon's
reconcile. What one verify found (``VerifyReport``)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from mdindex.documents.files import Failure, printable

log = logging.getLogger(__name__)


@dataclass
class Summary:
    """What one sync did: files seen, changed, deleted and failed (``errors``,
    each with its reason), chunks embedded, points written and deleted, and
    the seconds it took; ``line()`` says it in one line, ``as_dict()`` as JSON."""

    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    files_failed: int = 0
    chunks_embedded: int = 0
    points_upserted: int = 0
    points_deleted: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # of ``seconds``, in the embedder (its own thread)
    errors: list[dict[str, str]] = field(default_factory=list)
    # indexed, but part of it was left out or changed (frontmatter over a limit, ...)
    warnings: list[dict[str, str]] = field(default_factory=list)
    dry_run: bool = False
    failures: list[Failure] = field(default_factory=list, repr=False)
    interrupted: bool = False  # a stop was asked for before everything was written
    refused: str = ""  # why deletions were not made (mdindex.index.guard), when they were not
    embedding: dict[str, Any] = field(default_factory=dict)  # how its texts were embedded
    # after the sync: documents indexed per language, and those the dense model reads
    languages: dict[str, int] = field(default_factory=dict)
    model_languages: list[str] = field(default_factory=list)
    daemon: bool = False  # reconciled by the watch daemon, not in this process

    def fail(self, failure: Failure) -> None:
        self.files_failed += 1
        self.failures.append(failure)
        self.errors.append(
            {"path": printable(failure.rel), "root": failure.root, "reason": failure.reason}
        )
        log.warning("skipped %s: %s", printable(f"{failure.root}:{failure.rel}"), failure.reason)

    def warn(self, root: str, rel: str, reason: str) -> None:
        self.warnings.append({"path": printable(rel), "root": root, "reason": reason})
        log.warning("%s: %s", printable(f"{root}:{rel}"), reason)

    def as_dict(self) -> dict[str, Any]:
        return (
            {
                "files_seen": self.files_seen,
                "files_changed": self.files_changed,
                "files_unchanged": self.files_unchanged,
                "files_deleted": self.files_deleted,
                "files_failed": self.files_failed,
                "chunks_embedded": self.chunks_embedded,
                "points_upserted": self.points_upserted,
                "points_deleted": self.points_deleted,
                "seconds": round(self.seconds, 3),
                "embed_seconds": round(self.embed_seconds, 3),
                "errors": self.errors,
                "warnings": self.warnings,
                "refused": self.refused,
                "dry_run": self.dry_run,
            }
            | ({"embedding": self.embedding} if self.embedding else {})
            | (
                {"languages": self.languages, "model_languages": self.model_languages}
                if self.model_languages
                else {}
            )
        )

    def line(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        files = "1 file" if self.files_seen == 1 else f"{self.files_seen} files"
        return (
            f"{files}: {self.files_changed} {verb}, "
            f"{self.files_unchanged} unchanged, "
            f"{self.files_deleted} deleted, {self.files_failed} failed; "
            f"{_count(self.chunks_embedded, 'chunk')} embedded, "
            f"{_count(self.points_upserted, 'point')} upserted, "
            f"{self.points_deleted} deleted in {self.seconds:.2f}s"
        )


# When more than this share of at least SUSPECT_MIN sampled vectors disagree,
# or every one of fewer, repair suspects the embedder: a permuted model.onnx
# once made it rewrite 10 of 10 documents with wrong vectors (and 3 of 3 went
# through while a suspicion needed 5 samples).
SUSPECT_SHARE = 0.5
SUSPECT_MIN = 5


# What an entry of a VerifyReport list holds (the command line prints them).
_ENTRY_KEYS = {
    "missing": ("id", "root", "doc_path", "chunk_index"),
    "stale": ("id", "root", "doc_path", "chunk_index"),
    "duplicates": ("id", "root", "doc_path", "chunk_index"),
    "graph": ("root", "doc_path", "reason"),
    "errors": ("root", "path", "reason"),
}


@dataclass
class VerifyReport:
    missing: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    # documents whose recorded links, tags or headings differ from the file
    graph: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    repaired: bool = False
    vectors_checked: int = 0  # sampled and re-embedded
    vectors_disagreeing: int = 0
    daemon: bool = False  # the watch daemon verified (it holds the store)

    @property
    def embedder_suspect(self) -> bool:
        n, bad = self.vectors_checked, self.vectors_disagreeing
        if n < SUSPECT_MIN:
            return 0 < bad == n
        return bad > SUSPECT_SHARE * n

    @property
    def in_sync(self) -> bool:
        return not (self.missing or self.stale or self.duplicates or self.graph)

    def line(self) -> str:
        return (
            f"missing: {len(self.missing)}, stale: {len(self.stale)}, "
            f"duplicates: {len(self.duplicates)}, graph: {len(self.graph)}, "
            f"in sync: {self.in_sync}" + (" (repaired)" if self.repaired else "")
        )

    @classmethod
    def from_dict(cls, data: Any) -> VerifyReport:
        """The report ``as_dict`` gave (the daemon's answer), ``daemon`` set;
        ValueError for anything else: a key missing ("{}" read as in sync), or
        an entry without what the command line prints of it."""
        if not isinstance(data, dict):
            raise ValueError("not a report")
        report = cls(daemon=True)
        for f in dataclasses.fields(cls):
            if f.name == "daemon":
                continue
            if f.name not in data:
                raise ValueError(f"{f.name} is missing")
            kind, value = type(getattr(report, f.name)), data[f.name]
            if not isinstance(value, kind):
                raise ValueError(f"{f.name} is not a {kind.__name__}")
            if kind is list:
                need = _ENTRY_KEYS.get(f.name, ())
                if not all(isinstance(e, dict) and all(k in e for k in need) for e in value):
                    raise ValueError(f"an entry of {f.name} is not one")
            setattr(report, f.name, value)
        return report

    def as_dict(self) -> dict[str, Any]:
        return {
            "missing": self.missing,
            "stale": self.stale,
            "duplicates": self.duplicates,
            "graph": self.graph,
            "in_sync": self.in_sync,
            "repaired": self.repaired,
            "errors": self.errors,
            "vectors_checked": self.vectors_checked,
            "vectors_disagreeing": self.vectors_disagreeing,
        }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
