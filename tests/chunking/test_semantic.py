from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mdindex.chunking import Chunker
from mdindex.chunking.semantic import group
from mdindex.documents.parsing import parse_document
from mdindex.errors import EmbeddingError
from tests.chunking.invariants import check
from tests.conftest import TinyEmbedder


def test_group_breaks_on_topic_change_min_sentences_and_limit() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    vectors = np.stack([a, a, b, b, b, a])
    no_breaks = [False] * 6
    assert group(vectors, [5] * 6, no_breaks, 0.5, 1, 100) == [(0, 2), (2, 5), (5, 6)]
    assert group(vectors, [5] * 6, no_breaks, 0.5, 3, 100) == [(0, 3), (3, 6)]
    assert group(vectors, [40] * 6, no_breaks, 0.5, 1, 100) == [(0, 2), (2, 4), (4, 5), (5, 6)]
    assert group(vectors, [5] * 6, [False, True, False, False, False, False], 0.5, 1, 100)[0] == (
        0,
        1,
    )


def test_non_finite_embeddings_raise(counter) -> None:
    doc = parse_document("One sentence. Another one.\n", "a.md")
    nan = SimpleNamespace(embed=lambda texts: np.full((len(texts), 4), np.nan))
    chunker = Chunker(counter, "semantic", embed=nan)  # type: ignore[arg-type]
    with pytest.raises(EmbeddingError, match="non-finite"):
        chunker.chunk(doc)


def test_sentences_are_embedded_in_one_call(counter, tiny) -> None:
    text = "# A\n\n" + " ".join(f"Sentence number {i} is here." for i in range(40)) + "\n"
    doc = parse_document(text, "a.md")
    Chunker(counter, "semantic", embed=tiny).chunk(doc)
    assert len(tiny.calls) == 1 and len(tiny.calls[0]) == 41


@pytest.mark.slow
@pytest.mark.model
def test_semantic_with_the_real_model_splits_topics(counter, real_embedder) -> None:
    cats = "Cats are small furry pets. Cats purr when they are happy. Many cats love to sleep."
    rust = (
        "The Rust compiler checks ownership at compile time. Borrowing rules prevent data races. "
        "The borrow checker rejects dangling references."
    )
    text = f"# Notes\n\n{cats} {rust}\n"
    doc = parse_document(text, "notes.md")
    chunker = Chunker(counter, "semantic", embed=real_embedder, threshold=0.3, min_sentences=2)
    chunks = chunker.chunk(doc)
    check(doc, chunks, counter, chunker)
    bodies = [c.text for c in chunks]
    assert any("Cats" in b and "Rust" not in b for b in bodies)
    assert any("Rust" in b and "Cats" not in b for b in bodies)


@pytest.mark.serial
def test_the_url_bomb_is_linear(counter) -> None:
    """The sentence splitter on the hostile review's URL shape at 1 MB (it took
    11 s at 16 KB): under 2 s of chunking, the embedder's time aside, or, on a
    machine slow enough to need more (2.08 s on one), under 4x ordinary
    markdown of the same size in the same run."""
    text = "# Link\n\n" + "".join(f"See www.{'.' * 16_000} now {i}.\n\n" for i in range(60))
    tiny = TinyEmbedder()
    embedding = [0.0]

    def embed(texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return tiny.embed(texts)
        finally:
            embedding[0] += time.perf_counter() - started

    chunker = Chunker(counter, "semantic", embed=SimpleNamespace(embed=embed))  # type: ignore[arg-type]

    def chunk(markdown: str) -> tuple[list[Any], float]:
        embedding[0] = 0.0
        started = time.perf_counter()
        chunks = chunker.chunk(parse_document(markdown, "url.md"))
        return chunks, time.perf_counter() - started - embedding[0]

    chunks, seconds = chunk(text)
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert sum(len(c) for c in tiny.calls) > 3000  # every window of every sentence
    if seconds >= 2:
        examples = Path(__file__).resolve().parents[2] / "examples" / "docs"
        prose = "\n\n".join(f.read_text() for f in sorted(examples.rglob("*.md")))
        _, usual = chunk((prose * (len(text) // len(prose) + 1))[: len(text)])
        assert seconds < 4 * usual, f"{seconds:.2f} s, ordinary text {usual:.2f} s"
