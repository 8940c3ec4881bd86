from __future__ import annotations

import json
import math
import time

import pytest

from mdindex.documents.frontmatter import payload_meta, split_frontmatter
from mdindex.documents.parsing import document_url, github_slug, parse_document
from mdindex.documents.reading import decode, read_bytes, text_digest
from mdindex.documents.types import digest
from mdindex.errors import BinaryFile, DecodeError, FileTooLarge, UnreadableFile


def test_decode_strips_bom_and_normalises_newlines() -> None:
    assert decode("\ufeffa\r\nb\rc\n".encode()) == "a\nb\nc\n"


def test_decode_rejects_nul_and_invalid_utf8() -> None:
    with pytest.raises(BinaryFile, match="NUL"):
        decode(b"# title\x00\x01")
    with pytest.raises(DecodeError, match="byte 2"):
        decode(b"ab\xff\xfe")


def test_read_bytes_limits(tmp_path) -> None:
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(FileTooLarge, match="max_file_bytes"):
        read_bytes(big, 1000)
    with pytest.raises(UnreadableFile, match="vanished"):
        read_bytes(tmp_path / "gone.md", 1000)
    assert read_bytes(big, 5000) == b"x" * 2000


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
    ],
)
def test_bad_frontmatter_is_reported_and_kept_as_body(text: str, reason: str) -> None:
    meta, start, warnings = split_frontmatter(text)
    assert meta == {} and start == 0
    assert len(warnings) == 1 and reason in warnings[0]


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


def test_title_fallbacks() -> None:
    assert parse_document("---\ntitle: FM\n---\n# H1\n", "a.md").title == "FM"
    assert parse_document("## h2\n# The *H1*\n", "a.md").title == "The H1"
    assert parse_document("no headings\n", "dir/my-file.md").title == "my-file"


def test_headings_ignore_code_and_html() -> None:
    text = (
        "# Real\n\n```sh\n# not a heading\n```\n\n    # indented code\n\n"
        "<div>\n# inside html\n</div>\n\nSetext\n======\n\nSub\n---\n"
    )
    doc = parse_document(text, "a.md")
    assert [(h.level, h.text) for h in doc.headings] == [(1, "Real"), (1, "Setext"), (2, "Sub")]
    assert [h.path for h in doc.headings] == [("Real",), ("Setext",), ("Setext", "Sub")]
    assert len(doc.code_ranges) == 2
    assert text[doc.code_ranges[0][0] : doc.code_ranges[0][1]].startswith("```sh")


def test_anchors_are_github_style_and_unique() -> None:
    doc = parse_document(
        "# Intro\n## Intro\n## Intro\n## C++ & `code`!\n## Custom {#my-id}\n", "a.md"
    )
    assert [h.anchor for h in doc.headings] == ["intro", "intro-1", "intro-2", "c--code", "my-id"]
    assert github_slug("Héllo Wörld") == "héllo-wörld"


def test_url_mapping() -> None:
    assert document_url("", "pretty", "a/b.md", "") == ""
    assert document_url("https://x.io/", "pretty", "a/b.md", "") == "https://x.io/a/b/"
    assert document_url("https://x.io", "pretty", "a/_index.md", "") == "https://x.io/a/"
    assert document_url("https://x.io", "pretty", "index.md", "") == "https://x.io/"
    assert document_url("https://x.io", "html", "a/b.md", "") == "https://x.io/a/b.html"
    assert document_url("https://x.io", "path", "a/b c.md", "") == "https://x.io/a/b%20c.md"
    assert document_url("https://x.io", "pretty", "a.md", "/custom/") == "https://x.io/custom/"
    assert document_url("", "pretty", "a.md", "https://y.io/p") == "https://y.io/p"


def test_line_index() -> None:
    doc = parse_document("a\nbb\n\nccc", "a.md")
    assert [doc.line_of(i) for i in (0, 1, 2, 4, 5, 6)] == [1, 1, 2, 2, 3, 4]


def test_ten_thousand_headings_parse_in_bounded_time() -> None:
    text = "".join(f"## Heading {i}\n\nline {i}\n\n" for i in range(10_000))
    t = time.perf_counter()
    doc = parse_document(text, "many.md")
    assert time.perf_counter() - t < 20
    assert len(doc.headings) == 10_000
    assert doc.headings[-1].anchor == "heading-9999"


def test_duplicate_headings_are_linear() -> None:
    """Issue 23, defect 11: a 50 KB file of `# a` lines took 11.8 s to chunk (the
    anchor de-duplication started from suffix 0 for every heading)."""
    text = "# a\n" * 12_500 + "# a-3\n# a-1\n# a\n"
    started = time.perf_counter()
    doc = parse_document(text, "dupes.md")
    assert time.perf_counter() - started < 2
    anchors = [h.anchor for h in doc.headings]
    # the anchors GitHub gives: the smallest free suffix, as before
    assert anchors[:4] == ["a", "a-1", "a-2", "a-3"]
    assert anchors[-3:] == ["a-3-1", "a-1-1", "a-12500"]
    assert len(set(anchors)) == len(anchors)


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


def test_text_digest_streams_what_decode_gives(tmp_path) -> None:
    path = tmp_path / "f.md"
    for data in (
        "\ufeffa\r\nb\rc\n".encode(),
        b"x" * (1 << 20) + b"\r\n" + "é".encode() * 600_000 + b"\r",  # CRLF across a piece
        b"",
    ):
        path.write_bytes(data)
        assert text_digest(path, 10**8) == digest(decode(data))
    path.write_bytes(b"ok\xff")
    with pytest.raises(DecodeError):
        text_digest(path, 10**8)


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


def test_headings_and_titles_are_bounded_in_what_every_chunk_carries() -> None:
    text = "# " + "a" * 200_000 + "\n\n## " + "b" * 5000 + "\n\nbody\n"
    doc = parse_document(text, "long.md")
    assert len(doc.title) == 1024
    assert [len(h.text) for h in doc.headings] == [1024, 1024]
    assert doc.headings[1].path == ("a" * 1024, "b" * 1024)
