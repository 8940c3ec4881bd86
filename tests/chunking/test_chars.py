"""The character bound (``max_chars``) in every script and every strategy.

A hypothesis property: markdown in Latin, Cyrillic, Arabic, Devanagari, Thai,
CJK, emoji and combining marks, mixed or alone, with spaces or none at all,
with headings or without, chunked by the three strategies; every chunk keeps
the invariants (tests/chunking/invariants.py: exact text and offsets, token
count within the limit) and holds at most ``max_chars`` characters.

Every example that ever failed is kept in ``examples/scripts/`` as a JSON file
and replayed first (``test_found_examples_stay_fixed``); a new failure is
written there by the run that finds it (the shrunk example only).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from mdindex.chunking import CHARS_PER_TOKEN, Chunker
from mdindex.chunking.chars import (
    char_end,
    count_chars,
    grapheme_cut,
    is_grapheme_boundary,
)
from mdindex.documents.parsing import parse_document
from mdindex.embedding.tokens import TokenCounter
from tests.chunking.invariants import check
from tests.conftest import TinyEmbedder

EXAMPLES = Path(__file__).with_name("examples") / "scripts"

WORDS = {
    "latin": ["alpha", "Beta", "naïve", "café", "Dr.", "end.", "why?", "3.14"],
    "cyrillic": ["Привет", "мир", "книга.", "Почему?", "съешь", "ещё"],
    "arabic": ["مرحبا", "بالعالم", "كتاب.", "لماذا؟", "السلام", "عليكم"],
    "devanagari": ["नमस्ते", "दुनिया", "किताब।", "क्यों?", "हिन्दी", "॥"],
    "thai": ["สวัสดี", "ภาษาไทย", "ฉันชื่อสมชาย", "กิน", "ข้าว", "ที่นี่"],
    "cjk": ["你好。", "世界", "我是学生！", "为什么？", "日本語", "東京", "「はい」。"],
    "emoji": ["😀", "👩‍👩‍👧‍👦", "🇫🇷🇩🇪", "👍🏽", "❤️", "🏳️‍🌈"],
    "marks": ["e\u0301", "a\u0300\u0301\u0302", "Z" + "\u0336" * 30, "\u0e01\u0e34\u0e4a"],
}
ALL = [w for words in WORDS.values() for w in words]

script = st.sampled_from([*WORDS, "mixed"])
separator = st.sampled_from([" ", "", "\n", "  ", "\u200b"])


@st.composite
def paragraph(draw: Any) -> str:
    name = draw(script)
    words = WORDS.get(name, ALL)
    return draw(separator).join(draw(st.lists(st.sampled_from(words), min_size=1, max_size=80)))


long_run = st.tuples(st.sampled_from(ALL), st.integers(20, 400)).map(lambda t: t[0] * t[1])
heading = st.tuples(st.integers(1, 3), paragraph()).map(
    lambda t: "#" * t[0] + " " + t[1].replace("\n", " ")
)
block = st.one_of(paragraph(), paragraph(), long_run, heading)
markdown = st.lists(block, min_size=1, max_size=10).map(lambda b: "\n\n".join(b) + "\n")


def chunk_and_check(
    counter: TokenCounter, strategy: str, text: str, limit: int, max_chars: int | None, stable: bool
) -> None:
    c = counter.with_limit(limit)
    c.stable = stable
    chunker = Chunker(
        c, strategy, overlap_tokens=min(8, limit // 4), embed=TinyEmbedder(), max_chars=max_chars
    )
    doc = parse_document(text, "scripts.md")
    check(doc, chunker.chunk(doc), c, chunker)


def save(example: dict[str, Any]) -> Path:
    text = json.dumps(example, ensure_ascii=False, sort_keys=True)
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    path = EXAMPLES / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_found_examples_stay_fixed(counter: TokenCounter, path: Path) -> None:
    chunk_and_check(counter, **json.loads(path.read_text(encoding="utf-8")))


def test_the_examples_are_replayed() -> None:
    assert sorted(EXAMPLES.glob("*.json")), f"no regression files in {EXAMPLES}"


@pytest.mark.parametrize("strategy", ["heading", "token", "semantic"])
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,  # the found examples are replayed by the test above
)
@given(
    text=markdown,
    limit=st.sampled_from([24, 64, 254]),
    max_chars=st.sampled_from([None, 16, 40, 300]),
    stable=st.booleans(),
)
def test_every_chunk_is_within_both_bounds_in_every_script(
    counter: TokenCounter, strategy: str, text: str, limit: int, max_chars: int | None, stable: bool
) -> None:
    example = {
        "strategy": strategy,
        "text": text,
        "limit": limit,
        "max_chars": max_chars,
        "stable": stable,
    }
    try:
        chunk_and_check(counter, **example)
    except Exception:
        if current_build_context().is_final:
            print(f"kept as {save(example)}")
        raise


def test_count_chars_leaves_out_whitespace() -> None:
    assert count_chars("a b\u3000c\n\td") == 4
    assert count_chars("ภาษาไทย ภาษา", 3, 9) == 5
    assert count_chars("") == 0


def test_char_end_is_after_the_nth_character_or_the_end() -> None:
    text = "ab  cd ef  "
    assert char_end(text, 0, len(text), 3) == 5
    assert char_end(text, 0, len(text), 6) == len(text)  # only whitespace follows
    assert char_end(text, 2, len(text), 1) == 5


@pytest.mark.parametrize(
    ("text", "inside"),
    [
        ("ที่นี่", [1, 2, 4, 5]),  # Thai vowels and tone marks above the consonant
        ("e\u0301x", [1]),  # a combining accent
        ("👩\u200d👧", [1, 2]),  # a ZWJ sequence
        ("👍🏽", [1]),  # a skin tone
        ("🇫🇷🇩🇪", [1, 3]),  # two flags: between them is a boundary, inside is not
        ("\r\n", [1]),
        ("क्षमा", [1, 2, 4]),  # the conjunct क्ष, then म, then मा (a vowel sign)
    ],
)
def test_grapheme_boundaries(text: str, inside: list[int]) -> None:
    assert [p for p in range(1, len(text)) if not is_grapheme_boundary(text, p)] == inside


def test_a_cut_without_a_boundary_falls_back_to_the_bound() -> None:
    text = "Z" + "\u0336" * 50
    assert grapheme_cut(text, 0, 20) == 20  # one cluster longer than the window
    assert grapheme_cut("ab\u0301c", 0, 2) == 1
    assert grapheme_cut("ภาษา\u200bไทยดี", 0, 9) == 5  # after Thai's zero-width word break


def test_thai_without_spaces_is_cut_at_the_bound_between_graphemes(counter: TokenCounter) -> None:
    text = "# ไทย\n\n" + "ที่นี่ภาษาไทย" * 300 + "\n"
    doc = parse_document(text, "th.md")
    chunker = Chunker(counter, "heading", max_chars=500)
    chunks = chunker.chunk(doc)
    check(doc, chunks, counter, chunker)
    assert len(chunks) > 5
    for c in chunks:
        assert is_grapheme_boundary(text, c.char_start) and is_grapheme_boundary(text, c.char_end)


def test_the_default_bound_is_per_token_of_the_limit(counter: TokenCounter) -> None:
    assert Chunker(counter).max_chars == int(CHARS_PER_TOKEN * counter.limit) == 1397
    assert Chunker(counter.with_limit(100)).params()["max_chars"] == int(CHARS_PER_TOKEN * 100)
    assert Chunker(counter, max_chars=900).params()["max_chars"] == 900


THAI = [
    "ภาษาไทยเป็นภาษาราชการของประเทศไทย",
    "มีผู้พูดเป็นภาษาแม่ประมาณหกสิบล้านคน",
    "อักษรไทยพัฒนามาจากอักษรขอมโบราณ",
    "กรุงเทพมหานครเป็นเมืองหลวงและเมืองที่มีประชากรมากที่สุดของประเทศ",
    "แม่น้ำเจ้าพระยาไหลผ่านใจกลางเมือง",
]
CHINESE = [
    "汉语是汉族的语言，也是世界上使用人数最多的语言之一。",
    "汉字是汉语的书写系统，已有数千年的历史。",
    "北京是中华人民共和国的首都，位于华北平原的北部。",
    "长江是亚洲最长的河流，全长六千三百多公里。",
]


@pytest.mark.slow
@pytest.mark.model
def test_thai_and_chinese_notes_are_stored_within_both_bounds(make_settings: Any) -> None:
    """Backfilled with the real model: a Thai paragraph written without spaces
    (one [UNK] token to all-MiniLM-L6-v2) and long Chinese paragraphs become
    points of at most max_chars characters and the model's token limit."""
    from mdindex.runtime import make_indexer
    from tests.conftest import stored_points

    folder = make_settings().state_dir.parent / "notes"
    folder.mkdir()
    (folder / "th.md").write_text(
        "# ภาษาไทย\n\n" + "".join(THAI) * 12 + "\n\n" + " ".join(THAI * 10) + "\n",
        encoding="utf-8",
    )
    (folder / "zh.md").write_text(
        "# 汉语\n\n" + "".join(CHINESE * 15) + "\n\n## 北京\n\n" + "".join(CHINESE[2:] * 20) + "\n",
        encoding="utf-8",
    )
    settings = make_settings(folder)
    with make_indexer(settings) as indexer:
        indexer.backfill()
    points = list(stored_points(settings).values())
    limit = int(CHARS_PER_TOKEN * 254)
    by_doc = {d: [p for p in points if p["doc_path"] == d] for d in ("th.md", "zh.md")}
    assert len(by_doc["th.md"]) >= 5 and len(by_doc["zh.md"]) >= 8
    for p in points:
        assert count_chars(p["text"]) <= limit, (p["doc_path"], len(p["text"]))
        assert 0 < p["token_count"] <= 254
    # without the bound the spaceless Thai paragraph was one point of 2,600 characters
    assert max(len(p["text"]) for p in by_doc["th.md"]) <= limit + 20
