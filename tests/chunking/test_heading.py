from __future__ import annotations

import itertools
import re

from mdindex.chunking import Chunker
from mdindex.documents.parsing import parse_document


def chunks_of(counter, text: str, limit: int = 254, **kw):
    doc = parse_document(text, "a.md")
    return doc, Chunker(counter.with_limit(limit), "heading", **kw).chunk(doc)


def test_sections_follow_headings_with_preamble(counter) -> None:
    text = "Intro line.\n\n# One\n\nBody one.\n\n## Two\n\nBody two.\n\n# Three\n\nBody three.\n"
    _, chunks = chunks_of(counter, text)
    assert [(c.section, c.heading_path, c.anchor) for c in chunks] == [
        ("", (), ""),
        ("One", ("One",), "one"),
        ("Two", ("One", "Two"), "two"),
        ("Three", ("Three",), "three"),
    ]
    assert chunks[1].text == "# One\n\nBody one."


def test_noise_sections_are_skipped_with_their_subsections(counter) -> None:
    text = (
        "# Doc\n\nKeep.\n\n## Table of Contents\n\n- a\n\n### Nested\n\nx\n\n"
        "## Usage\n\nKeep too.\n"
    )
    _, chunks = chunks_of(counter, text, noise_sections=["table of contents"])
    assert [c.section for c in chunks] == ["Doc", "Usage"]


def test_long_section_is_windowed_at_paragraphs_never_inside_words(counter) -> None:
    words = ["lorem", "ipsum", "dolor", "sit", "amet"]
    paras = [f"Paragraph {i} " + " ".join(words[j % 5] for j in range(30)) + "." for i in range(12)]
    text = "# Long\n\n" + "\n\n".join(paras) + "\n"
    _doc, chunks = chunks_of(counter, text, limit=120, overlap_tokens=10)
    assert len(chunks) > 2
    for c in chunks:
        assert c.token_count <= 120
        # each window starts and ends on a word boundary
        assert c.char_start == 0 or not text[c.char_start - 1].isalnum()
        assert c.char_end == len(text) or not text[c.char_end].isalnum()
    # without overlap pressure the first cut falls on a blank line
    assert text[chunks[0].char_end : chunks[0].char_end + 2] == "\n\n"
    # consecutive windows overlap
    assert any(b.char_start < a.char_end for a, b in itertools.pairwise(chunks))


def test_windows_do_not_cut_inside_a_fence_that_fits(counter) -> None:
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(18)) + "\n```"
    filler = " ".join(f"prose{i}" for i in range(70))
    text = f"# Code\n\n{filler}\n\n{code}\n\n{filler}\n"
    doc, chunks = chunks_of(counter, text, limit=200, overlap_tokens=0)
    fence = doc.code_ranges[0]
    for c in chunks:
        assert not (fence[0] < c.char_start < fence[1]), "chunk starts inside the fence"
        assert not (fence[0] < c.char_end < fence[1] - 1), "chunk ends inside the fence"


def test_a_fence_over_the_limit_is_split_inside(counter) -> None:
    code = "```\n" + "\n".join(f"line_{i} = {i}" for i in range(300)) + "\n```"
    text = f"# Big code\n\n{code}\n"
    _, chunks = chunks_of(counter, text, limit=100, overlap_tokens=0)
    assert len(chunks) > 3 and all(c.token_count <= 100 for c in chunks)
    assert all(re.search(r"\d\Z|```\Z", c.text) for c in chunks)  # cut at line ends


def test_unbroken_run_longer_than_window_is_cut_between_tokens(counter) -> None:
    # 100 characters: the longest word WordPiece splits (a longer one is one [UNK]), 75 tokens
    blob = "a1b2c3d4" * 12 + "a1b2"
    text = f"# Blob\n\n{blob}\n"
    _, chunks = chunks_of(counter, text, limit=64, overlap_tokens=0)
    assert "".join(c.text for c in chunks[1:]) == blob
    assert all(c.token_count <= 64 for c in chunks)


def test_a_run_the_tokenizer_reads_as_one_token_is_cut_by_characters(counter) -> None:
    blob = "a1b2c3d4" * 400  # one [UNK] token of 3,200 characters
    text = f"# Blob\n\n{blob}\n"
    _, chunks = chunks_of(counter, text, limit=64, overlap_tokens=0, max_chars=500)
    assert "".join(c.text for c in chunks[1:]) == blob
    assert [len(c.text) for c in chunks[1:]] == [500] * 6 + [200]
