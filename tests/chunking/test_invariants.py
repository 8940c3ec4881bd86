from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdindex.chunking import Chunker
from mdindex.documents.parsing import parse_document
from mdindex.documents.reading import decode
from tests.chunking.invariants import check
from tests.conftest import TinyEmbedder, corpus_files, needs_corpus

WORDS = [
    "alpha",
    "Beta",
    "gamma",
    "Dr.",
    "e.g.",
    "3.14",
    "v1.2.3",
    "https://example.com/a.b",
    "`x = 1.5`",
    "end.",
    "stop!",
    "why?",
    "naïve",
    "日本語",
    "emoji😀",
    "don't",
    "C++",
    "word",
    "the",
    "and",
    "a",
    "supercalifragilisticexpialidocious" * 3,
    "#hash",
    "**bold**",
]

word = st.sampled_from(WORDS)
sentence = st.lists(word, min_size=1, max_size=30).map(" ".join)
paragraph = st.lists(sentence, min_size=1, max_size=8).map(lambda s: "\n".join(s))
heading = st.tuples(st.integers(1, 6), sentence).map(lambda t: "#" * t[0] + " " + t[1])
setext = st.tuples(sentence, st.sampled_from(["===", "---"])).map(lambda t: f"{t[0]}\n{t[1]}")
fence = st.tuples(st.sampled_from(["py", "sh", ""]), st.lists(sentence, max_size=60)).map(
    lambda t: f"```{t[0]}\n" + "\n".join("# " + s for s in t[1]) + "\n```"
)
items = st.lists(sentence, min_size=1, max_size=6).map(lambda s: "\n".join("- " + x for x in s))
block = st.one_of(paragraph, heading, setext, fence, items, st.just("<div>\n# html\n</div>"))
frontmatter = st.one_of(st.just(""), st.just("---\ntitle: T\n---\n"), st.just("---\nbroken\n"))
markdown = st.tuples(frontmatter, st.lists(block, max_size=25)).map(
    lambda t: t[0] + "\n\n".join(t[1]) + "\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["heading", "token", "semantic"])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=markdown, limit=st.sampled_from([24, 64, 254]), stable=st.booleans())
def test_invariants_on_generated_markdown(
    counter, strategy: str, text: str, limit: int, stable: bool
) -> None:
    c = counter.with_limit(limit)
    c.stable = stable  # False: every count comes from re-tokenizing the slice
    chunker = Chunker(
        c,
        strategy,
        overlap_tokens=min(8, limit // 4),
        noise_sections=["Noise"],
        embed=TinyEmbedder(),
    )
    doc = parse_document(text, "gen.md")
    check(doc, chunker.chunk(doc), c, chunker)


@pytest.mark.slow
@needs_corpus
@pytest.mark.corpus
@pytest.mark.parametrize("strategy", ["heading", "token", "semantic"])
def test_invariants_on_corpus(counter, strategy: str) -> None:
    files = corpus_files()
    # A spread of the corpus keeps CI quick; bench/ runs all of it.
    sample = files[:: max(1, len(files) // 150)]
    chunker = Chunker(counter, strategy, embed=TinyEmbedder())
    for path in sample:
        doc = parse_document(decode(path.read_bytes()), path.name)
        check(doc, chunker.chunk(doc), counter, chunker)


@pytest.mark.serial
def test_huge_single_line_is_bounded(counter) -> None:
    text = "# Big\n\n" + ("lorem ipsum dolor " * 300_000) + "\n"  # ~5.4 MB on one line
    doc = parse_document(text, "big.md")
    t = time.perf_counter()
    chunks = Chunker(counter, "heading").chunk(doc)
    assert time.perf_counter() - t < 120
    assert all(c.token_count <= counter.limit for c in chunks)
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(text.rstrip())
