"""Frontmatter: parsed safely, and turned into values every store reads back."""

from __future__ import annotations

import json
import math
import time

import pytest

from mdindex.documents.frontmatter import payload_meta, split_frontmatter
from mdindex.documents.parsing import parse_document


def test_frontmatter_mapping_and_body_offset() -> None:
    text = "---\ntitle: T\ndate: 2024-01-02\ntags: [a, b]\n---\n# H\nbody\n"
    meta, start, warnings = split_frontmatter(text)
    assert meta == {"title": "T", "date": "2024-01-02", "tags": ["a", "b"]}
    assert text[start:] == "# H\nbody\n"
    assert warnings == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("---\ntitle: x\n\n# never closed\n", "unterminated"),
        ("---\n- a\n- b\n---\nbody\n", "not a mapping"),
        ("---\ntitle: [unclosed\n---\nbody\n", "malformed YAML"),
        ("---\na: &x [1]\nb: *x\n---\nbody\n", "anchors or aliases"),
        # ValueError from int() past 4,300 digits, in YAML's reader and in str():
        # the note was not indexed at all ("internal error while parsing")
        ("---\nlang: " + "1" * 5000 + "\n---\nbody\n", "number too long"),
        ("---\nn: 0x" + "f" * 5000 + "\n---\nbody\n", "number too long"),
        ("---\nn: !!set\n  ? 0x" + "f" * 5000 + "\n---\nbody\n", "number too long"),
    ],
)
def test_bad_frontmatter_is_reported_and_kept_as_body(text: str, reason: str) -> None:
    meta, start, warnings = split_frontmatter(text)
    assert meta == {} and start == 0
    assert len(warnings) == 1 and reason in warnings[0]


@pytest.mark.serial
def test_yaml_alias_bomb_is_refused_quickly() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev = chr(ord("a") + i - 1)
        cur = chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    text = "---\n" + "\n".join(lines) + "\n---\n# Body\n"
    t = time.perf_counter()
    doc = parse_document(text, "bomb.md")
    assert time.perf_counter() - t < 2
    assert doc.meta == {} and "anchors or aliases" in doc.warnings[0]


def test_oversized_frontmatter_is_body() -> None:
    text = "---\n" + "k: v\n" * 20000 + "---\nbody\n"
    _meta, start, warnings = split_frontmatter(text)
    assert start == 0 and "larger than" in warnings[0]


@pytest.mark.parametrize(
    ("yaml", "meta", "problem"),
    [
        # defect 1: 130 levels bricked qdrant-edge's WAL; 8 levels are kept, deeper is text
        ("tags: " + "[" * 130 + "]" * 130, None, "nested over 8 levels"),
        ("a: [[[[[[[1]]]]]]]", {"a": [[[[[[[1]]]]]]]}, None),
        ("a: [[[[[[[[1]]]]]]]]", {"a": [[[[[[["[1]"]]]]]]]}, "nested over 8 levels"),
        # defect 2: NaN and infinities crashed every backfill on edge
        ("w: .nan\nx: .inf\ny: -.inf\nz: 1.5", {"z": 1.5}, "not a finite number"),
        (
            "big: 123456789012345678901234567890",
            {"big": "123456789012345678901234567890"},
            "64 bits",
        ),
        ("s: !!set {b, a}", {"s": ["a", "b"]}, None),
        ("d: 2024-01-02\nt: 2001-12-14t21:59:43.10-05:00", None, None),
        ("1: one\n'1': again", {"1": "again"}, "given twice"),
        ("k: " + "x" * 20_000, {"k": "x" * 16_384}, "over 16384 characters"),
    ],
)
def test_frontmatter_becomes_values_every_store_reads_back(
    yaml: str, meta: dict | None, problem: str | None
) -> None:
    got, _, warnings = split_frontmatter(f"---\n{yaml}\n---\n# Body\n")
    if meta is not None:
        assert got == meta
    assert depth(got) <= 8 and finite(got)
    if problem is None:
        assert warnings == []
    else:
        assert any(problem in w for w in warnings), warnings
    json.dumps(got, allow_nan=False).encode("utf-8")


def test_frontmatter_with_lone_surrogates_and_many_keys() -> None:
    data = {"a": "\ud83dx", **{f"k{i}": i for i in range(600)}}
    meta, problems = payload_meta(data)
    assert meta["a"] == "?x" and len(meta) == 512
    assert any("surrogates" in p for p in problems) and any("past the first" in p for p in problems)
    json.dumps(meta).encode("utf-8")


def test_frontmatter_nested_as_deep_as_yaml_reads_is_text() -> None:
    """Found by the hostile review: 990 levels (YAML reads up to 1,000) failed the
    file with a RecursionError; 500 worked."""
    text = "---\ntags: " + "[" * 990 + "]" * 990 + "\n---\n# Deep\n"
    meta, _, warnings = split_frontmatter(text)
    assert isinstance(meta["tags"], list) and depth(meta) <= 8
    assert any("nested over 8 levels" in w for w in warnings)


def test_one_frontmatter_says_a_few_lines_not_thousands() -> None:
    """Found by the hostile review: 60 KB of `[.nan, ...]` made 10,000 warnings."""
    text = "---\nk: [" + ", ".join([".nan"] * 10_000) + "]\n---\n# Numbers\n"
    meta, _, warnings = split_frontmatter(text)
    assert meta == {"k": []} and len(warnings) == 6
    assert warnings[-1] == "and 9995 more frontmatter values like these"


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def finite(value: object) -> bool:
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return not isinstance(value, float) or math.isfinite(value)
