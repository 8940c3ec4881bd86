"""The payload's schema, which the write side (planning) and the read side
(search, and what the CLI and the API show) both follow: the keys every point
carries are those of the interface (docs/search.md, "What every point
carries"), beside a few of our own bookkeeping that users never see."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Payload keys for our own bookkeeping, not part of the interface users see.
INTERNAL_KEYS = ("vector_key",)
# What the nested ``metadata`` payload key repeats (see README, "LangChain and
# LlamaIndex"): 366 bytes a point on anthropic-docs, a quarter of its payload
# JSON (1,488 bytes) and an eighth of the point with its 1,536-byte vector.
FRAMEWORK_KEYS = (
    "root",
    "doc_path",
    "title",
    "url",
    "section",
    "heading_path",
    "line_start",
    "line_end",
    "chunk_index",
    "lang",
)
# Bumped when the payload's layout changes: part of the document fingerprint,
# so every document is rewritten (vectors reused) once. 2: the metadata key;
# 3: links and tags (which also records every document's links in the state);
# 4: lang, the document's language (mdindex.documents.language).
PAYLOAD_LAYOUT = 4


def public(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload as users see it: the interface's keys, not our bookkeeping."""
    return {k: v for k, v in payload.items() if k not in INTERNAL_KEYS}


def titled(title: str, headings: Sequence[str]) -> str:
    """ "Title › Heading › Subheading", as the CLI shows a section: its first
    heading left out where it only repeats the title (a page's `# Title`)."""
    path = list(headings)
    if path and path[0] == title:
        path = path[1:]
    return " › ".join([title, *path])
