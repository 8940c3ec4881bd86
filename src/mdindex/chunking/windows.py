"""Cutting a span of text into token windows at the best boundary available.

Used by the heading strategy for oversized sections and by the semantic
strategy for oversized sentences; ``fit`` is the single place that guarantees
every chunk's exact token count and the hard limit.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from mdindex.tokens import TokenCounter

Span = tuple[int, int]
Counted = tuple[int, int, int]  # start, end, token count

_BLANK = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(r"[.!?][\"'”’)\]]*(?=\s)")
_NEWLINE = re.compile(r"\n")
_SPACE = re.compile(r"\s+")


def strip_span(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class _Guard:
    """Answers whether a cut at a position would land inside a protected code block."""

    def __init__(self, ranges: Sequence[Span]) -> None:
        self.ranges = list(ranges)
        self.starts = [r[0] for r in self.ranges]

    def inside(self, pos: int) -> bool:
        i = bisect.bisect_right(self.starts, pos - 1) - 1
        return i >= 0 and self.ranges[i][0] < pos < self.ranges[i][1]

    def edges(self, lo: int, hi: int) -> list[int]:
        out: list[int] = []
        for start, end in self.ranges:
            if lo < start <= hi:
                out.append(start)
            if lo < end <= hi:
                out.append(end)
        return out


def split_span(
    text: str,
    start: int,
    end: int,
    offsets: Sequence[Span],
    limit: int,
    overlap: int,
    code_ranges: Sequence[Span] = (),
) -> list[Span]:
    """Cut ``text[start:end]`` into windows of at most ``limit`` tokens.

    ``offsets`` are the absolute char spans of the tokens in the span. Each cut
    prefers a blank line or code block edge, then a sentence end, then a line
    end, then any whitespace, and only as a last resort falls between two tokens of one word.
    Cuts never land inside a code block unless that block alone is over the limit.
    Consecutive windows share about ``overlap`` tokens, starting at a word.
    """
    n = len(offsets)
    if n <= limit:
        return [(start, end)]
    tok_starts = [s for s, _ in offsets]

    def tokens_in(lo: int, hi: int) -> int:
        return bisect.bisect_left(tok_starts, hi) - bisect.bisect_left(tok_starts, lo)

    guard = _Guard(
        [r for r in code_ranges if r[1] > start and r[0] < end and tokens_in(*r) <= limit]
    )
    spans: list[Span] = []
    i = 0
    win_start = start
    while True:
        j = i + limit  # first token that does not fit
        if j >= n:
            spans.append((win_start, end))
            return spans
        hi = offsets[j][0]
        lo_any = offsets[i][1]
        lo_pref = offsets[i + limit // 2][1]
        cut = _best_cut(text, lo_pref, lo_any, hi, guard)
        spans.append((win_start, cut))
        k = bisect.bisect_left(tok_starts, cut)
        nxt = k
        for t in range(max(k - overlap, i + 1), k):
            pos = offsets[t][0]
            if (pos == 0 or text[pos - 1].isspace()) and not guard.inside(pos):
                nxt = t
                break
        if nxt >= n:
            if text[cut:end].strip():
                spans.append((cut, end))
            return spans
        i = nxt
        # Without overlap the next window starts right at the cut, so nothing
        # between two windows (not even a char the tokenizer drops) is lost.
        win_start = cut if nxt == k else offsets[i][0]


def _best_cut(text: str, lo_pref: int, lo_any: int, hi: int, guard: _Guard) -> int:
    def last(pattern: re.Pattern[str], lo: int, use_end: bool) -> int | None:
        best = None
        for m in pattern.finditer(text, lo, hi):
            pos = m.end() if use_end else m.start()
            if lo < pos <= hi and not guard.inside(pos):
                best = pos
        return best

    edges = [p for p in guard.edges(lo_pref, hi) if not guard.inside(p)]
    blank = last(_BLANK, lo_pref, True)
    candidates = [p for p in [*edges, blank] if p is not None]
    if candidates:
        return max(candidates)
    for pattern, lo, use_end in (
        (_SENTENCE, lo_pref, True),
        (_NEWLINE, lo_pref, False),
        (_SPACE, lo_any, False),
    ):
        pos = last(pattern, lo, use_end)
        if pos is not None:
            return pos
    # One unbroken run of text longer than the window: cut between tokens.
    return hi


def fit(
    text: str,
    spans: Sequence[Span],
    counter: TokenCounter,
    overlap: int,
    code_ranges: Sequence[Span] = (),
    limit: int | None = None,
) -> list[Counted]:
    """Strip spans, drop empty ones, window those over the limit, and count exactly."""
    limit = counter.limit if limit is None else limit
    stripped = [strip_span(text, s, e) for s, e in spans]
    stripped = [(s, e) for s, e in stripped if e > s]
    encodings = counter.encode_batch([text[s:e] for s, e in stripped])
    out: list[Counted] = []
    for (s, e), enc in zip(stripped, encodings, strict=True):
        n = len(enc.ids)
        if n <= counter.limit and n <= limit:
            out.append((s, e, n))
            continue
        offsets = [(s + a, s + b) for a, b in enc.offsets]
        pieces = split_span(text, s, e, offsets, limit, min(overlap, limit // 2), code_ranges)
        # A tokenizer may count a slice differently from the same tokens inside a
        # longer text, so the pieces are counted again; each is strictly shorter.
        out.extend(fit(text, pieces, counter, overlap, code_ranges, limit))
    return out
