"""Fixed token windows with overlap, cut between words of the model's tokenizer."""

from __future__ import annotations

from mdindex.chunking.windows import Span, fit, strip_span
from mdindex.models import Chunk, Document
from mdindex.tokens import TokenCounter


def windows(word_ids: list[int | None], size: int, overlap: int) -> list[tuple[int, int]]:
    """Token index ranges [i, j) of at most ``size`` tokens.

    A window ends between two words when it can, so that the slice re-tokenizes
    to the same tokens; a single word longer than the window is cut anyway.
    """
    n = len(word_ids)
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = min(i + size, n)
        if j < n:
            k = j
            while k > i + 1 and word_ids[k] == word_ids[k - 1]:
                k -= 1
            if word_ids[k] != word_ids[k - 1]:
                j = k
        out.append((i, j))
        if j >= n:
            break
        nxt = max(j - overlap, i + 1)
        while nxt < j and word_ids[nxt] == word_ids[nxt - 1]:
            nxt += 1
        i = nxt
    return out


def chunk(doc: Document, counter: TokenCounter, overlap: int) -> list[Chunk]:
    start, end = strip_span(doc.text, doc.body_start, len(doc.text))
    if end <= start:
        return []
    enc = counter.encode(doc.text[start:end])
    offsets = enc.offsets
    n = len(offsets)
    # Window edges run to the next window's first token, so characters the
    # tokenizer drops (control and zero-width chars) still land in a chunk.
    spans: list[Span] = [
        (start if i == 0 else start + offsets[i][0], end if j == n else start + offsets[j][0])
        for i, j in windows(enc.word_ids, counter.limit, overlap)
    ] or [(start, end)]
    return [
        Chunk.under(doc.text, s, e, count, doc.heading_at(s))
        for s, e, count in fit(doc.text, spans, counter, overlap, doc.code_ranges)
    ]
