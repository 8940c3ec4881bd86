"""A sentence segmenter for markdown prose.

It does not split after abbreviations (Dr., e.g.), inside decimals or version
numbers, URLs or inline code; headings, list items and code blocks are
boundaries because they arrive as separate blocks.
"""

from __future__ import annotations

import re

from mdindex.chunking.windows import Span, strip_span
from mdindex.models import Document

ABBREVIATIONS = frozenset(
    [
        "dr",
        "mr",
        "mrs",
        "ms",
        "mx",
        "prof",
        "sr",
        "jr",
        "st",
        "mt",
        "vs",
        "etc",
        "cf",
        "fig",
        "figs",
        "eq",
        "eqs",
        "no",
        "nos",
        "vol",
        "vols",
        "ch",
        "chap",
        "sec",
        "p",
        "pp",
        "approx",
        "est",
        "dept",
        "inc",
        "ltd",
        "co",
        "corp",
        "al",
        "ca",
        "resp",
        "viz",
        "ie",
        "eg",
        "e.g",
        "i.e",
        "u.s",
        "u.k",
        "a.m",
        "p.m",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "op",
        "ed",
        "eds",
        "rev",
        "gen",
        "col",
        "lt",
        "sgt",
    ]
)

_END = re.compile(r"[.!?…]+[\"'”’)\]*_]*(?=\s)")
_PROTECTED = re.compile(
    r"(`+)[\s\S]*?\1"  # inline code
    r"|<[^>\s]+>"  # autolinks and inline HTML tags
    r"|\]\([^)\s]*\)"  # link destinations
    # URLs, minus the punctuation that ends the sentence around them
    r"|\b(?:(?:https?|ftp)://|www\.)\S+?(?=[.,;:!?)\]'\"]*(?:\s|\Z))"
)
_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_boundary(text: str, dot_start: int, after: int, end: int) -> bool:
    word = _WORD_BEFORE.search(text, max(0, dot_start - 40), dot_start + 1)
    if word is not None:
        token = word.group(1).lstrip("([\"'*_").lower()
        stem = token.rstrip(".")
        if text[dot_start] == "." and (stem in ABBREVIATIONS or re.fullmatch(r"[a-z]", stem)):
            return False
    nxt = after
    while nxt < end and text[nxt].isspace():
        nxt += 1
    # A lower-case word after the stop is almost always an abbreviation we do not know.
    return nxt >= end or not text[nxt].islower()


def split_sentences(text: str, start: int, end: int) -> list[Span]:
    """Sentence spans of ``text[start:end]``, stripped, covering all its non-space text."""
    protected = [m.span() for m in _PROTECTED.finditer(text, start, end)]
    spans: list[Span] = []
    pos = start
    p = 0
    for m in _END.finditer(text, start, end):
        while p < len(protected) and protected[p][1] <= m.start():
            p += 1
        if p < len(protected) and protected[p][0] <= m.start() < protected[p][1]:
            continue
        if not _is_boundary(text, m.start(), m.end(), end):
            continue
        s, e = strip_span(text, pos, m.end())
        if e > s:
            spans.append((s, e))
        pos = m.end()
    s, e = strip_span(text, pos, end)
    if e > s:
        spans.append((s, e))
    return spans


def units(doc: Document) -> list[tuple[Span, str]]:
    """(span, kind) for every sentence of prose and every heading or code block."""
    out: list[tuple[Span, str]] = []
    for block in doc.blocks:
        if block.kind == "prose":
            out.extend(
                (span, "prose") for span in split_sentences(doc.text, block.start, block.end)
            )
        else:
            s, e = strip_span(doc.text, block.start, block.end)
            if e > s:
                out.append(((s, e), block.kind))
    return out
