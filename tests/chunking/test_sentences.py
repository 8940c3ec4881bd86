"""The sentence segmenter: where it cuts and where it must not, that its spans
are stripped slices covering all the text, and that it stays linear on the
shapes that made its regexes backtrack."""

from __future__ import annotations

import time

import pytest

from mdindex.chunking.sentences import split_sentences, units
from mdindex.documents.parsing import parse_document
from tests.chunking.test_windows import MARKDOWN


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text, 0, len(text))]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("Is it (really.) True.", ["Is it (really.)", "True."]),
        ("Wait... What?! Yes… No.", ["Wait...", "What?!", "Yes…", "No."]),
        ("J. R. R. Tolkien wrote it. Fine.", ["J. R. R. Tolkien wrote it.", "Fine."]),
        ("No. 5 is fine. Really.", ["No. 5 is fine.", "Really."]),
        ("It costs 3.50 dollars. Cheap.", ["It costs 3.50 dollars.", "Cheap."]),
        # a lower-case word after a stop: an abbreviation nobody listed
        ("The end. next word is lower.", ["The end. next word is lower."]),
        # a URL keeps its dots; the stop after it ends the sentence
        ("Go to www.example.com. Then stop.", ["Go to www.example.com.", "Then stop."]),
        ("See https://x.io/a.b. Next one.", ["See https://x.io/a.b.", "Next one."]),
        ("Mail <a.b@c.d> now. Ok.", ["Mail <a.b@c.d> now.", "Ok."]),
        # inline code, with backticks of its own inside a longer run
        ("A `` a`. B `` done. Next.", ["A `` a`. B `` done.", "Next."]),
        # an unclosed backtick is a literal one and protects nothing
        ("Use ` here. Then more.", ["Use ` here.", "Then more."]),
        ("No stop at the end", ["No stop at the end"]),
        ("   ", []),
    ],
)
def test_cuts(text: str, want: list[str]) -> None:
    assert sentences(text) == want


# Real sentences (Wikipedia's openings of its articles on the language).
LANGUAGES: dict[str, tuple[str, list[str]]] = {
    "zh": (
        "汉语是汉族的语言。它是世界上使用人数最多的语言之一！你会说汉语吗？"
        "汉字是汉语的书写系统，已有数千年的历史。",
        [
            "汉语是汉族的语言。",
            "它是世界上使用人数最多的语言之一！",
            "你会说汉语吗？",
            "汉字是汉语的书写系统，已有数千年的历史。",
        ],
    ),
    "ja": (
        "日本語は日本の公用語である。東京は日本の首都です。",
        ["日本語は日本の公用語である。", "東京は日本の首都です。"],
    ),
    "ar": (
        "اللغة العربية هي أكثر اللغات السامية تحدثًا. هل تتحدث العربية؟ "
        "يتحدث بها أكثر من 400 مليون نسمة.",
        [
            "اللغة العربية هي أكثر اللغات السامية تحدثًا.",
            "هل تتحدث العربية؟",
            "يتحدث بها أكثر من 400 مليون نسمة.",
        ],
    ),
    "hi": (
        "हिन्दी भारत की राजभाषा है। क्या आप हिन्दी बोलते हैं? यह देवनागरी लिपि में लिखी जाती है।",
        [
            "हिन्दी भारत की राजभाषा है।",
            "क्या आप हिन्दी बोलते हैं?",
            "यह देवनागरी लिपि में लिखी जाती है।",
        ],
    ),
    "th": (
        "ภาษาไทยเป็นภาษาราชการของประเทศไทย มีผู้พูดประมาณ 65 ล้านคน อักษรไทยพัฒนามาจากอักษรขอม",
        [
            "ภาษาไทยเป็นภาษาราชการของประเทศไทย",
            "มีผู้พูดประมาณ 65 ล้านคน",
            "อักษรไทยพัฒนามาจากอักษรขอม",
        ],
    ),
}


@pytest.mark.parametrize("lang", sorted(LANGUAGES))
def test_sentences_of_other_scripts(lang: str) -> None:
    """。！？ end a sentence with no space after them, ؟ and । before one, and a
    space between two Thai words ends a Thai sentence (a number between them
    does not: Thai writes spaces around numbers and foreign words too)."""
    text, want = LANGUAGES[lang]
    _check_spans(text, 0, len(text), split_sentences(text, 0, len(text)))
    assert sentences(text) == want


def test_a_full_width_semicolon_does_not_end_a_sentence() -> None:
    assert sentences("我们去；你们留。好") == ["我们去；你们留。", "好"]


def test_only_the_range_asked_for_is_split() -> None:
    text = "Before. Inside one. Inside two. After."
    start, end = text.index("Inside one"), text.index(" After")
    spans = split_sentences(text, start, end)
    assert [text[s:e] for s, e in spans] == ["Inside one.", "Inside two."]


def _check_spans(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    """Stripped, non-empty, in order, disjoint, and together every non-space char."""
    covered = bytearray(len(text))
    last_end = start
    for s, e in spans:
        assert last_end <= s < e <= end
        assert text[s:e] == text[s:e].strip()
        covered[s:e] = b"\x01" * (e - s)
        last_end = e
    lost = [i for i in range(start, end) if not covered[i] and not text[i].isspace()]
    assert lost == [], text[lost[0] - 20 : lost[0] + 20] if lost else ""


def test_spans_cover_the_prose_of_real_markdown() -> None:
    doc = parse_document(MARKDOWN, "a.md")
    prose = [b for b in doc.blocks if b.kind == "prose"]
    assert len(prose) > 3
    for b in prose:
        _check_spans(doc.text, b.start, b.end, split_sentences(doc.text, b.start, b.end))


def test_units_of_real_markdown() -> None:
    doc = parse_document(MARKDOWN, "a.md")
    got = [(doc.text[s:e], kind) for (s, e), kind in units(doc)]
    assert got == [
        ("# Getting started", "heading"),
        ("Hugo builds a static site from content files, templates and configuration.", "prose"),
        (
            "Each page's front matter sets its title, date, draft status and taxonomies; the\n"
            "template lookup order decides which layout renders it.",
            "prose",
        ),
        ("See https://gohugo.io/docs/\nfor the details, e.g. the section on menus.", "prose"),
        ("## Install", "heading"),
        (
            "Download the release for your platform, unpack it and put the binary on your\nPATH.",
            "prose",
        ),
        ("Then run `hugo version` to check it.", "prose"),
        ("On macOS, `brew install hugo` does\nall of this at once!", "prose"),
        (
            "```sh\nhugo new site quickstart\ncd quickstart\ngit init\n"
            "hugo server --buildDrafts\n```",
            "code",
        ),
        ("## Troubleshooting", "heading"),
        ("- The server does not start: another process holds port 1313.", "prose"),
        ("Stop it, or pass\n  `--port 1314`.", "prose"),
        ("- Pages are missing: drafts are not built unless asked (`--buildDrafts`).", "prose"),
        ("- Nothing changes after an edit: the browser cached the page.", "prose"),
        ("Reload it.", "prose"),
        (
            "Ownership is Rust's most unusual feature: each value has a single owner, and the\n"
            "value is dropped when the owner goes out of scope.",
            "prose",
        ),
        (
            "Borrowing lets code use a\nvalue without taking ownership, through references "
            "that the compiler checks.",
            "prose",
        ),
        ("Naïve café-goers write 文字 and emoji 😀 too.", "prose"),
    ]
    _check_spans(doc.text, 0, len(doc.text), [span for span, _ in units(doc)])


HOSTILE = {
    "url": lambda n: "See www." + "." * n + " now.",
    "backticks": lambda n: "".join("`" * (i % 7 + 1) + " x. Y " for i in range(n // 8)),
    "angles": lambda n: "<" * n,
    "link-destinations": lambda n: "](" * (n // 2),
    "abbreviations": lambda n: "a. " * (n // 3),
    "stops": lambda n: "!" * n + " A",
    # no space after: every start inside the run would fail again without the lookbehind
    "stops-glued": lambda n: "!" * n + "A",
    "dots-glued": lambda n: "x" + "." * n + "y",
    "closing-quotes": lambda n: "." + '"' * n + "x",
    "dots": lambda n: ". " * (n // 2),
    "initials": lambda n: "Dr. X. " * (n // 7),
    "schemes": lambda n: "see http://a." * (n // 13),
    "full-width-stops": lambda n: "。" * n + "好",
    "closers-after-full-width": lambda n: "。" + "」" * n,
    "thai-spaces": lambda n: "ก " * (n // 2),
    "thai-space-runs": lambda n: "ก" + " " * n + "a",
    "dandas": lambda n: "।" * n + " क",
}


@pytest.mark.serial
@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_hostile_shapes_split_in_linear_time(shape: str) -> None:
    """Each at 400 KB (the URL one took 11 s at 16 KB with the old regex): under
    2 s, or, on a machine slow enough to need more, under 4x ordinary prose of
    the same size."""
    text = HOSTILE[shape](400_000)

    def timed(t: str) -> tuple[list[tuple[int, int]], float]:
        started = time.perf_counter()
        spans = split_sentences(t, 0, len(t))
        return spans, time.perf_counter() - started

    spans, seconds = timed(text)
    _check_spans(text, 0, len(text), spans)
    if seconds >= 2:
        ordinary = (MARKDOWN * (len(text) // len(MARKDOWN) + 1))[: len(text)]
        _, usual = timed(ordinary)
        assert seconds < 4 * usual, f"{seconds:.2f} s, ordinary text {usual:.2f} s"


def test_segmenter_keeps_abbreviations_numbers_urls_and_code() -> None:
    text = (
        "Dr. Smith met Mr. Jones at 3.14 p.m. on Main St. today. "
        "Version 1.2.3 shipped, e.g. with fixes. See https://example.com/a.b?c=d. "
        "Run `make. all` now! Is it done? Yes."
    )
    assert sentences(text) == [
        "Dr. Smith met Mr. Jones at 3.14 p.m. on Main St. today.",
        "Version 1.2.3 shipped, e.g. with fixes.",
        "See https://example.com/a.b?c=d.",
        "Run `make. all` now!",
        "Is it done?",
        "Yes.",
    ]


def test_headings_lists_and_code_are_boundaries() -> None:
    doc = parse_document(
        "# Title\n\nOne. Two\n- item one\n- item two\n\n```\ncode. More\n```\n", "a.md"
    )
    kinds = [(doc.text[s:e], k) for (s, e), k in units(doc)]
    assert kinds == [
        ("# Title", "heading"),
        ("One.", "prose"),
        ("Two", "prose"),
        ("- item one", "prose"),
        ("- item two", "prose"),
        ("```\ncode. More\n```", "code"),
    ]
