"""Semantic chunks: consecutive sentences grouped while they stay on one topic."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from mdindex.chunking.chars import count_chars
from mdindex.chunking.sentences import units
from mdindex.chunking.windows import Span, fit
from mdindex.documents.budget import check, paused
from mdindex.documents.types import Chunk, Document
from mdindex.embedding.embedder import Embedder
from mdindex.embedding.tokens import TokenCounter
from mdindex.errors import EmbeddingError


def _unit_vectors(embed: Embedder, texts: list[str]) -> NDArray[np.float64]:
    if not texts:
        return np.zeros((0, 1))
    vectors = np.asarray(embed.embed(texts), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise EmbeddingError(f"embedder returned shape {vectors.shape} for {len(texts)} sentences")
    if not np.all(np.isfinite(vectors)):
        bad = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        raise EmbeddingError(f"embedder returned non-finite values for sentence {bad}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def group(
    vectors: NDArray[np.float64],
    counts: Sequence[int],
    breaks: Sequence[bool],
    threshold: float,
    min_sentences: int,
    limit: int,
    chars: Sequence[int] | None = None,
    max_chars: int | None = None,
) -> list[tuple[int, int]]:
    """Index ranges [i, j) of sentences that form one chunk.

    A chunk closes when the next sentence's cosine similarity to the running
    mean of the chunk drops below ``threshold`` (once it has ``min_sentences``),
    when adding it would pass ``limit`` tokens or ``max_chars`` characters
    (``chars``: each sentence's, as ``chars.count_chars`` counts them), or
    before a forced break.
    """
    sizes = chars if chars is not None and max_chars is not None else [0] * len(counts)
    bound = max_chars if chars is not None and max_chars is not None else 0
    out: list[tuple[int, int]] = []
    if not len(counts):
        return out
    first = 0
    total = vectors[0].copy()
    tokens, size = counts[0], sizes[0]
    for i in range(1, len(counts)):
        check()
        norm = float(np.linalg.norm(total)) or 1.0
        similar = float(vectors[i] @ total) / norm >= threshold
        topic_break = not similar and i - first >= min_sentences
        if breaks[i] or topic_break or tokens + counts[i] > limit or size + sizes[i] > bound:
            out.append((first, i))
            first, total, tokens, size = i, vectors[i].copy(), counts[i], sizes[i]
        else:
            total += vectors[i]
            tokens += counts[i]
            size += sizes[i]
    out.append((first, len(counts)))
    return out


Piece = tuple[int, int, int, bool]  # start, end, tokens, whether a chunk must start there


def _sum(text: str, ps: Sequence[Piece], counter: TokenCounter) -> int | None:
    """A chunk's token count as the sum of its sentences', where that is exact:
    for a whitespace-splitting tokenizer, sentences that meet at whitespace or
    at a character its pre-tokenizer cuts at. Chinese sentences meet with no
    space between them, and a Thai run may be cut anywhere: those are counted
    again (None)."""
    if not counter.stable:
        return None
    for (_, a, _, _), (b, _, _, _) in itertools.pairwise(ps):
        if b < a or (b == a and not (counter.cut.match(text, a - 1) or counter.cut.match(text, a))):
            return None  # overlapping windows of one sentence, or no cut between them
    return sum(n for _, _, n, _ in ps)


def sentence_pieces(
    docs: Sequence[Document], counter: TokenCounter, overlap: int, max_chars: int
) -> list[list[Piece]]:
    """Each document's sentences, headings and code blocks, those over the
    limits already cut into windows: what ``group`` joins into chunks."""
    raws = [units(doc) for doc in docs]
    # Encodings, not just counts: a sentence over the limit is windowed from its
    # encoding's offsets instead of being tokenized a second time.
    encodings = counter.encode_batch(
        [doc.text[s:e] for doc, raw in zip(docs, raws, strict=True) for (s, e), _ in raw]
    )
    # Sentences over the limit (long code blocks, run-on text) become windows first.
    pieces: list[list[Piece]] = []
    pos = 0
    for doc, raw in zip(docs, raws, strict=True):
        heading_starts = {span[0] for span, kind in raw if kind == "heading"}
        fitted = fit(
            doc.text,
            [span for span, _ in raw],
            counter,
            overlap,
            doc.code_ranges,
            encodings[pos : pos + len(raw)],
            max_chars,
        )
        pos += len(raw)
        pieces.append([(s, e, n, s in heading_starts) for s, e, n, _ in fitted])
    return pieces


def chunk_many(
    docs: Sequence[Document],
    counter: TokenCounter,
    overlap: int,
    embed: Embedder,
    threshold: float,
    min_sentences: int,
    max_chars: int,
) -> list[list[Chunk]]:
    pieces = sentence_pieces(docs, counter, overlap, max_chars)
    # One embedding call for every sentence of every document.
    texts = [doc.text[s:e] for doc, ps in zip(docs, pieces, strict=True) for s, e, _, _ in ps]
    with paused():  # the model's time is not the file's fault
        vectors = _unit_vectors(embed, texts)
    out: list[list[Chunk]] = []
    pos = 0
    for doc, ps in zip(docs, pieces, strict=True):
        ranges = group(
            vectors[pos : pos + len(ps)],
            [n for _, _, n, _ in ps],
            [brk for _, _, _, brk in ps],
            threshold,
            min_sentences,
            counter.limit,
            [count_chars(doc.text, s, e) for s, e, _, _ in ps],
            max_chars,
        )
        pos += len(ps)
        spans: list[Span] = [(ps[i][0], ps[j - 1][1]) for i, j in ranges]
        sums = [_sum(doc.text, ps[i:j], counter) for i, j in ranges]
        out.append(
            [
                Chunk.under(doc.text, s, e, n, doc.heading_at(s), ids)
                for s, e, n, ids in fit(
                    doc.text, spans, counter, overlap, doc.code_ranges, sums, max_chars
                )
            ]
        )
    return out
