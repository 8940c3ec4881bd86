"""One version as a reader sees it, on a real store and state: what changed in
the files (read, never written), search, and what status reads."""

from __future__ import annotations

import os
from pathlib import Path

from mdindex.config import Settings
from mdindex.documents.types import digest
from mdindex.embedding.sparse import Sparse
from mdindex.index.search import Query
from mdindex.index.state import State
from mdindex.index.view import IndexView
from mdindex.runtime import make_models, make_store, state_path
from tests.conftest import Factory, TinyEmbedder, run_backfill, stored_points

OLD = 1_600_000_000  # mtimes the fast path trusts (far from any scan)


def view_of(settings: Settings, embedder: TinyEmbedder) -> IndexView:
    models = make_models(settings)
    return IndexView(
        settings,
        planner=models.planner,
        embedder=embedder,
        store=make_store(settings),
        state=State(state_path(settings)),
    )


def indexed(docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder, **kw: object) -> Settings:
    for path in docs_tree.rglob("*.md"):
        os.utime(path, (OLD, OLD))
    s = make_settings(docs_tree, **kw)
    run_backfill(s, tiny)
    return s


def test_changes_compare_the_files_with_the_state(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = indexed(docs_tree, make_settings, tiny)
    with view_of(s, tiny) as view:
        nothing = view.changes()
        assert not nothing and (nothing.seen, nothing.unchanged, nothing.new) == (3, 3, 0)
        rows = view.state.docs()
        (docs_tree / "new.md").write_text("# New\n\nA new note.\n")
        (docs_tree / "guide" / "b.md").unlink()
        with open(docs_tree / "index.md", "a") as fh:
            fh.write("\nAppended.\n")
        whole = view.changes()
        assert sorted(r.rel for r in whole.files) == ["index.md", "new.md"]
        assert whole.deleted == [("docs", "guide/b.md")] and whole.new == 1
        # a watcher's paths: only what lies there
        one = view.changes(paths=[str(docs_tree / "new.md")])
        assert [r.rel for r in one.files] == ["new.md"] and one.deleted == []
        gone = view.changes(paths=[str(docs_tree / "guide" / "b.md")])
        assert gone.files == [] and gone.deleted == [("docs", "guide/b.md")]
        below = view.changes(folders=[str(docs_tree / "guide")])
        assert below.files == [] and below.deleted == [("docs", "guide/b.md")]
        assert below.seen == 1  # guide/a.md, unchanged
        assert view.changes(paths=[]).seen == 0  # no paths is not the whole tree
        assert view.state.docs() == rows  # looking wrote nothing


def test_confirm_reads_the_files_that_size_and_mtime_flag(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = indexed(docs_tree, make_settings, tiny)
    os.utime(docs_tree / "guide" / "a.md", (OLD + 60, OLD + 60))  # touched, same text
    (docs_tree / "guide" / "b.md").write_text("# Beta\n\nBeta text about berries.\n")
    (docs_tree / "bad.md").write_bytes(b"# Bad\n\xff\xfe\n")
    with view_of(s, tiny) as view:
        changes = view.changes()
        assert sorted(r.rel for r in changes.files) == ["bad.md", "guide/a.md", "guide/b.md"]
        changed, failed = view.confirm(changes)
        assert [r.rel for r in changed] == ["guide/b.md"]
        assert [(f.rel, "invalid UTF-8" in f.reason) for f in failed] == [("bad.md", True)]
        # nothing written: the touched file's old stamp stays until a sync
        assert view.state.docs()[("docs", "guide/a.md")].mtime_ns == OLD * 10**9


def test_known_hash_is_the_indexed_text_under_the_same_settings(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = indexed(docs_tree, make_settings, tiny)
    (docs_tree / "new.md").write_text("# New\n")
    with view_of(s, tiny) as view:
        refs = {r.rel: r for r in view.detector.tree().present.values()}
        rows = view.state.docs()
        a = refs["guide/a.md"]
        assert view.known_hash(a, rows) == digest((docs_tree / "guide" / "a.md").read_text())
        assert view.known_hash(refs["new.md"], rows) == ""
    # settings that change payloads (the same version): every file is written again
    other = make_settings(docs_tree, base_url="https://docs.example")
    with view_of(other, tiny) as view:
        rows = view.state.docs()
        assert view.known_hash(a, rows) == ""
        assert len(view.changes().files) == 4


def test_status_reads_a_real_store_and_state(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    (docs_tree / "bad.md").write_bytes(b"# Bad\n\xff\xfe\n")
    s = make_settings(docs_tree)
    with view_of(s, tiny) as view:  # before the first sync
        assert view.counts() == (0, 0) and view.point_tally() == (0, 0, 0)
        assert view.last_sync() is None and view.failures() == []
        assert view.store_status()["points"] == 0 and not view.store.exists()
    run_backfill(s, tiny)
    points = stored_points(s, vectors=True)
    n = len(points)
    with view_of(s, tiny) as view:
        assert view.counts() == (3, n) and view.point_tally() == (n, 0, n)
        status = view.store_status()
        assert status["store"] == view.store.where and status["points"] == n
        assert status["engine"] == "qdrant-edge" and status["segments"] >= 1
        assert view.store_status(points=7)["points"] == 7  # what a daemon already knows
        last = view.last_sync()
        assert last is not None and last.endswith("Z")
        [failure] = view.failures()
        assert failure["path"] == "bad.md" and "invalid UTF-8" in failure["reason"]
        assert view.embedding_status() == tiny.describe()
        assert view.point_alias("mdindex") is False  # edge: the catalog names the live one
        ids = sorted(points)[:2]
        vectors = view.stored_vectors(ids)
        assert set(vectors) == set(ids)
        for pid in ids:
            key, vector = vectors[pid]
            assert key == points[pid]["vector_key"] and vector == points[pid]["_vector"]
        assert view.has_sparse
        sparse = view.stored_sparse(ids)
        assert set(sparse) == set(ids) and all(isinstance(v, Sparse) for v in sparse.values())


def test_search_answers_with_what_users_see(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    with view_of(s, tiny) as view:
        embedded = "Beta > Beta\n\n# Beta\n\nBeta text about bananas."  # b.md's one chunk
        for mode in ("dense", "sparse", "hybrid"):
            [hit] = view.search(Query(embedded, k=1, mode=mode))
            assert hit["doc_path"] == "guide/b.md", mode
            assert hit["text"] == "# Beta\n\nBeta text about bananas."
            assert "vector_key" not in hit and hit["score"] > 0
        assert {h["doc_path"] for h in view.search(Query("text", k=5, path="guide/a"))} == {
            "guide/a.md"
        }
