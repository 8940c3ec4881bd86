"""Length in characters, the bound that holds where tokens do not measure text.

all-MiniLM-L6-v2's vocabulary barely knows Thai: a run of Thai between two
spaces is one [UNK] token, so one chunk of 2,361 characters counted 189
tokens. ``max_chars`` bounds every chunk in characters too.

Whitespace does not count: English tables padded with spaces reach 2,769
characters in 254 tokens (../shared/corpus), but no English chunk holds more
than 1,357 characters that are not whitespace (bench/chunk_lengths.py).
"""

from __future__ import annotations

import re
import unicodedata

# Sentence ends (mdindex.chunking.sentences, and cuts in mdindex.chunking.windows).
# These end a sentence only before whitespace ("3.14", "e.g.x" do not):
# Arabic question mark and full stop, Devanagari danda, Ethiopic and Myanmar stops.
SPACED_ENDS = "؟۔।॥።။"
# Full-width ends need no space after them (Chinese, Japanese). The full-width
# semicolon is not one: like ";" it joins clauses of one sentence.
FULL_ENDS = "。｡！？"
CLOSERS = "\"'”’)\\]」』）】》"
THAI = "\u0e00-\u0e7f"

_SPACE_RUN = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")


def count_chars(text: str, start: int = 0, end: int | None = None) -> int:
    """The characters of ``text[start:end]`` that are not whitespace."""
    return len(_SPACE_RUN.sub("", text[start:end]))


def char_end(text: str, start: int, end: int, n: int) -> int:
    """Where the first ``n`` non-whitespace characters of ``text[start:end]`` end,
    or ``end`` when nothing but whitespace follows them."""
    pos, left = start, n
    # Each step takes as many characters as are still wanted: a step without
    # whitespace is the last, and text with spaces between its words takes a few
    # (a loop over whitespace runs took 1.4 s for 150,000 lines on 2 cores).
    while left > 0 and pos < end:
        stop = min(end, pos + left)
        left -= count_chars(text, pos, stop)
        pos = stop
    return pos if _NON_SPACE.search(text, pos, end) else end


def _extends(ch: str) -> bool:
    """A character that belongs to the one before it (a cut never lands before it):
    marks (Thai vowels above and below, accents), joiners, variation selectors,
    emoji skin tones and tags."""
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or ch in "\u200c\u200d"
        or "\ufe00" <= ch <= "\ufe0f"
        or "\U0001f3fb" <= ch <= "\U0001f3ff"
        or "\U000e0020" <= ch <= "\U000e007f"
    )


_VIRAMA = 9  # the canonical combining class of the Indic viramas (्, ্, ្ ...)


def _regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def is_grapheme_boundary(text: str, pos: int, floor: int = 0) -> bool:
    """Whether a cut at ``pos`` keeps every user-perceived character whole
    (a simplification of Unicode's grapheme rules: no Hangul jamo). Flags are
    paired from ``floor``, a known boundary: scanning back to a run's start
    made 300,000 regional indicators take 7 s to cut (2 cores)."""
    if pos <= 0 or pos >= len(text):
        return True
    before, ch = text[pos - 1], text[pos]
    if _extends(ch) or before == "\u200d" or (before == "\r" and ch == "\n"):
        return False
    if unicodedata.combining(before) == _VIRAMA and unicodedata.category(ch) == "Lo":
        return False  # an Indic conjunct: क्ष is one letter to its reader
    if _regional(before) and _regional(ch):  # flags are pairs
        k = pos - 1
        while k > floor and _regional(text[k - 1]):
            k -= 1
        return (pos - k) % 2 == 0
    return True


def grapheme_cut(text: str, lo: int, hi: int) -> int:
    """Right after the last zero-width space in (lo, hi] (Thai writers mark
    word breaks with it), else the last grapheme boundary there, else ``hi``
    when a single cluster (hundreds of stacked marks) fills the whole range."""
    soft = text.rfind("\u200b", lo, hi)
    if soft >= lo:
        return soft + 1
    for pos in range(hi, lo, -1):
        if is_grapheme_boundary(text, pos, lo):
            return pos
    return hi
