"""The invariants every strategy must keep, on any input."""

from __future__ import annotations

from collections.abc import Collection

from mdindex.chunking import Chunker
from mdindex.chunking.chars import count_chars
from mdindex.chunking.heading import sections
from mdindex.documents.types import Chunk, Document
from mdindex.embedding.tokens import TokenCounter


def skipped_ranges(doc: Document, noise: Collection[str]) -> list[tuple[int, int]]:
    if not noise:
        return []
    kept = {span for span, _ in sections(doc, noise)}
    all_spans = [span for span, _ in sections(doc, ())]
    return [span for span in all_spans if span not in kept]


def check(doc: Document, chunks: list[Chunk], counter: TokenCounter, chunker: Chunker) -> None:
    text = doc.text
    last_start = -1
    covered = bytearray(len(text))
    for c in chunks:
        assert text[c.char_start : c.char_end] == c.text
        assert c.text.strip(), "empty or whitespace-only chunk"
        assert c.char_start >= doc.body_start, "chunk reaches into frontmatter"
        assert c.token_count == counter.count(c.text), "token_count is not the tokenizer's count"
        if c.token_ids is not None:  # handed to the embedder instead of tokenizing again
            assert c.token_ids == counter.encode(c.text).ids, "token_ids are not the text's"
        assert c.token_count <= counter.limit, f"{c.token_count} tokens > limit {counter.limit}"
        chars = count_chars(c.text)
        assert chars <= chunker.max_chars, f"{chars} characters > max_chars {chunker.max_chars}"
        assert c.char_start >= last_start, "chunks out of document order"
        last_start = c.char_start
        covered[c.char_start : c.char_end] = b"\x01" * (c.char_end - c.char_start)
        heading = doc.heading_at(c.char_start)
        if chunker.strategy != "heading" or heading is not None:
            assert c.section == (heading.text if heading else "")
    skipped = skipped_ranges(doc, chunker.noise) if chunker.strategy == "heading" else []
    for s, e in skipped:
        covered[s:e] = b"\x01" * (e - s)
    lost = [i for i in range(doc.body_start, len(text)) if not covered[i] and not text[i].isspace()]
    assert not lost, f"lost text at {lost[0]}: {text[max(0, lost[0] - 30) : lost[0] + 30]!r}"
    assert chunker.chunk(doc) == chunks, "chunking is not deterministic"
