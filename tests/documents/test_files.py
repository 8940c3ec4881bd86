"""Which paths are documents: include and exclude globs, hidden files, the scan."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mdindex.config import Root
from mdindex.documents.files import FileRef, PathFilter, glob_regex, printable, scan

DEFAULT = ["**/*.md", "**/*.markdown"]


def test_double_star_spans_folders_and_star_stays_in_one() -> None:
    assert glob_regex("**/*.md").match("a.md") and glob_regex("**/*.md").match("a/b/c.md")
    assert glob_regex("*.md").match("a.md") and not glob_regex("*.md").match("a/b.md")
    assert glob_regex("docs/**").match("docs/x/y.md") and not glob_regex("docs/**").match("d/x")
    assert glob_regex("a?.md").match("ab.md") and not glob_regex("a?.md").match("a/.md")
    assert not glob_regex("*.md").match("a.md\n")  # whole path, not a prefix


def test_include_and_exclude() -> None:
    accept = PathFilter(DEFAULT, ["drafts/**", "**/*.tmp.md"])
    assert accept("index.md") and accept("guide/a.markdown") and accept("deep/er/x.md")
    assert not accept("drafts/x.md") and not accept("drafts/deep/x.md")
    assert not accept("guide/x.tmp.md")
    assert not accept("notes.txt") and not accept("notes.md~") and not accept("4913")
    only = PathFilter(["guide/*.md"])
    assert only("guide/a.md") and not only("guide/sub/a.md") and not only("a.md")


def test_hidden_files_and_folders_are_never_documents() -> None:
    accept = PathFilter(["**"])
    for rel in (".git/x.md", "a/.obsidian/y.md", ".#notes.md", ".notes.md.swp", "a//b.md"):
        assert not accept(rel), rel
    assert accept("a/b.md")
    assert not accept.may_contain(".git") and not accept.may_contain("a/.trash")
    assert accept.may_contain("a/b") and accept.may_contain("")


PATHS = st.text(alphabet="ab./*?\n\\[]é", max_size=12)


@settings(max_examples=500, deadline=None)
@given(st.lists(PATHS, max_size=3), st.lists(PATHS, max_size=3), PATHS)
def test_the_filter_is_its_rule_path_by_path(
    include: list[str], exclude: list[str], rel: str
) -> None:
    """One pattern for all the globs, and string tests for the hidden parts,
    decide as the rule does, a part and a glob at a time."""
    parts = rel.split("/")
    rule = (
        not any(p.startswith(".") or p == "" for p in parts)
        and any(glob_regex(g).match(rel) for g in include)
        and not any(glob_regex(g).match(rel) for g in exclude)
    )
    assert PathFilter(include, exclude)(rel) == rule


def test_scan_yields_documents_in_order_and_skips_hidden_folders(tmp_path: Path) -> None:
    for rel in ("b.md", "a/z.md", "a/y.md", ".git/x.md", "a/.hidden/h.md", "c.txt", "drafts/d.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# x\n")
    found = list(scan(Root("r", tmp_path), PathFilter(DEFAULT, ["drafts/**"])))
    assert all(isinstance(f, FileRef) for f in found)
    # a folder's files by name, then its subfolders by name
    assert [f.rel for f in found if isinstance(f, FileRef)] == ["b.md", "a/y.md", "a/z.md"]
    under = list(scan(Root("r", tmp_path), PathFilter(DEFAULT), under="a"))
    assert [f.rel for f in under if isinstance(f, FileRef)] == ["a/y.md", "a/z.md"]


def test_printable_keeps_every_script_and_escapes_what_could_drive_a_terminal() -> None:
    # a Chinese or Russian user's notes are named in their script, and every log
    # line, failure and status naming them once showed \xd0\xba... instead
    for name in ("кофе.md", "архив/поездка.md", "咖啡.md", "قهوة.md", "café notes.md"):
        assert printable(name) == name
    assert printable("a\x1b[2J\x07.md") == "a\\x1b[2J\\x07.md"
    assert printable("line\nbreak\x7f.md") == "line\\x0abreak\\x7f.md"
    assert printable("rtl\u202egpj.md") == "rtl\\xe2\\x80\\xaegpj.md"  # bidi override
    assert printable("sep\u2028.md") == "sep\\xe2\\x80\\xa8.md"
    assert printable("кофе\udcff.md") == "кофе\\udcff.md"  # an undecodable byte
