"""The state must describe the store beside it, or it is rebuilt from the store's
own points: every vector reused, nothing embedded again."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path

from mdindex.index import vectors
from mdindex.index.consistency import mismatch, rebuild_state, recover_inflight, store_identity
from mdindex.index.state import DocRow, PointRow, State
from mdindex.runtime import make_store, state_path
from mdindex.sinks import Point, Store
from tests.conftest import Factory, TinyEmbedder, run_backfill, stored_points

DIM = 4


def point(n: int, rel: str, key: str = "") -> Point:
    payload = {"root": "docs", "doc_path": rel, "vector_key": key or f"key{n}", "text": f"t{n}"}
    return Point(str(uuid.UUID(int=n + 1)), [1.0, float(n), 0.0, 0.0], payload)


def opened(settings_dir: Path, make_settings: Factory) -> tuple[Store, State]:
    s = make_settings(settings_dir)
    store = make_store(s).open()
    store.ensure_collection(DIM)
    return store, State(state_path(s))


def committed(state: State, store: Store, rel: str, points: list[Point]) -> None:
    """The state records ``points`` as ``rel``'s, written to ``store``."""
    rows = [PointRow(p.id, str(p.payload["vector_key"])) for p in points]
    state.commit_docs([("docs", rel, DocRow(1, 1, "hash", "fp"), rows)], "now")
    state.put("store", store_identity(store))


def test_lost_state_is_rebuilt_without_embedding(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s)
    embedded = tiny.texts_embedded
    state_path(s).unlink()
    result = run_backfill(s, tiny)
    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == embedded
    assert stored_points(s) == before
    state_path(s).write_bytes(b"garbage, not sqlite" * 100)
    result = run_backfill(s, tiny)
    assert result["chunks_embedded"] == 0
    assert stored_points(s) == before
    assert run_backfill(s, tiny)["points_upserted"] == 0


def test_an_emptied_state_is_rebuilt_without_embedding(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s)
    db = sqlite3.connect(state_path(s))
    with db:
        db.execute("DELETE FROM docs")
        db.execute("DELETE FROM points")
    db.close()
    result = run_backfill(s, tiny)
    assert result["chunks_embedded"] == 0  # rewritten with the vectors the store held
    assert stored_points(s) == before
    assert run_backfill(s, tiny)["points_upserted"] == 0
    state = State(state_path(s))
    try:  # it knows every point again, and every document once more
        assert state.point_counts() == (len(before), 0)
        assert state.doc_count() == 3
    finally:
        state.close()


def test_a_foreign_state_is_rebuilt_from_this_store(
    docs_tree: Path, make_settings: Factory, tmp_path: Path, tiny: TinyEmbedder
) -> None:
    """A state copied from another machine (or another store) describes that store."""
    here = make_settings(docs_tree)
    run_backfill(here, tiny)
    before = stored_points(here)
    there = make_settings(docs_tree, state_dir=str(tmp_path / "elsewhere"))
    (docs_tree / "there-only.md").write_text("# There\n\nOnly the other index has this.\n")
    run_backfill(there, TinyEmbedder())
    (docs_tree / "there-only.md").unlink()
    shutil.copy(state_path(there), state_path(here))
    embedded = tiny.texts_embedded
    result = run_backfill(here, tiny)
    assert result["chunks_embedded"] == 0 and tiny.texts_embedded == embedded
    assert result["files_deleted"] == 0  # the other store's document was never here
    assert stored_points(here) == before
    state = State(state_path(here))
    store = make_store(here).open()
    try:
        assert state.get("store") == store_identity(store)
    finally:
        store.close()
        state.close()


def test_mismatch_says_why_the_state_cannot_be_trusted(
    tmp_path: Path, make_settings: Factory
) -> None:
    store, state = opened(tmp_path / "docs", make_settings)
    try:
        assert state.fresh and mismatch(store, state) == ""  # new state, empty store
        a = [point(i, "a.md") for i in range(3)]
        store.upsert(a)
        assert mismatch(store, state) == "no local state"
        committed(state, store, "a.md", a)
        state.fresh = False
        assert mismatch(store, state) == ""
        state.put("store", "/somewhere/else#mdindex")
        assert mismatch(store, state) == "state belongs to another store"
        state.put("store", store_identity(store))
        store.delete([a[0].id])
        assert mismatch(store, state) == "state knows 3 points, store holds 2"
        store.upsert(a[:1])
        # a write stopped after its upsert: two new points pending, and in the store
        new = [point(10, "a.md"), point(11, "a.md")]
        state.mark_pending([("docs", "a.md", [PointRow(p.id, "k") for p in new])])
        store.upsert(new)
        assert mismatch(store, state) == ""
        # the interrupted document is synced again, whatever its size and mtime say
        assert state.docs()[("docs", "a.md")].fingerprint == ""
        store.upsert([point(20, "b.md")])  # more than the write could have added
        assert mismatch(store, state) == "state knows 3 points, store holds 6"
    finally:
        store.close()
        state.close()


def test_rebuild_takes_ids_documents_and_vector_keys_from_the_store(
    tmp_path: Path, make_settings: Factory
) -> None:
    store, state = opened(tmp_path / "docs", make_settings)
    try:
        a = [point(0, "a.md", "ka"), point(1, "a.md", "kb")]
        b = [point(2, "b.md", "ka")]
        store.upsert(a + b)
        committed(state, store, "old.md", [point(9, "old.md")])
        state.mark_inflight([("docs", "c.md")])
        rebuild_state(store, state, "a test")
        assert not state.fresh
        assert state.docs() == {}  # every file is re-chunked and compared on the next sync
        assert state.known_docs() == {("docs", "a.md"), ("docs", "b.md")}
        assert state.point_ids("docs", "a.md", committed_only=True) == {p.id for p in a}
        assert state.point_ids("docs", "b.md", committed_only=True) == {b[0].id}
        assert vectors.donors(state.db) == {"ka": min(a[0].id, b[0].id), "kb": a[1].id}
        assert state.inflight() == []
    finally:
        store.close()
        state.close()


def test_points_written_by_workers_become_pending(tmp_path: Path, make_settings: Factory) -> None:
    store, state = opened(tmp_path / "docs", make_settings)
    try:
        a = [point(0, "a.md")]
        store.upsert(a)
        committed(state, store, "a.md", a)
        state.fresh = False
        written = [point(5, "b.md", "kw"), point(6, "b.md", "kw")]
        store.upsert(written)  # by a worker that stopped before its driver committed
        state.mark_inflight([("docs", "b.md")])
        recover_inflight(store, state)
        assert state.inflight() == []
        assert state.point_ids("docs", "b.md") == {p.id for p in written}
        assert state.point_ids("docs", "b.md", committed_only=True) == set()
        assert state.point_counts() == (1, 2)
        assert mismatch(store, state) == ""
    finally:
        store.close()
        state.close()


def test_a_sync_deletes_what_a_worker_left_for_a_document(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    want = stored_points(s)
    stray = Point(
        "00000000-0000-4000-8000-0000000000aa",
        tiny.vector("an older text of b").tolist(),
        {"root": "docs", "doc_path": "guide/b.md", "vector_key": "old", "text": "old"},
    )
    store = make_store(s).open()
    store.upsert([stray])
    store.close()
    state = State(state_path(s))
    state.mark_inflight([("docs", "guide/b.md")])
    state.close()
    result = run_backfill(s, tiny)
    assert result["points_deleted"] == 1 and result["chunks_embedded"] == 0
    assert stored_points(s) == want
