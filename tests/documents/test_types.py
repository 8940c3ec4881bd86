"""The value types of documents: ``digest``, a ``Document``'s line and heading
look-ups, and ``Chunk.under``."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from mdindex.documents.parsing import parse_document
from mdindex.documents.types import Block, Chunk, Document, Heading, digest

TEXT = "intro\n# One\nbody one\n\n## Two\nbody two\n# Three\nlast"


def _headings() -> list[Heading]:
    one = TEXT.index("# One")
    two = TEXT.index("## Two")
    three = TEXT.index("# Three")
    return [
        Heading(1, "One", "one", one, one + 6, ("One",)),
        Heading(2, "Two", "two", two, two + 7, ("One", "Two")),
        Heading(1, "Three", "three", three, three + 8, ("Three",)),
    ]


def _document(text: str = TEXT, headings: list[Heading] | None = None) -> Document:
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return Document(
        text=text,
        body_start=0,
        title="t",
        url="",
        meta={},
        headings=_headings() if headings is None else headings,
        blocks=[Block(0, len(text), "prose")],
        code_ranges=[],
        line_starts=starts,
    )


def test_digest_is_the_sha256_of_the_utf8_text() -> None:
    assert digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert digest("Straße 文字") == hashlib.sha256("Straße 文字".encode()).hexdigest()
    # a lone surrogate (a file name or text decoded with surrogateescape) still hashes,
    # and two different ones hash differently
    assert len(digest("\udcff")) == 64
    assert digest("\udcff") != digest("\udcfe")


def test_a_document_knows_its_hash_and_heading_starts() -> None:
    doc = _document()
    assert doc.doc_hash == digest(TEXT)
    assert doc.heading_starts == [h.start for h in _headings()]
    assert doc.warnings == []


def test_line_of_every_offset() -> None:
    doc = _document()
    for pos in range(len(TEXT) + 1):
        assert doc.line_of(pos) == TEXT[:pos].count("\n") + 1, pos
    assert doc.line_of(0) == 1
    assert doc.line_of(len(TEXT)) == TEXT.count("\n") + 1


def test_heading_at_is_the_nearest_heading_starting_at_or_before() -> None:
    doc = _document()
    one, two, three = _headings()
    assert doc.heading_at(0) is None  # the text before the first heading
    assert doc.heading_at(one.start - 1) is None
    assert doc.heading_at(one.start) == one
    assert doc.heading_at(two.start - 1) == one
    assert doc.heading_at(two.start) == two
    assert doc.heading_at(TEXT.index("body two")) == two
    assert doc.heading_at(three.start) == three
    assert doc.heading_at(len(TEXT)) == three
    assert _document(headings=[]).heading_at(5) is None


def test_heading_at_of_a_parsed_document() -> None:
    text = "---\ntitle: x\n---\nPreamble.\n\n# A\n\nText a.\n\n## B\n\nText b.\n"
    doc = parse_document(text, "a.md")
    assert doc.heading_at(text.index("Preamble")) is None
    assert doc.heading_at(text.index("Text a")).text == "A"  # type: ignore[union-attr]
    assert doc.heading_at(text.index("Text b")).path == ("A", "B")  # type: ignore[union-attr]


def test_a_chunk_under_a_heading_carries_its_section() -> None:
    two = _headings()[1]
    start, end = TEXT.index("## Two"), TEXT.index("\n# Three")
    chunk = Chunk.under(TEXT, start, end, 7, two, [1, 2, 3])
    assert chunk.text == TEXT[start:end] == "## Two\nbody two"
    assert (chunk.char_start, chunk.char_end, chunk.token_count) == (start, end, 7)
    assert (chunk.section, chunk.heading_path, chunk.anchor) == ("Two", ("One", "Two"), "two")
    assert chunk.token_ids == [1, 2, 3]


def test_a_chunk_under_no_heading_has_no_section() -> None:
    chunk = Chunk.under(TEXT, 0, 5, 1, None)
    assert chunk == Chunk("intro", 0, 5, 1)
    assert (chunk.section, chunk.heading_path, chunk.anchor, chunk.token_ids) == (
        "",
        (),
        "",
        None,
    )


def test_token_ids_are_not_part_of_a_chunks_identity() -> None:
    """Chunks compare (chunking is deterministic) and print by what they say,
    whether or not chunking had the ids at hand."""
    a = Chunk.under(TEXT, 0, 5, 1, None, [101, 102])
    b = Chunk.under(TEXT, 0, 5, 1, None)
    assert a == b
    assert "101" not in repr(a)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.text = "changed"  # type: ignore[misc]


def test_line_index() -> None:
    doc = parse_document("a\nbb\n\nccc", "a.md")
    assert [doc.line_of(i) for i in (0, 1, 2, 4, 5, 6)] == [1, 1, 2, 2, 3, 4]
