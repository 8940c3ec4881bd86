"""The guard on deletions: what it refuses, and what it lets go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdindex.config import Root
from mdindex.errors import PruneRefused
from mdindex.index.guard import identity, refusal
from tests.conftest import run_backfill, settings_for, stored_points


def roots(tmp_path: Path, *labels: str) -> list[Root]:
    out = []
    for label in labels:
        (tmp_path / label).mkdir(exist_ok=True)
        out.append(Root(label, tmp_path / label))
    return out


def test_each_refusal_in_one_line(tmp_path: Path) -> None:
    a, b = roots(tmp_path, "a", "b")
    ids = {a.label: identity(a.path) or "", b.label: identity(b.path) or ""}
    gone = [("a", f"{i}.md") for i in range(3)]
    scan = {"a": 2, "b": 4}  # the files a whole scan found
    assert refusal([a, b], gone, {"a": 10}, ids, scan) == ""  # 3 of 10
    assert "more than half" in refusal([a, b], gone, {"a": 5}, ids, scan)
    assert "no markdown files" in refusal([a, b], gone, {"a": 10}, ids, present={"b": 4})
    # paths that file events named: the kernel saw them go, so no count applies
    assert refusal([a, b], gone, {"a": 5}, ids) == ""
    assert refusal([a, b], gone, {"a": 3}, ids) == ""  # the root emptied
    assert "another folder" in refusal([a, b], gone, {"a": 10}, {**ids, "a": "1:2"})
    os.rmdir(b.path)
    assert "missing" in refusal([a, b], [("b", "x.md")], {"b": 10}, ids)
    line = refusal([a], [("b", "x.md")], {"b": 10}, ids)
    assert "not among the roots given" in line and "--force" in line
    for reason in (line, refusal([a, b], gone, {"a": 5}, ids, scan)):
        assert "\n" not in reason


def test_a_root_left_out_keeps_its_documents(tmp_path: Path, tiny) -> None:
    """Found by the hostile review: a root left out of the command (or renamed)
    lost all its documents, with no refusal and no --force."""
    notes, docs = tmp_path / "notes", tmp_path / "docs"
    for root in (notes, docs):
        root.mkdir()
        for i in range(3):
            (root / f"{i}.md").write_text(f"# {root.name} {i}\n\ntext {i}\n")
    both = settings_for(tmp_path, [notes, docs])
    run_backfill(both, tiny)
    before = stored_points(both)
    one = settings_for(tmp_path, [notes])
    with pytest.raises(PruneRefused, match="'docs' is indexed but not among the roots given"):
        run_backfill(one, tiny)
    assert stored_points(both) == before
    run_backfill(one, tiny, force=True)
    assert {p["root"] for p in stored_points(both).values()} == {"notes"}
