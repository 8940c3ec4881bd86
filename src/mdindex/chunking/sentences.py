"""A sentence segmenter for markdown prose.

It does not split after abbreviations (Dr., e.g.), inside decimals or version
numbers, URLs or inline code; headings, list items and code blocks are
boundaries because they arrive as separate blocks. It knows the sentence ends
of Chinese and Japanese (。！？, no space after them), Arabic (؟) and Hindi
(।), and cuts Thai, which has no sentence punctuation, at its spaces.
"""

from __future__ import annotations

import re

from mdindex.chunking.chars import CLOSERS, FULL_ENDS, SPACED_ENDS, THAI
from mdindex.chunking.windows import Span, strip_span
from mdindex.documents.budget import check
from mdindex.documents.types import Document

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

# Every pattern here runs in linear time on any input: a match may only start
# where the previous character could not have started it (the lookbehinds), and
# nothing backtracks over a run it already consumed (possessive quantifiers).
# The old URL pattern took 11 s on "www." + 16k dots.
_END = re.compile(
    rf"(?<![.!?…{SPACED_ENDS}])[.!?…{SPACED_ENDS}]++[{CLOSERS}*_]*+(?=\s)"
    rf"|(?<![{FULL_ENDS}])[{FULL_ENDS}]++[{CLOSERS}*_]*+"
    # Thai has no sentence punctuation: a space between two Thai words ends a
    # sentence (or a phrase, which is the unit Thai writers separate).
    rf"|(?<=[{THAI}])\s++(?=[{THAI}])"
)
_TAG = re.compile(r"<[^<>\s]++>")  # autolinks and inline HTML tags
_LINK_DEST = re.compile(r"\]\([^()\s]*+\)")
_URL = re.compile(r"\b(?:(?:https?|ftp)://|www\.)\S++")
_URL_TAIL = ".,;:!?)]'\""  # punctuation that ends the sentence around a URL
_BACKTICKS = re.compile(r"(?<!`)`++")


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Inline code spans: a run of backticks up to the next run of the same length.

    A regex with a backreference tries every run against the rest of the text
    (quadratic on many unclosed runs); this looks each length up in a queue of
    later runs instead, linear in the number of runs.
    """
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text, start, end)]
    by_length: dict[int, list[int]] = {}
    for i, (s, e) in enumerate(runs):
        by_length.setdefault(e - s, []).append(i)
    cursor = dict.fromkeys(by_length, 0)  # first run of each length not yet passed
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        length = runs[i][1] - runs[i][0]
        same = by_length[length]
        k = cursor[length]
        while k < len(same) and same[k] <= i:
            k += 1
        cursor[length] = k
        if k == len(same):
            i += 1  # never closed: literal backticks
            continue
        close = same[k]
        spans.append((runs[i][0], runs[close][1]))
        i = close + 1
    return spans


def _protected(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sorted, non-overlapping spans where a full stop never ends a sentence."""
    found = _code_spans(text, start, end)
    for pattern in (_TAG, _LINK_DEST):
        found.extend(m.span() for m in pattern.finditer(text, start, end))
    for m in _URL.finditer(text, start, end):
        url_end = m.end()
        while url_end > m.start() and text[url_end - 1] in _URL_TAIL:
            url_end -= 1
        found.append((m.start(), url_end))
    found.sort()
    merged: list[tuple[int, int]] = []
    for s, e in found:
        if merged and s < merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            continue
        merged.append((s, e))
    return merged


_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_boundary(text: str, dot_start: int, after: int, end: int) -> bool:
    if text[dot_start] in FULL_ENDS or text[dot_start].isspace():  # Chinese, Thai
        return True
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
    protected = _protected(text, start, end)
    spans: list[Span] = []
    pos = start
    p = 0
    for m in _END.finditer(text, start, end):
        check()
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
