from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.embedding.sparse import Sparse
from mdindex.errors import LockError, PruneRefused, StoreMismatch, StoreUnavailable
from mdindex.index.lock import WriterLock
from mdindex.index.verify import verify
from mdindex.runtime import make_store
from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from tests.conftest import (
    TinyEmbedder,
    assert_same,
    build_indexer,
    run_backfill,
    settings_for,
    small_edge_store,
    stored_points,
)
from tests.faults.helpers import unprivileged


def fresh_copy(tmp_path: Path, settings, tiny) -> dict:
    """What a fresh backfill of the same tree stores."""
    other = settings_for(
        tmp_path / "fresh",
        settings.roots,
        strategy=settings.strategy,
        max_tokens=settings.max_tokens,
    )
    shutil.rmtree(tmp_path / "fresh", ignore_errors=True)
    run_backfill(other, tiny)
    return stored_points(other)


def test_backfill_twice_embeds_and_writes_nothing(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    first = run_backfill(s, tiny)
    assert first["files_changed"] == 3 and first["chunks_embedded"] > 0
    assert first["points_upserted"] == first["chunks_embedded"]
    before = stored_points(s)
    assert len(before) == first["points_upserted"]
    second = run_backfill(s, tiny)
    assert second["chunks_embedded"] == 0 and second["points_upserted"] == 0
    assert second["files_unchanged"] == 3 and second["points_deleted"] == 0
    assert stored_points(s) == before


def test_apply_on_a_watchers_paths_says_how_long_it_took(docs_tree, make_settings, tiny) -> None:
    """The daemon logs apply()'s summary: it read "1 chunks embedded ... in 0.00s"."""
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    note = docs_tree / "otters.md"
    note.write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    with build_indexer(s, tiny) as indexer:
        summary = indexer.apply(indexer.changes([str(note)], ()))
    assert summary.chunks_embedded == 1 and summary.seconds > 0, summary.as_dict()


def test_rename_reuses_vectors(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    (docs_tree / "guide" / "a.md").rename(docs_tree / "guide" / "renamed.md")
    result = run_backfill(s, tiny)
    assert result["chunks_embedded"] == 0
    assert result["files_deleted"] == 1 and result["files_changed"] == 1
    after = stored_points(s, vectors=True)
    paths = {p["doc_path"] for p in after.values()}
    assert "guide/a.md" not in paths and "guide/renamed.md" in paths
    old_vecs = {
        p["content_hash"]: p["_vector"] for p in before.values() if p["doc_path"] == "guide/a.md"
    }
    for p in after.values():
        if p["doc_path"] == "guide/renamed.md":
            assert p["_vector"] == old_vecs[p["content_hash"]]
    assert len(after) == len(before)


def test_delete_and_guarded_prune(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    (docs_tree / "guide" / "b.md").unlink()
    result = run_backfill(s, tiny)
    assert result["files_deleted"] == 1 and result["points_deleted"] >= 1
    assert all(p["doc_path"] != "guide/b.md" for p in stored_points(s).values())
    # Removing two of the remaining two documents is more than half: refused.
    before = stored_points(s)
    for f in docs_tree.rglob("*.md"):
        f.unlink()
    with pytest.raises(PruneRefused, match="no markdown files"):
        run_backfill(s, tiny)
    assert stored_points(s) == before
    (docs_tree / "new.md").write_text("# New\n\nnew text\n")
    with pytest.raises(PruneRefused, match="more than half"):
        run_backfill(s, tiny)
    assert stored_points(s) == before
    result = run_backfill(s, tiny, force=True)
    assert {p["doc_path"] for p in stored_points(s).values()} == {"new.md"}


def test_missing_root_refused(tmp_path, make_settings, tiny) -> None:
    s = make_settings(tmp_path / "nope")
    with pytest.raises(PruneRefused, match="not a folder"):
        run_backfill(s, tiny)


def test_edit_embeds_only_changed_chunks_and_moves_offsets(tmp_path, make_settings, tiny) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    sections = [f"## Part {i}\n\nThis is paragraph {i} about topic {i}.\n" for i in range(20)]
    (root / "big.md").write_text("# Big\n\n" + "\n".join(sections))
    s = make_settings(root)
    run_backfill(s, tiny)
    before = stored_points(s)
    assert len(before) == 21
    sections[3] = (
        "## Part 3\n\nThis paragraph was rewritten with quite a few more words than before.\n"
    )
    (root / "big.md").write_text("# Big\n\n" + "\n".join(sections))
    result = run_backfill(s, tiny)
    assert result["chunks_embedded"] == 1
    after = stored_points(s)
    assert len(after) == 21
    assert len(after.keys() - before.keys()) == 1 and len(before.keys() - after.keys()) == 1
    text = (root / "big.md").read_text()
    moved = [
        p
        for pid, p in after.items()
        if pid in before and p["char_start"] != before[pid]["char_start"]
    ]
    assert len(moved) == 16  # every chunk after the edit shifted
    for p in after.values():
        assert text[p["char_start"] : p["char_end"]] == p["text"]
        assert p["doc_hash"] == after[next(iter(after))]["doc_hash"]


def test_bad_input_keeps_old_points_and_reports(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree, max_file_bytes=10_000)
    run_backfill(s, tiny)
    before = {pid for pid, p in stored_points(s).items() if p["doc_path"] == "guide/b.md"}
    (docs_tree / "guide" / "b.md").write_bytes(b"# Beta\n\xff\xfe broken")
    (docs_tree / "nul.md").write_bytes(b"\x00\x01binary")
    (docs_tree / "huge.md").write_text("x" * 20_000)
    os.mkfifo(docs_tree / "pipe.md")
    (docs_tree / "loop.md").symlink_to(docs_tree / "loop.md")
    result = run_backfill(s, tiny)
    reasons = {e["path"]: e["reason"] for e in result["errors"]}
    assert "invalid UTF-8" in reasons["guide/b.md"]
    assert "NUL" in reasons["nul.md"]
    assert "max_file_bytes" in reasons["huge.md"]
    assert "not a regular file" in reasons["pipe.md"]
    assert "loop.md" not in reasons  # symlinks are skipped by rule unless followed
    assert result["files_failed"] == 4
    after = stored_points(s)
    assert before <= after.keys(), "a failed read must not lose indexed points"
    # following symlinks: loops and escapes are reported, links inside are indexed
    outside = docs_tree.parent / "outside.md"
    outside.write_text("# Outside\n\nsecret\n")
    (docs_tree / "escape.md").symlink_to(outside)
    (docs_tree / "inside.md").symlink_to(docs_tree / "index.md")
    s2 = settings_for(docs_tree.parent / "s2", [docs_tree], follow_symlinks=True)
    result = run_backfill(s2, tiny)
    reasons = {e["path"]: e["reason"] for e in result["errors"]}
    assert "loop" in reasons["loop.md"] and "outside" in reasons["escape.md"]
    assert any(p["doc_path"] == "inside.md" for p in stored_points(s2).values())
    assert all("secret" not in p["text"] for p in stored_points(s2).values())


def test_permission_denied_is_reported(docs_tree, make_settings, tiny) -> None:
    """Run without root's power to read anything, so this holds in CI too."""
    locked = docs_tree / "locked.md"
    locked.write_text("# Locked\n")
    locked.chmod(0)
    s = make_settings(docs_tree)
    try:
        result = unprivileged(lambda: run_backfill(s, TinyEmbedder()))
    finally:
        locked.chmod(0o644)
    assert {e["path"]: e["reason"] for e in result["errors"]}["locked.md"] == "permission denied"
    assert {p["doc_path"] for p in stored_points(s).values()} == {
        "index.md",
        "guide/a.md",
        "guide/b.md",
    }


def test_verify_detects_and_repairs_drift(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s)
    victim = sorted(before)[0]
    store = make_store(s).open()
    store.delete([victim])
    from mdindex.sinks import Point

    ghost = {"root": "docs", "doc_path": "ghost.md", "chunk_index": 0}
    store.upsert([Point("00000000-0000-4000-8000-000000000001", [1.0] + [0.0] * 31, ghost)])
    store.close()
    indexer = build_indexer(s, tiny)
    report = verify(indexer)
    indexer.close()
    assert [m["id"] for m in report.missing] == [victim]
    assert [e["id"] for e in report.stale] == ["00000000-0000-4000-8000-000000000001"]
    assert not report.in_sync
    repairing = TinyEmbedder()
    indexer = build_indexer(s, repairing)
    report = verify(indexer, repair=True)
    indexer.close()
    assert report.repaired
    # verify checks a sample of stored vectors against their text (here all of
    # them); then only the deleted chunk lost its vector: every other one was reused
    assert [len(c) for c in repairing.calls] == [len(before) - 1, 1]
    assert stored_points(s) == before
    indexer = build_indexer(s, tiny)
    assert verify(indexer).in_sync
    indexer.close()
    assert run_backfill(s, tiny)["points_upserted"] == 0


def test_dry_run_writes_nothing(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    result = run_backfill(s, tiny, dry_run=True)
    assert result["files_changed"] == 3 and result["chunks_embedded"] > 0
    assert tiny.texts_embedded == 0
    assert not make_store(s).open().exists()


def test_other_vector_size_is_refused(docs_tree, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    store = make_store(s).open()
    store.ensure_collection(7)
    store.close()
    with pytest.raises(StoreMismatch, match="7-d"):
        run_backfill(s, tiny)
    assert stored_points(s) == {}


def test_unreachable_server_retries_then_fails(
    docs_tree, make_settings, tiny, caplog, clock
) -> None:
    """On the retry loop's own clock: on a loaded machine (load 10) the first
    refused connection took the whole 1 s budget of the wall clock, so there
    was no retry to log."""
    s = make_settings(docs_tree, qdrant_url="http://127.0.0.1:9", retry_budget_s=1.0)
    with pytest.raises(StoreUnavailable, match="unreachable") as exc:
        run_backfill(s, tiny)
    assert exc.value.exit_code == 3
    assert "retry" in caplog.text and clock.sleeps
    assert "after" in str(exc.value) and "attempts" in str(exc.value)


def test_one_writer_per_state_dir(docs_tree, make_settings) -> None:
    s = make_settings(docs_tree)
    held = WriterLock(s.state_dir, s.collection, "watch")
    with held, pytest.raises(LockError, match=r"held by pid \d+ \(watch\)"):
        WriterLock(s.state_dir, s.collection, "backfill").acquire()
    WriterLock(s.state_dir, s.collection, "backfill").acquire().release()


@pytest.mark.model
def test_end_to_end_with_the_real_model(docs_tree, make_settings, real_embedder) -> None:
    s = make_settings(docs_tree)
    result = run_backfill(s, real_embedder)
    points = stored_points(s, vectors=True)
    assert result["chunks_embedded"] == len(points) > 0
    assert all(len(p["_vector"]) == 384 for p in points.values())
    assert all(p["token_count"] <= 254 for p in points.values())
    (docs_tree / "guide" / "a.md").rename(docs_tree / "guide" / "c.md")
    with open(docs_tree / "index.md", "a") as fh:
        fh.write("\n## Support\n\nWrite to the support team.\n")
    result = run_backfill(s, real_embedder)
    assert result["chunks_embedded"] == 1  # only the new section; the rename costs nothing
    indexer = build_indexer(s, real_embedder)
    try:
        indexer.open_store()
        hits = indexer.store.search(
            StoreQuery(1, dense=real_embedder.embed(["who do I contact for support"])[0])
        )
    finally:
        indexer.close()
    assert hits[0].payload["section"] == "Support"


def test_verify_lists_duplicates(docs_tree, make_settings, tiny) -> None:
    from mdindex.sinks import Point

    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    _pid, payload = sorted(before.items())[0]
    copy = {k: v for k, v in payload.items() if not k.startswith("_")}
    store = make_store(s).open()
    store.upsert([Point("00000000-0000-4000-8000-0000000000d2", payload["_vector"], copy)])
    store.close()
    indexer = build_indexer(s, tiny)
    report = verify(indexer, repair=True)
    indexer.close()
    assert [d["id"] for d in report.duplicates] == ["00000000-0000-4000-8000-0000000000d2"]
    assert not report.missing and not report.stale
    assert stored_points(s, vectors=True) == before


@pytest.mark.parametrize("pipelined", [False, True])
def test_pipelined_and_inline_runs_store_the_same(
    docs_tree, make_settings, tmp_path, pipelined: bool
) -> None:
    # two documents whose text repeats: in neighbouring groups it is embedded once
    (docs_tree / "guide" / "a2.md").write_text((docs_tree / "guide" / "a.md").read_text())
    s = make_settings(docs_tree)
    tiny = TinyEmbedder()
    # one group per document, so groups overlap in the pipeline
    indexer = build_indexer(s, tiny, group_docs=1)
    indexer.writer.pipelined = pipelined
    try:
        result = indexer.backfill().as_dict()
    finally:
        indexer.close()
    assert result["chunks_embedded"] == tiny.texts_embedded
    unique = {p["vector_key"] for p in stored_points(s).values()}
    assert tiny.texts_embedded == len(unique)
    assert stored_points(s) == fresh_copy(tmp_path, s, TinyEmbedder())


def test_an_edit_in_the_same_mtime_tick_is_not_missed(docs_tree, make_settings, tiny) -> None:
    """Same size, same mtime, other content: a coarse-timestamp filesystem, or an
    edit in the same tick as the scan (the racy-git case)."""
    s = make_settings(docs_tree)
    target = docs_tree / "guide" / "b.md"
    run_backfill(s, tiny)
    st = target.stat()
    target.write_text(target.read_text().replace("bananas", "papayas"))  # same length
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    again = run_backfill(s, tiny)
    assert again["files_changed"] == 1 and again["chunks_embedded"] == 1
    texts = [p["text"] for p in stored_points(s).values() if p["doc_path"] == "guide/b.md"]
    assert any("papayas" in t for t in texts) and not any("bananas" in t for t in texts)


def test_an_old_file_is_trusted_by_its_signature(docs_tree, make_settings) -> None:
    """The racy rule costs nothing for files not modified within 2 s of the scan."""
    old = 1_600_000_000
    for path in docs_tree.rglob("*.md"):
        os.utime(path, (old, old))
    s = make_settings(docs_tree)
    run_backfill(s, TinyEmbedder())
    indexer = build_indexer(s, TinyEmbedder())
    try:
        rows = indexer.state.docs()
        assert {r.mtime_ns for r in rows.values()} == {old * 10**9}
    finally:
        indexer.close()


@pytest.mark.model
def test_changed_title_re_embeds_exactly_its_chunks(tmp_path, make_settings, real_embedder) -> None:
    """With prepend_context the title is embedded but not part of a point's ID: a
    new title must not leave the old vectors in place."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text(
        "---\ntitle: Old title\n---\n\n## One\n\nFirst part.\n\n## Two\n\nSecond part.\n"
    )
    (root / "b.md").write_text("---\ntitle: Other\n---\n\n## Three\n\nUntouched part.\n")
    s = make_settings(root, prepend_context=True)
    run_backfill(s, real_embedder)
    before = stored_points(s, vectors=True)
    (root / "a.md").write_text((root / "a.md").read_text().replace("Old title", "New title"))
    result = run_backfill(s, real_embedder)
    assert result["chunks_embedded"] == 2 and result["files_changed"] == 1
    after = stored_points(s, vectors=True)
    assert before.keys() == after.keys()  # the IDs leave the title out
    for pid, point in after.items():
        if point["doc_path"] == "b.md":
            assert point["_vector"] == before[pid]["_vector"]
            continue
        assert point["title"] == "New title"
        want = real_embedder.embed([f"New title > {point['section']}\n\n{point['text']}"])[0]
        assert np.allclose(point["_vector"], want / np.linalg.norm(want), atol=1e-3)
    indexer = build_indexer(s, real_embedder)
    try:
        assert verify(indexer).in_sync
    finally:
        indexer.close()


def test_verify_finds_vectors_that_do_not_match_their_text(docs_tree, make_settings, tiny) -> None:
    """An index written before vector keys were checked: right key, wrong vector."""
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    victim = sorted(before)[0]
    store = make_store(s).open()
    payload = {k: v for k, v in before[victim].items() if not k.startswith("_")}
    store.upsert([Point(victim, tiny.vector("something else entirely").tolist(), payload)])
    store.close()
    indexer = build_indexer(s, tiny)
    try:
        report = verify(indexer)
        assert [(e["id"], e["reason"][:24]) for e in report.stale] == [
            (victim, "vector does not match it")
        ]
        assert verify(indexer, repair=True).repaired
    finally:
        indexer.close()
    assert stored_points(s, vectors=True)[victim]["_vector"] == pytest.approx(
        before[victim]["_vector"], abs=1e-6
    )


def test_verify_checks_every_sparse_vector_and_repair_rewrites_it(
    docs_tree, make_settings, tiny
) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    wrong, gone = sorted(before)[:2]
    store = make_store(s).open()
    for pid, sparse in ((wrong, Sparse([1, 2], [0.5, 0.5])), (gone, None)):
        payload = {k: v for k, v in before[pid].items() if not k.startswith("_")}
        store.upsert([Point(pid, before[pid]["_vector"], payload, sparse)])
    store.close()
    with build_indexer(s, tiny) as indexer:
        report = verify(indexer)
        assert sorted((e["id"], e["reason"]) for e in report.stale) == sorted(
            [(wrong, "sparse vector differs"), (gone, "sparse vector missing")]
        )
        assert verify(indexer, repair=True).repaired
        assert verify(indexer).in_sync
    assert_same(stored_points(s, vectors=True), before)


def test_reusable_vectors_check_the_stored_key(docs_tree, make_settings, tiny) -> None:
    from mdindex.index.vectors import reusable

    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    pid, point = sorted(stored_points(s, vectors=True).items())[0]
    store = make_store(s).open()
    try:
        assert reusable(store, {pid: "another key"}) == {}
        [(key, vector)] = reusable(store, {pid: point["vector_key"]}).items()
        assert key == point["vector_key"] and vector == pytest.approx(point["_vector"], abs=1e-5)
    finally:
        store.close()


def segment_tree(root: Path, n: int) -> None:
    root.mkdir()
    for i in range(n):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nword{i} stands alone in note {i}.\n")


def bounded_store(s) -> Any:
    """An edge store with tiny thresholds: a graph from 10 points, segments of 40."""
    return small_edge_store(s, segment_points=40)  # 5 KB of 32-d vectors


def test_a_backfill_builds_each_segment_as_its_writes_fill_it(tmp_path, make_settings) -> None:
    """Issue 37: the writes wait while each segment's graph is built, so no
    build takes every point; systemd hears from the run meanwhile."""
    from mdindex.index.indexer import Hooks
    from mdindex.sinks.edge.optimize import graphs

    segment_tree(tmp_path / "notes", 150)
    s = make_settings(tmp_path / "notes")
    pings: list[int] = []
    tiny = TinyEmbedder()
    hooks = Hooks(alive=lambda: pings.append(1))
    with build_indexer(s, tiny, store=bounded_store(s), group_docs=10, hooks=hooks) as indexer:
        summary = indexer.backfill()
        assert summary.points_upserted == 150 and not summary.interrupted
        shard = indexer.store.path  # type: ignore[attr-defined]
        assert graphs(shard) >= 3 and pings  # 40, 80 and 120 points: built as they filled
        for i in range(0, 150, 7):  # through the graphs as through a scan of every vector
            dense = tiny.vector(f"word{i} note {i}").tolist()
            graph, scan = (StoreQuery(3, dense=dense, exact=e) for e in (False, True))
            assert [h.id for h in indexer.store.search(graph)] == [
                h.id for h in indexer.store.search(scan)
            ]
    assert len(stored_points(s)) == 150


def test_a_stop_is_not_held_up_by_a_segments_build(tmp_path, make_settings) -> None:
    """The build gives way to a stop at once, and what was written stays."""
    from mdindex.index.indexer import Hooks
    from mdindex.sinks.edge.optimize import graphs

    segment_tree(tmp_path / "notes", 150)
    s = make_settings(tmp_path / "notes")
    building: list[int] = []
    hooks = Hooks(alive=lambda: building.append(1), stop_requested=lambda: bool(building))
    store = bounded_store(s)
    with build_indexer(s, TinyEmbedder(), store=store, group_docs=10, hooks=hooks) as indexer:
        summary = indexer.backfill()
        assert summary.interrupted and building
        assert graphs(store.path) == 0 and 40 <= store.count() < 150
    # the next run picks up the rest, and builds as it goes
    with build_indexer(s, TinyEmbedder(), store=bounded_store(s), group_docs=10) as indexer:
        summary = indexer.backfill()
        assert not summary.interrupted and graphs(store.path) >= 2
    assert len(stored_points(s)) == 150


def test_a_writer_leaves_the_stores_files_unknown_until_it_closes(
    tmp_path: Path, docs_tree: Path
) -> None:
    """From its open to its close a writer changes the store's files: the state
    records them as unknown meanwhile, so a writer killed in between leaves no
    record that a search could take as the files it found and move on
    (index.state.store_reopened), and the next run checks the store."""
    from mdindex.index.state import store_reopened
    from mdindex.runtime import state_path

    s = settings_for(tmp_path, [str(docs_tree)], store="edge")
    run_backfill(s, TinyEmbedder())
    with build_indexer(s, TinyEmbedder()) as indexer:
        found = indexer.store.signature()
        assert indexer.store_unchanged_since_last_run()
        indexer.open_store()
        assert indexer.state.get("store_signature") == ""
        store_reopened(state_path(s), found, "what a search left")  # as if killed now
        assert indexer.state.get("store_signature") == ""
        assert not indexer.store_unchanged_since_last_run()
    with build_indexer(s, TinyEmbedder()) as indexer:  # closed: recorded again
        assert indexer.store_unchanged_since_last_run()
