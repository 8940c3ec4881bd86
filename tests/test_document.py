from __future__ import annotations

import time

import pytest

from mdindex.document import (
    decode,
    document_url,
    github_slug,
    parse_document,
    read_bytes,
    split_frontmatter,
)
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
