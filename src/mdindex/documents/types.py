"""The small value types of documents: a parsed ``Document`` with its outline
(``Heading``, ``Block``), and the ``Chunk`` a chunker cuts from it."""

from __future__ import annotations

import bisect
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

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
    lang: str = ""  # ISO 639-1, "" when unknown (mdindex.documents.language)
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
