"""Cutting a span into token windows (``split_span``) at the best boundary, and
``fit``: every chunk stripped, within the limit, its token count exact."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence

import pytest

from mdindex.chunking.windows import fit, split_span, strip_span
from mdindex.embedding.tokens import TokenCounter

MARKDOWN = """# Getting started

Hugo builds a static site from content files, templates and configuration.
Each page's front matter sets its title, date, draft status and taxonomies; the
template lookup order decides which layout renders it. See https://gohugo.io/docs/
for the details, e.g. the section on menus.

## Install

Download the release for your platform, unpack it and put the binary on your
PATH. Then run `hugo version` to check it. On macOS, `brew install hugo` does
all of this at once!

```sh
hugo new site quickstart
cd quickstart
git init
hugo server --buildDrafts
```

## Troubleshooting

- The server does not start: another process holds port 1313. Stop it, or pass
  `--port 1314`.
- Pages are missing: drafts are not built unless asked (`--buildDrafts`).
- Nothing changes after an edit: the browser cached the page. Reload it.

Ownership is Rust's most unusual feature: each value has a single owner, and the
value is dropped when the owner goes out of scope. Borrowing lets code use a
value without taking ownership, through references that the compiler checks.
Naïve café-goers write 文字 and emoji 😀 too.
"""


def pieces_of(
    counter: TokenCounter,
    text: str,
    limit: int,
    overlap: int = 0,
    code: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int, int | None]]:
    enc = counter.encode(text)
    return split_span(text, 0, len(text), enc.offsets, limit, overlap, code, counter.cut)


def test_strip_span() -> None:
    text = "  a b \n\t"
    assert strip_span(text, 0, len(text)) == (2, 5)
    assert text[slice(*strip_span(text, 0, len(text)))] == "a b"
    assert strip_span(text, 3, 4) == (4, 4)  # only whitespace: empty
    assert strip_span("xy", 0, 2) == (0, 2)


def test_a_span_within_the_limit_is_one_window(counter: TokenCounter) -> None:
    text = "A short span of text."
    n = counter.count(text)
    assert pieces_of(counter, text, n) == [(0, len(text), n)]


def test_windows_hold_at_most_the_limit_and_their_counts_are_exact(
    counter: TokenCounter,
) -> None:
    for limit in (8, 20, 64):
        pieces = pieces_of(counter, MARKDOWN, limit)
        assert len(pieces) > 1
        for a, b, n in pieces:
            assert counter.count(MARKDOWN[a:b]) <= limit
            if n is not None:
                assert n == counter.count(MARKDOWN[a:b])
        # without overlap the windows tile the span: nothing lost, nothing twice
        assert pieces[0][0] == 0 and pieces[-1][1] == len(MARKDOWN)
        assert all(p[1] == q[0] for p, q in itertools.pairwise(pieces))


def test_a_cut_prefers_a_sentence_end_to_a_space(counter: TokenCounter) -> None:
    text = (
        "One sentence is here. Another sentence follows it closely. And then a third "
        "one comes along. A fourth sentence ends it all."
    )
    pieces = pieces_of(counter, text, 12)
    assert len(pieces) > 2
    for a, b, _ in pieces[:-1]:
        assert text[a:b].endswith("."), text[a:b]


def test_a_cut_prefers_a_line_end_to_a_space(counter: TokenCounter) -> None:
    text = "\n".join(f"line {i} of some longer stuff here" for i in range(12))
    pieces = pieces_of(counter, text, 20)
    assert len(pieces) > 2
    for _, b, _ in pieces[:-1]:
        assert text[b] == "\n"


def test_a_cut_prefers_a_blank_line_to_a_sentence_end(counter: TokenCounter) -> None:
    paragraph = "Short sentences. Many of them. All in a row. Again and again."
    text = "\n\n".join([paragraph] * 6)
    for _, b, _ in pieces_of(counter, text, 30)[:-1]:
        assert text[b - 2 : b] == "\n\n"


def test_without_a_boundary_a_run_is_cut_between_tokens(counter: TokenCounter) -> None:
    run = "a1b2c3d4" * 12  # one word of many tokens (under WordPiece's 100 chars)
    pieces = pieces_of(counter, run, 10)
    assert len(pieces) > 2
    assert "".join(run[a:b] for a, b, _ in pieces) == run
    # a window cut inside a word has no count carried over: only its own tokenizing can tell
    assert pieces[0][2] is None
    assert all(counter.count(run[a:b]) <= 10 for a, b, _ in pieces)


def test_a_cut_next_to_punctuation_keeps_its_count(counter: TokenCounter) -> None:
    """BERT isolates punctuation: a run of dots cut anywhere is cut between words."""
    dots = "." * 500
    pieces = pieces_of(counter, dots, 100)
    assert [n for _, _, n in pieces] == [counter.count(dots[a:b]) for a, b, _ in pieces]
    assert None not in [n for _, _, n in pieces]


def test_overlapping_windows_start_at_a_word(counter: TokenCounter) -> None:
    text = " ".join(f"word{i}" for i in range(200))
    pieces = pieces_of(counter, text, 30, overlap=8)
    assert len(pieces) > 3
    for (a1, b1, _), (a2, _, _) in itertools.pairwise(pieces):
        assert a1 < a2 < b1  # they share text
        assert text[a2 - 1] == " "  # and the next starts at a word
        assert counter.count(text[a2:b1]) <= 8 + 2


def test_a_code_block_that_fits_is_never_cut_inside(counter: TokenCounter) -> None:
    code = "```\n" + "\n".join(f"x_{i} = f({i})" for i in range(8)) + "\n```"
    prose = " ".join(f"prose{i} word" for i in range(40))
    text = f"{prose}\n\n{code}\n\n{prose}"
    start = text.index("```")
    block = (start, text.index("```", start + 3) + 3)
    assert counter.count(text[slice(*block)]) <= 80
    pieces = pieces_of(counter, text, 80, code=[block])
    assert len(pieces) > 2
    for a, b, _ in pieces:
        assert not block[0] < a < block[1] and not block[0] < b < block[1], (a, b, block)


def test_a_code_block_over_the_limit_is_cut_inside_at_line_ends(counter: TokenCounter) -> None:
    text = "```\n" + "\n".join(f"line_{i} = {i}" for i in range(100)) + "\n```"
    pieces = pieces_of(counter, text, 40, code=[(0, len(text))])
    assert len(pieces) > 3
    for _, b, _ in pieces[:-1]:
        assert text[b] == "\n"


def test_fit_strips_drops_empty_spans_and_counts_exactly(counter: TokenCounter) -> None:
    text = "  Hello there.  \n\n   \n  Second span here.\n"
    spans = [(0, 17), (17, 21), (21, len(text))]
    got = fit(text, spans, counter.with_limit(50), overlap=0)
    assert [(text[s:e], n) for s, e, n, _ in got] == [
        ("Hello there.", counter.count("Hello there.")),
        ("Second span here.", counter.count("Second span here.")),
    ]
    # each comes with its ids when they were tokenized on their own
    assert [ids for *_, ids in got] == [counter.encode(text[s:e]).ids for s, e, _, _ in got]


def test_fit_trusts_a_known_count_and_windows_one_over_the_limit(counter: TokenCounter) -> None:
    limited = counter.with_limit(12)
    text = "Known count. " + " ".join(f"w{i}" for i in range(40))
    first = (0, 12)
    rest = (13, len(text))
    got = fit(text, [first, rest], limited, 0, known=[3, 999])
    assert got[0] == (0, 12, 3, None)  # trusted, not tokenized again
    assert len(got) > 2  # 999 is over the limit: tokenized and windowed
    for s, e, n, _ in got[1:]:
        assert n == counter.count(text[s:e]) <= 12


def test_fit_uses_a_known_encoding(counter: TokenCounter) -> None:
    text = "Some words to count."
    [(s, e, n, ids)] = fit(text, [(0, len(text))], counter, 0, known=[counter.encode(text)])
    assert (s, e, n) == (0, len(text), counter.count(text))
    assert ids == counter.encode(text).ids


@pytest.mark.parametrize("limit", [8, 16, 32, 64])
@pytest.mark.parametrize("overlap", [0, 4])
@pytest.mark.parametrize("stable", [True, False])
def test_fit_on_real_markdown(
    counter: TokenCounter, limit: int, overlap: int, stable: bool
) -> None:
    c = counter.with_limit(limit)
    c.stable = stable  # False: every count from tokenizing the window again
    paragraphs = [(m.start(), m.end()) for m in re.finditer(r"(?s).+?(?:\n\n|\Z)", MARKDOWN)]
    start = MARKDOWN.index("```sh")
    code = [(start, MARKDOWN.index("```\n", start + 3) + 3)]
    got = fit(MARKDOWN, paragraphs, c, overlap, code)
    covered = bytearray(len(MARKDOWN))
    last = -1
    for s, e, n, ids in got:
        piece = MARKDOWN[s:e]
        assert piece == piece.strip() and piece
        assert n == counter.count(piece) <= limit
        if ids is not None:
            assert ids == counter.encode(piece).ids
        assert s >= last
        last = s
        covered[s:e] = b"\x01" * (e - s)
    lost = [i for i, ch in enumerate(MARKDOWN) if not covered[i] and not ch.isspace()]
    assert lost == []


@pytest.mark.serial
@pytest.mark.parametrize(
    "text",
    [
        "." * 300_000,
        "a1b2c3d4 " * 30_000,
        "```\nx\n```\n\n" * 20_000,
        "w\n" * 150_000,
        "ที่นี่ภาษาไทย" * 25_000,
        "ไทย " * 75_000,
        "Z" + "\u0336" * 300_000,
        "a" + " " * 300_000 + "b",
        "\U0001f1eb" * 300_000,  # regional indicators: each cut scanned back to the run's start
    ],
    ids=["dots", "words", "code-blocks", "lines", "thai", "thai-words", "marks", "spaces", "flags"],
)
def test_hostile_spans_are_cut_in_linear_time(counter: TokenCounter, text: str) -> None:
    """Each shape at about 300 KB, with the default character bound: under 2 s,
    or, on a machine slow enough to need more, under 4x ordinary markdown of
    the same size."""
    code = [(m.start(), m.end()) for m in re.finditer(r"```\nx\n```", text)]

    def timed(t: str, blocks: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], float]:
        started = time.perf_counter()
        got = fit(t, [(0, len(t))], counter, 32, blocks, max_chars=1397)
        return [(s, e) for s, e, _, _ in got], time.perf_counter() - started

    spans, seconds = timed(text, code)
    assert all(counter.count(text[s:e]) <= counter.limit for s, e in spans[:50])
    if seconds >= 2:
        ordinary = (MARKDOWN * (len(text) // len(MARKDOWN) + 1))[: len(text)]
        _, usual = timed(ordinary, [])
        assert seconds < 4 * usual, f"{seconds:.2f} s, ordinary text {usual:.2f} s"
