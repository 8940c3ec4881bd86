"""Semantic chunks: consecutive sentences grouped while they stay on one topic."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

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
) -> list[tuple[int, int]]:
    """Index ranges [i, j) of sentences that form one chunk.

    A chunk closes when the next sentence's cosine similarity to the running
    mean of the chunk drops below ``threshold`` (once it has ``min_sentences``),
    when adding it would pass ``limit`` tokens, or before a forced break.
    """
    out: list[tuple[int, int]] = []
    if not len(counts):
        return out
    first = 0
    total = vectors[0].copy()
    tokens = counts[0]
    for i in range(1, len(counts)):
        check()
        norm = float(np.linalg.norm(total)) or 1.0
        similar = float(vectors[i] @ total) / norm >= threshold
        topic_break = not similar and i - first >= min_sentences
        if breaks[i] or topic_break or tokens + counts[i] > limit:
            out.append((first, i))
            first, total, tokens = i, vectors[i].copy(), counts[i]
        else:
            total += vectors[i]
            tokens += counts[i]
    out.append((first, len(counts)))
    return out


def chunk_many(
    docs: Sequence[Document],
    counter: TokenCounter,
    overlap: int,
    embed: Embedder,
    threshold: float,
    min_sentences: int,
) -> list[list[Chunk]]:
    raws = [units(doc) for doc in docs]
    # Encodings, not just counts: a sentence over the limit is windowed from its
    # encoding's offsets instead of being tokenized a second time.
    encodings = counter.encode_batch(
        [doc.text[s:e] for doc, raw in zip(docs, raws, strict=True) for (s, e), _ in raw]
    )
    # Sentences over the limit (long code blocks, run-on text) become windows first.
    pieces: list[list[tuple[int, int, int, bool]]] = []
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
        )
        pos += len(raw)
        pieces.append([(s, e, n, s in heading_starts) for s, e, n, _ in fitted])
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
        )
        pos += len(ps)
        spans: list[Span] = [(ps[i][0], ps[j - 1][1]) for i, j in ranges]
        # Sentences meet at whitespace, so for a whitespace-splitting tokenizer
        # the chunk's count is the sum of its sentences'.
        sums: list[int | None] = [
            sum(ps[k][2] for k in range(i, j)) if counter.stable else None for i, j in ranges
        ]
        out.append(
            [
                Chunk.under(doc.text, s, e, n, doc.heading_at(s), ids)
                for s, e, n, ids in fit(doc.text, spans, counter, overlap, doc.code_ranges, sums)
            ]
        )
    return out
