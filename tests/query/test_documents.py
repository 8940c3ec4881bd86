"""The indexed documents as the files hold them now (`Index.documents`, the MCP
tools ``read`` and ``related``), confined to the roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdindex.query.documents import Documents
from tests.conftest import TinyEmbedder, run_rollout, settings_for


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    """A root ``notes`` indexed into ``tmp_path/state``."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nSee [b](b.md).\n")
    (root / "b.md").write_text("# B\n\nBeta.\n")
    run_rollout(settings_for(tmp_path, [root]), TinyEmbedder())
    return root


def test_without_roots_a_read_finds_the_roots_the_last_sync_recorded(
    tmp_path: Path, indexed: Path
) -> None:
    """Found by a newcomer: ``Index.connect(state_dir)`` names no roots, and its
    ``documents.related`` answered from the roots the state records while
    ``documents.read`` of the same document said "no root labelled 'notes'
    (roots: none configured)"."""
    documents = Documents(settings_for(tmp_path, []))
    read = documents.read("notes", "a.md", 3, 3)
    assert (read["text"], read["total_lines"]) == ("See [b](b.md).", 4)
    assert [e["path"] for e in documents.related("notes", "a.md")["outgoing"]] == ["b.md"]
    with pytest.raises(ValueError, match="no root labelled 'other' \\(roots: notes\\)"):
        documents.read("other", "a.md")
    with pytest.raises(ValueError, match="must be relative"):
        documents.read("notes", "../notes/a.md")


def test_with_nothing_indexed_and_no_roots_a_read_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="roots: none configured"):
        Documents(settings_for(tmp_path, [])).read("notes", "a.md")


@pytest.mark.parametrize(
    "args",
    [
        ("notes", True),
        ("notes", ["a.md"]),
        (None, "a.md"),
        ("notes", "a.md", "x"),
        ("notes", "a.md", 1, [2]),
    ],
)
def test_a_read_argument_of_another_type_is_a_one_line_value_error(
    tmp_path: Path, indexed: Path, args: tuple[object, ...]
) -> None:
    """docs/python.md: a root, path or line range documents.read refuses is a
    ValueError of one line. read("notes", True) raised TypeError, a path
    given as a list AttributeError, start_line="x" TypeError."""
    documents = Documents(settings_for(tmp_path, [indexed]))
    with pytest.raises(ValueError) as raised:
        documents.read(*args)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)
    assert documents.read("notes", "a.md", 3.0, "3")["text"] == "See [b](b.md)."  # type: ignore[arg-type]
