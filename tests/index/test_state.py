from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from unittest import mock

from mdindex.documents.files import Failure
from mdindex.index.state import DocRow, PointRow, State, points_under, store_reopened
from mdindex.index.tables import languages, put_languages


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
    # each of its queries reads a range of the path index, never every point
    # of the root (a 1,000-file checkout at 1.09M points read them all per path)
    said: list[str] = []
    state.db.set_trace_callback(said.append)
    state.under("r", "a/b")
    state.db.set_trace_callback(None)
    plans = [" ".join(r[3] for r in state.db.execute("EXPLAIN QUERY PLAN " + q)) for q in said]
    assert len(plans) == 4 and all("path" in p and "SCAN" not in p for p in plans), plans
    state.close()


def test_known_docs_are_those_with_a_row_or_with_points(tmp_path: Path) -> None:
    state = State(tmp_path / "s.sqlite3")
    state.rebuild([("id-1", "r", "from-store.md", "k"), ("id-2", "r", "from-store.md", "k")])
    state.commit_docs([("r", "row.md", DocRow(1, 1, "h", "f"), [PointRow("id-3", "k")])], "now")
    state.commit_docs([("r", "empty.md", DocRow(1, 1, "h", "f"), [])], "now")
    state.mark_pending([("s", "new.md", [PointRow("id-4", "k"), PointRow("id-5", "k")])])
    assert state.known_docs() == {
        ("r", "from-store.md"),  # points only: a state rebuilt from the store
        ("r", "row.md"),
        ("r", "empty.md"),  # a row, no points
        ("s", "new.md"),  # pending points only
    }
    state.close()


def test_points_under_names_the_documents_a_prefix_covers_read_only(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    state = State(path)
    paths = ["a/b", "a/b/x.md", "a/b/c/y.md", "a/b.md", "a/bc.md", "a/c.md", "b.md", "é/ü.md"]
    state.commit_docs(
        [("r", p, DocRow(1, 1, "h", "f"), [PointRow(f"id-{p}", "k")]) for p in paths], "now"
    )
    state.commit_docs([("r", "a/empty.md", DocRow(1, 1, "h", "f"), [])], "now")  # no points
    state.mark_pending([("r", "a/b/new.md", [PointRow("id-new", "k"), PointRow("id-n2", "k")])])
    state.commit_docs(
        [("other", "a/b/z.md", DocRow(1, 1, "h", "f"), [PointRow("id-o", "k")])], "now"
    )
    under_ab = ["a/b", "a/b.md", "a/b/c/y.md", "a/b/new.md", "a/b/x.md", "a/bc.md"]
    # a prefix as MatchPrefix reads it, pending points included, every root by default
    assert points_under(path, ["r"], "a/b", 100) == under_ab
    assert points_under(path, [], "a/b", 100) == sorted([*under_ab, "a/b/z.md"])
    assert points_under(path, ["other"], "a/", 100) == ["a/b/z.md"]
    assert points_under(path, [], "é/", 100) == ["é/ü.md"]
    # the points counted, not the documents: 7 points under "a/b" in root r
    assert points_under(path, ["r"], "a/b", 7) == under_ab
    assert points_under(path, ["r"], "a/b", 6) is None
    # nothing under it, a root without it, a document without points: the prefix stays
    assert points_under(path, [], "q/", 100) is None
    assert points_under(path, ["nowhere"], "a/", 100) is None
    assert points_under(path, ["r"], "a/empty", 100) is None
    # no successor to bound the range, a lone surrogate, no state: the prefix stays
    assert points_under(path, [], "a\U0010ffff", 100) is None
    assert points_under(path, [], "a\udcff", 100) is None
    assert points_under(tmp_path / "none.sqlite3", [], "a/", 100) is None
    assert not (tmp_path / "none.sqlite3").exists()
    os.mkfifo(tmp_path / "fifo.sqlite3")  # opened, it would wait for a writer
    assert points_under(tmp_path / "fifo.sqlite3", [], "a/", 100) is None
    for code in (errno.EACCES, errno.EIO):  # a folder made unsearchable, a failing disk
        refused = OSError(code, os.strerror(code), str(path))
        with mock.patch("mdindex.index.state.os.stat", side_effect=refused):
            assert points_under(path, [], "a/", 100) is None
    # beside a writer holding the state's own connection in a transaction
    with state.transaction():
        assert points_under(path, ["r"], "a/c", 100) == ["a/c.md"]
    state.close()
    # and with no writer: the last close took the -wal and -shm files away
    assert points_under(path, ["r"], "a/c", 100) == ["a/c.md"]


def test_languages_count_the_documents_written_and_an_older_state_gains_the_table(
    tmp_path: Path,
) -> None:
    import sqlite3

    path = tmp_path / "s.sqlite3"
    state = State(path)
    rows = [("r", p, DocRow(1, 1, "h", "f"), [PointRow(f"id-{p}", "k")]) for p in "abcd"]
    state.commit_docs(rows[:3], "now")
    put_languages(state.db, {("r", "a"): "zh", ("r", "b"): "zh", ("r", "c"): ""})
    state.commit_docs(rows[3:], "now")  # planned elsewhere: no language recorded
    assert languages(state.db) == {"zh": 2, "": 1}
    state.remove_docs([("r", "a")])
    assert languages(state.db) == {"": 1, "zh": 1}
    state.close()
    # a state file from before languages were recorded: the table is added, empty
    db = sqlite3.connect(path)
    db.execute("DROP TABLE langs")
    db.commit()
    db.close()
    state = State(path)
    assert not state.fresh and languages(state.db) == {}
    assert state.under("r", "")[0] == {("r", p) for p in "bcd"}  # nothing else lost
    state.commit_docs(rows[1:2], "now")
    put_languages(state.db, {("r", "b"): "en"})
    assert languages(state.db) == {"en": 1}
    state.close()


def test_a_failure_is_forgotten_by_the_name_it_has_on_disk(tmp_path: Path) -> None:
    # kept as printable() shows it; a watched file fixed later is scoped by its raw
    # name, and a Russian or an ESC name once stayed listed as failed for ever
    state = State(tmp_path / "s.sqlite3")
    names = ["плохо.md", "坏.md", "bad\x1b[2J.md", "ok.md"]
    state.note_failures(None, [Failure("r", n, "invalid UTF-8 at byte 2") for n in names], "t")
    assert [f["path"] for f in state.failures()] == sorted(
        ["плохо.md", "坏.md", "bad\\x1b[2J.md", "ok.md"]
    )
    state.note_failures([("r", n) for n in names[:3]], [], "t2")
    assert [(f["path"], f["reason"]) for f in state.failures()] == [
        ("ok.md", "invalid UTF-8 at byte 2")
    ]
    state.close()


def test_the_counts_status_takes_after_every_sync_read_indexes(tmp_path: Path) -> None:
    """Status's counts, taken after every sync, scanned the tables: 240 ms at
    100,000 files, most of an edit's time to searchable there. Each reads an
    index now, and one made before them gains them at its next open, or at a
    later one while another holds it busy (the schema's error would have
    read as a damaged state, and the state been rebuilt)."""
    import sqlite3

    from mdindex.index import graph

    path = tmp_path / "s.sqlite3"
    state = State(path)
    rows = [
        ("r", p, DocRow(1, 1, "h", "f"), [PointRow(f"{p}{i}", "k") for i in range(3)])
        for p in "abc"
    ]
    state.commit_docs(rows, "now")
    state.mark_pending([("r", "d", [PointRow("d0", "k")])])
    put_languages(state.db, {("r", "a"): "de", ("r", "b"): "de", ("r", "c"): ""})
    said: list[str] = []
    state.db.set_trace_callback(said.append)
    counts = state.point_counts(), languages(state.db), graph.unresolved_count(state.db)
    state.db.set_trace_callback(None)
    assert counts == ((9, 1), {"de": 2, "": 1}, 0)
    plans = [" ".join(r[3] for r in state.db.execute("EXPLAIN QUERY PLAN " + sql)) for sql in said]
    assert len(plans) == 3 and all("INDEX" in p for p in plans), plans
    assert "points_pending" in plans[0] and "langs_lang" in plans[1]
    assert "links_unresolved" in plans[2]
    state.close()

    def indexes() -> set[str]:
        db = sqlite3.connect(path)
        try:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        finally:
            db.close()

    db = sqlite3.connect(path)
    for name in ("points_pending", "langs_lang", "links_unresolved"):
        db.execute(f"DROP INDEX {name}")
    db.execute("BEGIN IMMEDIATE")  # another process, writing
    started = time.monotonic()
    busy = State(path)  # opens without them, at once
    assert time.monotonic() - started < 4  # the busy timeout is 5 s
    assert not busy.fresh and busy.point_counts() == (9, 1)
    assert "points_pending" not in indexes()
    busy.close()
    db.rollback()
    db.close()
    State(path).close()
    assert {"points_pending", "langs_lang", "links_unresolved"} <= indexes()


def test_a_state_another_holds_locked_is_refused_not_rebuilt(tmp_path: Path) -> None:
    """Found by a hostile review: a connection holding the state exclusively
    made an open fail with "database is locked", which was taken for a damaged
    state, and a read-only `mdindex status` deleted it to rebuild it."""
    import sqlite3

    import pytest

    from mdindex.errors import StateError

    path = tmp_path / "s.sqlite3"
    state = State(path)
    state.commit_docs([("r", "a", DocRow(1, 1, "h", "f"), [PointRow("a0", "k")])], "now")
    state.close()
    holder = sqlite3.connect(path)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StateError, match="cannot be opened: database is locked"):
        State(path)
    holder.rollback()
    holder.close()
    state = State(path)  # whole: nothing was discarded
    assert not state.fresh and state.point_counts() == (1, 0) and state.doc_count() == 1
    state.close()


def test_a_readers_record_of_the_stores_files_is_a_compare_and_set(tmp_path: Path) -> None:
    """A search records the store's files as it left them only where the state
    still records them as it found them: a writer's record in between stands."""
    path = tmp_path / "s.sqlite3"
    state = State(path)
    state.put("store_signature", "written")
    state.close()

    def recorded() -> str | None:
        state = State(path)
        try:
            return state.get("store_signature")
        finally:
            state.close()

    store_reopened(path, "found", "left")  # the state records another: it stands
    assert recorded() == "written"
    store_reopened(path, "written", "left")
    assert recorded() == "left"
    store_reopened(path, "", "again")  # no signature (a server): nothing to trust
    assert recorded() == "left"
    store_reopened(tmp_path / "none.sqlite3", "left", "again")  # no state: none made
    assert not (tmp_path / "none.sqlite3").exists()
    os.mkfifo(tmp_path / "fifo")
    store_reopened(tmp_path / "fifo", "left", "again")  # returns, holds nothing
