"""A document's tags: frontmatter ``tags`` or ``tag`` (a list, or a string of
names split at commas and spaces) and inline ``#tag/subtag`` in prose, as
``documents.links`` finds them; lowercased, without ``#`` and edge slashes,
each once, and bounded."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MAX_TAGS = 200
MAX_TAG_CHARS = 100
# a tag starts a word (after a space, or a line's start) and holds a letter
_TAG = re.compile(r"(?<!\S)#(\w[\w/-]*)")
_SPLIT_TAGS = re.compile(r"[\s,]+")


def block_tags(text: str, start: int, end: int, free: Callable[[int, int], bool]) -> list[str]:
    """The inline tags of a block, but those in a span ``free`` refuses (code, a URL)."""
    return [m.group(1) for m in _TAG.finditer(text, start, end) if free(m.start(), m.end())]


def frontmatter_tags(meta: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("tags", "tag"):
        value = meta.get(key)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str):
                out.extend(t for t in _SPLIT_TAGS.split(item) if t)
            elif isinstance(item, int | float) and not isinstance(item, bool):
                out.append(str(item))
    return out


def normal_tag(tag: str) -> str:
    """A tag as it is stored and searched: without ``#`` or edge slashes, lowercased."""
    return tag.strip().lstrip("#").strip("/").casefold()


def normalized_tags(tags: list[str]) -> tuple[list[str], str]:
    """Tags lowercased, without ``#`` and edge slashes, each once; those with no
    letter (``#1``) or too long are not tags. Also why any were dropped."""
    out: dict[str, None] = {}
    too_long = 0
    for tag in tags:
        norm = normal_tag(tag)
        if not norm or not any(c.isalpha() for c in norm):
            continue
        if len(norm) > MAX_TAG_CHARS or "//" in norm:
            too_long += 1
            continue
        out.setdefault(norm)
    kept = list(out)[:MAX_TAGS]
    notes = []
    if too_long:
        notes.append(f"{too_long} tags dropped (over {MAX_TAG_CHARS} characters or an empty part)")
    if len(out) > MAX_TAGS:
        notes.append(f"{len(out)} tags; the first {MAX_TAGS} are kept")
    return kept, "; ".join(notes)
