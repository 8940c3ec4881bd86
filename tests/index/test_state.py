from __future__ import annotations

from pathlib import Path

from mdindex.index.state import DocRow, PointRow, State


def test_under_is_exactly_the_file_or_the_folder(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite3")
    paths = ["a/b", "a/b/x.md", "a/b/c/y.md", "a/b.md", "a/bc.md", "a/b0.md", "z.md"]
    state.commit_docs(
        [("r", p, DocRow(1, 1, "h", "f"), [PointRow(f"id-{p}", "k")]) for p in paths], "now"
    )
    state.mark_pending([("r", "a/b/new.md", [PointRow("id-new", "k")])])
    state.commit_docs([("other", "a/b/x.md", DocRow(1, 1, "h", "f"), [])], "now")
    known, rows = state.under("r", "a/b")
    assert known == {("r", p) for p in ("a/b", "a/b/x.md", "a/b/c/y.md", "a/b/new.md")}
    assert rows.keys() == known - {("r", "a/b/new.md")}  # pending points have no row yet
    assert state.under("r", "z.md")[0] == {("r", "z.md")}
    assert len(state.under("r", "")[0]) == len(paths) + 1
    state.close()
