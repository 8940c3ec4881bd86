"""Fixed token windows with overlap, cut between words of the model's tokenizer."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from functools import partial

from mdindex.chunking.chars import char_end
from mdindex.chunking.windows import Span, fit, strip_span
from mdindex.documents.budget import check
from mdindex.documents.types import Chunk, Document
from mdindex.embedding.tokens import TokenCounter

_NON_SPACE = re.compile(r"\S")


def windows(
    word_ids: Sequence[int | None],
    size: int,
    overlap: int,
    reach: Callable[[int], int] | None = None,
) -> list[tuple[int, int]]:
    """Token index ranges [i, j) of at most ``size`` tokens, and of the tokens
    before ``reach(i)`` (the character bound) though at least one.

    A window ends between two words when it can, so that the slice re-tokenizes
    to the same tokens; a single word longer than the window is cut anyway.
    """
    n = len(word_ids)
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:
        check()
        j = min(i + size, n)
        shared = overlap
        if reach is not None and (bound := max(reach(i), i + 1)) < j:
            # a shorter window shares as large a part of itself as a full one
            j, shared = bound, overlap * (bound - i) // size
        if j < n:
            k = j
            while k > i + 1 and word_ids[k] == word_ids[k - 1]:
                k -= 1
            if word_ids[k] != word_ids[k - 1]:
                j = k
        out.append((i, j))
        if j >= n:
            break
        nxt = max(j - shared, i + 1)
        while nxt < j and word_ids[nxt] == word_ids[nxt - 1]:
            nxt += 1
        i = nxt
    return out


def _reach(body: str, starts: list[int], max_chars: int, nonspace: re.Pattern[str], i: int) -> int:
    """The end of the longest window from token i within ``max_chars``
    characters: a window runs to the next one's first token, so it ends at the
    last token that starts at or before the character past the bound."""
    lo = 0 if i == 0 else starts[i]
    hi = char_end(body, lo, len(body), max_chars)
    if hi >= len(body):
        return len(starts)
    m = nonspace.search(body, hi)
    return bisect.bisect_right(starts, m.start() if m else len(body)) - 1


def chunk_many(
    docs: Sequence[Document], counter: TokenCounter, overlap: int, max_chars: int
) -> list[list[Chunk]]:
    bodies = [strip_span(doc.text, doc.body_start, len(doc.text)) for doc in docs]
    encodings = counter.encode_batch(
        [doc.text[s:e] for doc, (s, e) in zip(docs, bodies, strict=True)]
    )
    out: list[list[Chunk]] = []
    for doc, (start, end), enc in zip(docs, bodies, encodings, strict=True):
        if end <= start:
            out.append([])
            continue
        offsets, word_ids = enc.offsets, enc.word_ids
        n = len(offsets)
        reach = partial(_reach, doc.text[start:end], [a for a, _ in offsets], max_chars, _NON_SPACE)
        spans: list[Span] = []
        counts: list[int | None] = []
        for i, j in windows(word_ids, counter.limit, overlap, reach):
            # Edges run to the next window's first token, so characters the
            # tokenizer drops (control and zero-width chars) still land in a chunk.
            spans.append(
                (
                    start if i == 0 else start + offsets[i][0],
                    end if j == n else start + offsets[j][0],
                )
            )
            whole_words = (i == 0 or word_ids[i] != word_ids[i - 1]) and (
                j == n or word_ids[j] != word_ids[j - 1]
            )
            counts.append(j - i if whole_words and counter.stable else None)
        if not spans:  # text the tokenizer maps to no tokens at all
            spans, counts = [(start, end)], [None]
        out.append(
            [
                Chunk.under(doc.text, s, e, c, doc.heading_at(s), ids)
                for s, e, c, ids in fit(
                    doc.text, spans, counter, overlap, doc.code_ranges, counts, max_chars
                )
            ]
        )
    return out
