"""Small value types shared by the chunkers, the sync core and the stores."""

from __future__ import annotations

import bisect
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from mdindex.files import Failure, printable

log = logging.getLogger(__name__)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str  # plain text, markup stripped
    anchor: str  # GitHub-style slug, unique within the document
    start: int  # char offset of the heading's first line
    end: int  # char offset just past the heading's last line
    path: tuple[str, ...]  # headings from the top level down to this one


@dataclass(frozen=True, slots=True)
class Block:
    """A top-level or nested leaf block of the body, as char offsets."""

    start: int
    end: int
    kind: str  # "prose", "heading", "code"


@dataclass(slots=True)
class Document:
    text: str  # decoded, BOM removed, newlines normalised to "\n"
    body_start: int  # first char after the frontmatter block
    title: str
    url: str  # without anchor; "" when unknown
    meta: dict[str, Any]
    headings: list[Heading]
    blocks: list[Block]
    code_ranges: list[tuple[int, int]]  # fenced and indented code blocks
    line_starts: list[int]
    warnings: list[str] = field(default_factory=list)
    doc_hash: str = ""
    heading_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.heading_starts = [h.start for h in self.headings]
        self.doc_hash = digest(self.text)

    def line_of(self, pos: int) -> int:
        """1-based line containing char offset ``pos``."""
        return bisect.bisect_right(self.line_starts, pos)

    def heading_at(self, pos: int) -> Heading | None:
        """The nearest heading that starts at or before ``pos``."""
        i = bisect.bisect_right(self.heading_starts, pos) - 1
        return self.headings[i] if i >= 0 else None


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    char_start: int
    char_end: int
    token_count: int
    section: str = ""
    heading_path: tuple[str, ...] = ()
    anchor: str = ""
    # The tokenizer's ids of ``text`` (no special tokens) when chunking had them.
    token_ids: list[int] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def under(
        cls,
        text: str,
        start: int,
        end: int,
        tokens: int,
        heading: Heading | None,
        token_ids: list[int] | None = None,
    ) -> Chunk:
        """The chunk ``text[start:end]`` belonging to the section of ``heading``."""
        if heading is None:
            return cls(text[start:end], start, end, tokens, token_ids=token_ids)
        return cls(
            text[start:end],
            start,
            end,
            tokens,
            heading.text,
            heading.path,
            heading.anchor,
            token_ids,
        )


@dataclass
class Summary:
    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    files_failed: int = 0
    chunks_embedded: int = 0
    points_upserted: int = 0
    points_deleted: int = 0
    seconds: float = 0.0
    errors: list[dict[str, str]] = field(default_factory=list)
    # indexed, but part of it was left out or changed (frontmatter over a limit, ...)
    warnings: list[dict[str, str]] = field(default_factory=list)
    dry_run: bool = False
    failures: list[Failure] = field(default_factory=list, repr=False)
    interrupted: bool = False  # a stop was asked for before everything was written
    refused: str = ""  # why deletions were not made (mdindex.guard), when they were not

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
        return {
            "files_seen": self.files_seen,
            "files_changed": self.files_changed,
            "files_unchanged": self.files_unchanged,
            "files_deleted": self.files_deleted,
            "files_failed": self.files_failed,
            "chunks_embedded": self.chunks_embedded,
            "points_upserted": self.points_upserted,
            "points_deleted": self.points_deleted,
            "seconds": round(self.seconds, 3),
            "errors": self.errors,
            "warnings": self.warnings,
            "refused": self.refused,
            "dry_run": self.dry_run,
        }

    def line(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        return (
            f"{self.files_seen} files: {self.files_changed} {verb}, "
            f"{self.files_unchanged} unchanged, "
            f"{self.files_deleted} deleted, {self.files_failed} failed; "
            f"{self.chunks_embedded} chunks embedded, {self.points_upserted} points upserted, "
            f"{self.points_deleted} deleted in {self.seconds:.2f}s"
        )
