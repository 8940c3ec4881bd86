"""What one sync did: the counts, the files that failed and why, and what was
left out; printed by backfill, returned by the daemon's reconcile."""

from __future__ import annotations

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
            f"{self.chunks_embedded} chunks embedded, {self.points_upserted} points upserted, "
            f"{self.points_deleted} deleted in {self.seconds:.2f}s"
        )
