"""The order after the engine's: passages joined, and sections a question names first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from mdindex.index.ranking import MAX_PASSAGES, headings_first, names, passages, words
from mdindex.sinks.base import Hit

PARAGRAPHS = [
    f"Paragraph {i} " + " ".join(f"w{i}x{j}" for j in range(i % 5 + 1)) for i in range(12)
]
DOC = "# Title\n\n" + "\n\n".join(PARAGRAPHS) + "\n"


def window(first: int, last: int) -> tuple[int, int]:
    """The span of paragraphs first..last of DOC."""
    start = DOC.index(PARAGRAPHS[first])
    return start, DOC.index(PARAGRAPHS[last]) + len(PARAGRAPHS[last])


@given(
    spans=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 3)).map(
            lambda t: (t[0], min(11, t[0] + t[1]))
        ),
        min_size=1,
        max_size=25,
    )
)
@hyp_settings(max_examples=300, deadline=None)
def test_passages_are_apart_and_their_text_is_the_documents(
    spans: list[tuple[int, int]],
) -> None:
    """Windows of one section, in rank order: the passages kept are at most
    MAX_PASSAGES, never touch one another, keep the rank order, and each holds
    the document's own text over its span."""
    hits = []
    for rank, (first, last) in enumerate(spans):
        start, end = window(first, last)
        payload = {
            "root": "docs",
            "doc_path": "a.md",
            "heading_path": ["Title"],
            "char_start": start,
            "char_end": end,
            "line_start": DOC.count("\n", 0, start) + 1,
            "line_end": DOC.count("\n", 0, end) + 1,
            "text": DOC[start:end],
        }
        hits.append(Hit(f"id{rank}", 1.0 - rank / 100, payload))
    hits.append(Hit("free", 0.0, {"doc_path": "b.md", "heading_path": [], "char_start": 0}))
    out = passages(hits)
    assert out[-1].id == "free"  # text of no section is never joined or dropped
    kept = [h.payload for h in out[:-1]]
    assert 1 <= len(kept) <= MAX_PASSAGES
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)
    for p in kept:
        assert p["text"] == DOC[p["char_start"] : p["char_end"]]
        assert p["line_start"] == DOC.count("\n", 0, p["char_start"]) + 1
    for a in kept:
        for b in kept:
            if a is not b:
                assert a["char_end"] < b["char_start"] or b["char_end"] < a["char_start"]
    # the best window is always inside a passage
    best = hits[0].payload
    assert any(
        p["char_start"] <= best["char_start"] and best["char_end"] <= p["char_end"] for p in kept
    )
    assert passages([]) == []


def hit(name: str, path: object) -> Hit:
    return Hit(name, 1.0, {"doc_path": f"{name}.md", "heading_path": path})


@pytest.mark.parametrize(
    ("question", "path"),
    [
        ("Ownership", ["Understanding Ownership", "Ownership"]),
        ("understanding ownership ownership", ["Understanding Ownership", "Ownership"]),
        ("What Is Ownership?", ["What Is `Ownership`"]),
        ("  ИТОГИ ", ["Управление", "Итоги"]),
        ("Введение Кому подходит Rust", ["Введение", "Кому подходит Rust"]),
        ("所有权", ["第四章", "所有\u200b权"]),  # a zero-width space inside a heading
        ("ﬁles", ["Files"]),  # compatibility forms and case fold alike
        ("दान", ["शब्द", "दान"]),  # vowel signs are part of the word
        ("C++", ["Languages", "C++"]),
        ("max tokens", ["`max_tokens`"]),
        ("Own\u061cership", ["Ownership\ufe0f"]),  # a direction mark, a variation selector
        ("Ownership", ["🚀 Launch", "Ownership"]),
    ],
)
def test_a_question_names_a_heading_from_any_level_down(question: str, path: list[str]) -> None:
    assert names(words(question), path)


@pytest.mark.parametrize(
    ("question", "path"),
    [
        ("Ownership", ["Ownership", "Summary"]),  # an upper level alone is not the section
        ("Understanding Ownership", ["Understanding", "Ownership Rules"]),
        ("Understanding Rules", ["Understanding", "Ownership", "Rules"]),  # a level left out
        ("own", ["Ownership"]),
        ("...", ["..."]),  # no words: names nothing
        ("Ownership", []),
        ("Ownership", "Ownership"),  # a payload's path that is not a list
        ("Ownership", [None, "Ownership"]),
        ("Ownership", ["x"] * 20 + ["Ownership"]),  # deeper than markdown goes
        ("दान", ["दिन"]),  # another word, the same letters without their vowel signs
        ("C++", ["C#"]),
        ("C", ["C#"]),
        ("Ownership", ["Ownership", "🚀"]),  # a section's heading with no words
        ("Ownership", ["Ownership", "---"]),
        # too long to be named (MAX_NAMED_CHARS): an attack's 1,024 U+FDFA a heading,
        # six levels, cost 50 ms a hit to compare (bench figures in docs/search.md)
        ("x " * 200, ["x " * 200]),
        ("\ufdfa" * 1024, ["\ufdfa" * 1024]),
    ],
)
def test_a_question_names_no_other_heading(question: str, path: object) -> None:
    asked = words(question)
    assert not (asked and names(asked, path))
    ordered = [hit("a", ["Other"]), hit("b", path)]
    assert headings_first(question, ordered) == ordered


def test_named_sections_come_first_and_the_rest_keep_their_order() -> None:
    hits = [
        hit("one", ["Guide", "Install"]),
        hit("two", ["Summary"]),
        hit("three", ["Guide", "Install", "Linux"]),
        hit("four", ["Book", "Summary"]),
        hit("five", None),
    ]
    out = headings_first("summary", hits)
    assert [h.id for h in out] == ["two", "four", "one", "three", "five"]
    assert [h.score for h in out] == [h.score for h in hits]  # the engine's scores kept
    assert headings_first("Guide Install Linux", hits)[0].id == "three"
    assert headings_first("nothing named", hits) == hits
    assert headings_first("", hits) == hits


headings = st.lists(st.text(max_size=12), max_size=8)


@given(
    question=st.text(max_size=40),
    paths=st.lists(st.one_of(headings, st.none(), st.integers(), st.text()), max_size=12),
)
@hyp_settings(max_examples=300, deadline=None)
def test_headings_first_only_reorders(question: str, paths: list[object]) -> None:
    """Any question and any payload: the same hits come back, those it names
    first, each group in the engine's order."""
    hits = [Hit(str(i), float(-i), {"heading_path": p}) for i, p in enumerate(paths)]
    out = headings_first(question, hits)
    assert sorted(h.id for h in out) == sorted(h.id for h in hits)
    asked = words(question)
    flags = [bool(asked) and names(asked, h.payload["heading_path"]) for h in out]
    assert flags == sorted(flags, reverse=True)
    for group in (True, False):
        ids = [int(h.id) for h, f in zip(out, flags, strict=True) if f is group]
        assert ids == sorted(ids)


@given(st.lists(st.text(max_size=10), min_size=1, max_size=6), st.integers(0, 5))
@hyp_settings(max_examples=300, deadline=None)
def test_a_heading_path_as_a_question_names_its_section(path: list[str], level: int) -> None:
    """The path from any level down, as `mdindex eval --headings` asks it."""
    question = " ".join(path[min(level, len(path) - 1) :])
    assert names(words(question), path) or not words(question) or not words(path[-1])
