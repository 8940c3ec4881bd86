"""Cutting a span of text into token windows at the best boundary available.

Used by the heading strategy for oversized sections and by the semantic
strategy for oversized sentences; ``fit`` is the single place that guarantees
every chunk's exact token count, the hard limit, and the character bound
(``max_chars``, mdindex.chunking.chars).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from mdindex.chunking.chars import (
    CLOSERS,
    FULL_ENDS,
    SPACED_ENDS,
    char_end,
    count_chars,
    grapheme_cut,
)
from mdindex.documents.budget import check
from mdindex.embedding.tokens import Encoded, TokenCounter

Span = tuple[int, int]
Piece = tuple[int, int, int | None]  # start, end, token count (None: unknown)
# start, end, token count, and the tokens' ids when the text was tokenized on its own
Counted = tuple[int, int, int, list[int] | None]

_BLANK = re.compile(r"\n[ \t]*\n")
_SENTENCE = re.compile(rf"[.!?{SPACED_ENDS}][{CLOSERS}]*(?=\s)|[{FULL_ENDS}]+[{CLOSERS}]*")
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
        self.ranges = sorted(ranges)
        self.starts = [r[0] for r in self.ranges]
        self.ends = sorted(r[1] for r in self.ranges)

    def inside(self, pos: int) -> bool:
        i = bisect.bisect_right(self.starts, pos - 1) - 1
        return i >= 0 and self.ranges[i][0] < pos < self.ranges[i][1]

    def edges(self, lo: int, hi: int) -> list[int]:
        """Block starts and ends in (lo, hi], found by bisection: a section with
        thousands of code blocks is cut thousands of times."""
        out: list[int] = []
        for values in (self.starts, self.ends):
            a, b = bisect.bisect_right(values, lo), bisect.bisect_right(values, hi)
            out.extend(values[a:b])
        return out


def split_span(
    text: str,
    start: int,
    end: int,
    offsets: Sequence[Span],
    limit: int,
    overlap: int,
    code_ranges: Sequence[Span] = (),
    boundary: re.Pattern[str] = _SPACE,
    max_chars: int | None = None,
) -> list[Piece]:
    """Cut ``text[start:end]`` into windows of at most ``limit`` tokens and
    ``max_chars`` characters (``chars.count_chars``); a window holds at least
    one token, so one token over ``max_chars`` is left for ``fit`` to cut.

    ``offsets`` are the absolute char spans of the tokens in the span. Each cut
    prefers a blank line or code block edge, then a sentence end, then a line
    end, then any whitespace, and only as a last resort falls between two
    tokens of one word. Cuts never land inside a code block unless that block
    alone is over the limit. Consecutive windows share about ``overlap``
    tokens, starting at a word.

    Each window comes with its token count within the longer text, or None
    when one of its edges fell inside a word (so only re-tokenizing can tell).
    A cut next to a character ``boundary`` matches is a word edge too: BERT's
    pre-tokenizer isolates punctuation, so a run of 1M dots needs no second
    tokenizing pass (0.67 s of 2.7 s on 2 cores).
    """
    n = len(offsets)
    if n <= limit and (max_chars is None or char_end(text, start, end, max_chars) >= end):
        return [(start, end, n)]
    tok_starts = [s for s, _ in offsets]
    tok_ends = [e for _, e in offsets]

    def tokens_in(lo: int, hi: int) -> int:
        return bisect.bisect_left(tok_starts, hi) - bisect.bisect_left(tok_starts, lo)

    near = [r for r in code_ranges if r[1] > start and r[0] < end]
    guard = _Guard(
        [
            r
            for r in near
            if tokens_in(*r) <= limit and (max_chars is None or count_chars(text, *r) <= max_chars)
        ]
    )
    pieces: list[Piece] = []
    i = 0
    win_start = start
    clean_start = True
    while True:
        check()
        hi_chars = end if max_chars is None else char_end(text, win_start, end, max_chars)
        j = i + limit  # first token that does not fit
        shared, cap = overlap, end
        if hi_chars < end:  # nor past the character bound
            reach = bisect.bisect_right(tok_ends, hi_chars)
            if reach < j:
                # a shorter window shares as large a part of itself, not 32 of its 35 tokens
                j, shared = max(reach, i + 1), overlap * max(reach - i, 0) // limit
                # a window holds one token at least: one over the bound is fit's to cut
                cap = hi_chars if reach > i else end
        if j >= n:
            pieces.append((win_start, end, tokens_in(win_start, end) if clean_start else None))
            return pieces
        hi = min(offsets[j][0], cap)
        cut = _best_cut(text, offsets[i + (j - i) // 2][1], offsets[i][1], hi, guard)
        clean_cut = (
            cut != hi
            or text[hi - 1].isspace()
            or bool(boundary.match(text, hi - 1) or boundary.match(text, hi))
        )
        clean = clean_start and clean_cut
        pieces.append((win_start, cut, tokens_in(win_start, cut) if clean else None))
        k = bisect.bisect_left(tok_starts, cut)
        nxt = k
        for t in range(max(k - shared, i + 1), k):
            pos = offsets[t][0]
            if (pos == 0 or text[pos - 1].isspace()) and not guard.inside(pos):
                nxt = t
                break
        if nxt >= n:
            if text[cut:end].strip():
                pieces.append((cut, end, tokens_in(cut, end) if clean_cut else None))
            return pieces
        i = nxt
        # Without overlap the next window starts right at the cut, so nothing
        # between two windows (not even a char the tokenizer drops) is lost.
        win_start = cut if nxt == k else offsets[i][0]
        clean_start = clean_cut if nxt == k else True


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


def split_chars(
    text: str, start: int, end: int, max_chars: int, code_ranges: Sequence[Span] = ()
) -> list[Span]:
    """Cut ``text[start:end]`` into pieces of at most ``max_chars`` characters
    that are not whitespace, at the boundaries ``split_span`` prefers; a run
    with none of them (Thai without spaces) is cut between graphemes.

    Pieces do not overlap: a cut for characters is made where tokens no longer
    measure the text, so there is no token overlap to keep.
    """
    near = [r for r in code_ranges if r[1] > start and r[0] < end]
    guard = _Guard([r for r in near if count_chars(text, *r) <= max_chars])
    pieces: list[Span] = []
    pos = start
    while True:
        check()
        hi = char_end(text, pos, end, max_chars)
        if hi >= end:
            pieces.append((pos, end))
            return pieces
        lo = char_end(text, pos, end, max_chars // 2)
        cut = _best_cut(text, lo, pos, hi, guard)
        if cut == hi:
            cut = grapheme_cut(text, pos, hi)
        pieces.append((pos, cut))
        pos = cut


def fit(
    text: str,
    spans: Sequence[Span],
    counter: TokenCounter,
    overlap: int,
    code_ranges: Sequence[Span] = (),
    known: Sequence[int | Encoded | None] | None = None,
    max_chars: int | None = None,
) -> list[Counted]:
    """Strip spans, drop empty ones, window those over the limit, and count exactly.

    ``known`` may give, per span, the exact token count of its stripped text
    or its encoding; only spans with neither are tokenized, in one batch.
    A span's ids come along when its own encoding was at hand, so the
    embedder need not tokenize that text again. A span within the token limit
    but over ``max_chars`` characters (``chars.count_chars``) is cut by
    characters, and its pieces are counted again.
    """
    limit = counter.limit
    bound = max_chars

    def fits(s: int, e: int) -> bool:
        return bound is None or e - s <= bound or count_chars(text, s, e) <= bound

    items: list[tuple[int, int, int | Encoded | None]] = []
    for i, (s, e) in enumerate(spans):
        s, e = strip_span(text, s, e)
        if e > s:
            items.append((s, e, known[i] if known is not None else None))
    todo = [
        i
        for i, (s, e, k) in enumerate(items)
        if k is None or (isinstance(k, int) and (k > limit or not fits(s, e)))
    ]
    encoded = counter.encode_batch([text[items[i][0] : items[i][1]] for i in todo])
    encodings = dict(zip(todo, encoded, strict=True))
    out: list[Counted] = []
    for i, (s, e, k) in enumerate(items):
        check()
        enc = encodings.get(i, k)
        if isinstance(enc, int):
            out.append((s, e, enc, None))
            continue
        assert enc is not None
        if len(enc.ids) <= limit and fits(s, e):
            out.append((s, e, len(enc.ids), enc.ids))
            continue
        # Work on the section's own text so its encoding's offsets need no shifting.
        local_code = [(a - s, b - s) for a, b in code_ranges if b > s and a < e]
        pieces = split_span(
            text[s:e],
            0,
            e - s,
            enc.offsets,
            limit,
            min(overlap, limit // 2),
            local_code,
            counter.cut,
            max_chars,
        )
        if len(pieces) == 1:  # one token over max_chars: cut it between characters
            assert max_chars is not None
            cuts = split_chars(text, s, e, max_chars, code_ranges)
            out.extend(fit(text, cuts, counter, overlap, code_ranges, max_chars=max_chars))
            continue
        # Counts carried over from the longer text hold only for tokenizers
        # that split at whitespace; otherwise each (shorter) piece is counted again.
        out.extend(
            fit(
                text,
                [(s + a, s + b) for a, b, _ in pieces],
                counter,
                overlap,
                code_ranges,
                [c if counter.stable else None for _, _, c in pieces],
                max_chars,
            )
        )
    return out
