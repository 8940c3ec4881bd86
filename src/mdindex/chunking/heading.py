"""Heading-scoped chunks: the text under each heading, windowed when too long."""

from __future__ import annotations

import bisect
from collections.abc import Collection

from mdindex.chunking.windows import Span, fit
from mdindex.models import Chunk, Document, Heading
from mdindex.tokens import TokenCounter


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


def chunk(
    doc: Document, counter: TokenCounter, overlap: int, noise: Collection[str] = ()
) -> list[Chunk]:
    parts = sections(doc, noise)
    starts = [span[0] for span, _ in parts]
    # One fit call for the whole document so its sections are tokenized in one batch.
    return [
        Chunk.under(doc.text, s, e, n, parts[bisect.bisect_right(starts, s) - 1][1])
        for s, e, n in fit(doc.text, [span for span, _ in parts], counter, overlap, doc.code_ranges)
    ]
