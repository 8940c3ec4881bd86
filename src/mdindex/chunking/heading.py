"""Heading-scoped chunks: the text under each heading, windowed when too long."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence

from mdindex.chunking.windows import Span, fit, strip_span
from mdindex.documents.types import Chunk, Document, Heading
from mdindex.embedding.tokens import TokenCounter


def sections(doc: Document, noise: Collection[str] = ()) -> list[tuple[Span, Heading | None]]:
    """Spans from each heading to the next, plus the text before the first one.

    A noise heading (matched case-insensitively) is skipped together with the
    headings nested below it.
    """
    out: list[tuple[Span, Heading | None]] = []
    text_end = len(doc.text)
    first = doc.headings[0].start if doc.headings else text_end
    if first > doc.body_start:
        out.append(((doc.body_start, first), None))
    skip_below: int | None = None
    for i, heading in enumerate(doc.headings):
        end = doc.headings[i + 1].start if i + 1 < len(doc.headings) else text_end
        if skip_below is not None and heading.level > skip_below:
            continue
        skip_below = None
        if heading.text.casefold() in noise:
            skip_below = heading.level
            continue
        out.append(((heading.start, end), heading))
    return out


def chunk_many(
    docs: Sequence[Document],
    counter: TokenCounter,
    overlap: int,
    max_chars: int,
    noise: Collection[str] = (),
) -> list[list[Chunk]]:
    parts = [sections(doc, noise) for doc in docs]
    spans = [
        [strip_span(doc.text, *span) for span, _ in doc_parts]
        for doc, doc_parts in zip(docs, parts, strict=True)
    ]
    # Every section of every document is tokenized in one parallel batch; the
    # encodings also give the offsets for windowing the sections that are too long.
    flat = counter.encode_batch(
        [doc.text[s:e] for doc, ss in zip(docs, spans, strict=True) for s, e in ss]
    )
    out: list[list[Chunk]] = []
    pos = 0
    for doc, doc_parts, doc_spans in zip(docs, parts, spans, strict=True):
        encodings = flat[pos : pos + len(doc_spans)]
        pos += len(doc_spans)
        starts = [span[0] for span in doc_spans]
        out.append(
            [
                Chunk.under(
                    doc.text, s, e, n, doc_parts[bisect.bisect_right(starts, s) - 1][1], ids
                )
                for s, e, n, ids in fit(
                    doc.text, doc_spans, counter, overlap, doc.code_ranges, encodings, max_chars
                )
            ]
        )
    return out
