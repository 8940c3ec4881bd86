"""The daemon against a real watchdog observer on temporary folders and the real embedded Qdrant."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mdindex.runtime import collection_of
from tests.conftest import (
    TinyEmbedder,
    settings_for,
)
from tests.daemon.running import (
    QUIET_MS,
    Running,
    caught_up,
    converges,
    held,
    tcp_port,
    token_of,
    wait_for,
)

pytestmark = pytest.mark.slow  # running daemons waiting out quiet periods


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    (r / "sub" / "deep").mkdir(parents=True)
    (r / "a.md").write_text("# A\n\nAlpha apples.\n\n## Two\n\nMore apples here.\n")
    (r / "sub" / "b.md").write_text("# B\n\nBeta bananas.\n")
    (r / "sub" / "deep" / "c.md").write_text("# C\n\nCherries in the deep folder.\n")
    return r


@pytest.fixture
def daemon(tmp_path: Path, root: Path):
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, http_port=0)
    d = Running(s, TinyEmbedder()).start()
    yield d
    if d.thread.is_alive():
        d.stop()


def test_file_operations_converge(daemon: Running, root: Path, tmp_path: Path) -> None:
    d = daemon
    converges(d, tmp_path, root)
    # create and modify
    (root / "new.md").write_text("# New\n\nA new note.\n")
    with open(root / "a.md", "a") as fh:
        fh.write("\n## Three\n\nAppended section.\n")
    converges(d, tmp_path, root)
    # atomic save: write a temp file, then rename it over the target
    tmp = root / ".a.md.tmp123"
    tmp.write_text("# A\n\nAlpha apples, saved atomically.\n")
    os.replace(tmp, root / "a.md")
    converges(d, tmp_path, root)
    # vim-style save: rename to a backup, write the new file, drop the backup
    os.rename(root / "new.md", root / "new.md~")
    (root / "new.md").write_text("# New\n\nA new note, saved the vim way.\n")
    os.unlink(root / "new.md~")
    converges(d, tmp_path, root)
    # a rename costs no embedding
    before = d.embedder.texts_embedded
    os.rename(root / "sub" / "b.md", root / "sub" / "renamed.md")
    converges(d, tmp_path, root)
    assert d.embedder.texts_embedded == before
    # delete, move out, move in
    (root / "new.md").unlink()
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(str(root / "a.md"), str(outside / "a.md"))
    (outside / "in.md").write_text("# Incoming\n\nMoved in from outside.\n")
    shutil.move(str(outside / "in.md"), str(root / "in.md"))
    converges(d, tmp_path, root)
    # a directory rename covers its children, and reuses their vectors
    before = d.embedder.texts_embedded
    os.rename(root / "sub", root / "moved")
    converges(d, tmp_path, root)
    assert d.embedder.texts_embedded == before
    # new directories are watched
    (root / "fresh" / "dir").mkdir(parents=True)
    (root / "fresh" / "dir" / "x.md").write_text("# X\n\nIn a new folder.\n")
    converges(d, tmp_path, root)
    # a directory delete covers its children
    shutil.rmtree(root / "moved")
    converges(d, tmp_path, root)
    # editor debris is ignored
    for name in (".#a.md", "a.md~", ".a.md.swp", "4913"):
        (root / name).write_text("# Debris\n")
    assert d.daemon.status(wait=30)["caught_up"]  # every event before it handled
    assert all(p["doc_path"] not in (".#a.md", "a.md~") for p in d.points().values())


def test_burst_of_200_files_in_batches(daemon: Running, root: Path, tmp_path: Path) -> None:
    d = daemon
    converges(d, tmp_path, root)
    calls_before = len(d.embedder.calls)
    burst = root / "burst"
    burst.mkdir()
    for i in range(200):
        (burst / f"f{i:03}.md").write_text(f"# File {i}\n\nBurst file number {i}.\n")
    converges(d, tmp_path, root, timeout=60)
    calls = len(d.embedder.calls) - calls_before
    assert calls < 40, f"{calls} embedding calls for 200 files: not batched"
    # what is stored, whichever way the daemon took (batches, a rescan): every
    # file of the burst, with its own text
    texts = {p["doc_path"]: p["text"] for p in d.points().values()}
    for i in range(200):
        assert f"Burst file number {i}." in texts[f"burst/f{i:03}.md"]


def test_slow_writer_is_indexed_once_with_final_content(
    daemon: Running, root: Path, tmp_path: Path
) -> None:
    d = daemon
    converges(d, tmp_path, root)
    d.indexed.clear()
    # The debouncer's clock moves half a quiet period with each piece: on the
    # wall clock a loaded machine paused the writer a whole quiet period now and
    # then, and the half-written file was rightly taken as done. (An event late
    # to the debouncer cannot release the file early either: the file's size
    # moved since its last event.)
    debouncer = d.daemon.shared.debouncer
    now = [time.monotonic()]
    debouncer.clock = lambda: now[0]
    with open(root / "slow.md", "w") as fh:
        fh.write("# Slow\n\n")
        for i in range(12):
            fh.write(f"Piece {i} of a file written slowly.\n")
            fh.flush()
            time.sleep(QUIET_MS / 1000 / 2)
            now[0] += QUIET_MS / 1000 / 2
    debouncer.clock = time.monotonic  # never behind the writer's: it slept as long
    converges(d, tmp_path, root)
    # the store holds the points a moment before the commit that reports them
    wait_for(lambda: "slow.md" in d.indexed, 10, "slow.md reported indexed")
    d.daemon.status(wait=30)  # the barrier: nothing left to index
    assert d.indexed.count("slow.md") == 1
    texts = [p["text"] for p in d.points().values() if p["doc_path"] == "slow.md"]
    assert "Piece 11" in "".join(texts)


def test_a_move_due_on_one_end_first_costs_no_embedding(
    daemon: Running, root: Path, tmp_path: Path
) -> None:
    """A note saved, then renamed 1.9 s later while another file kept changing:
    its old path had waited the debouncer's max_wait (2 s) and went alone, so
    its points were deleted before the new path came, and it was embedded
    again. The debouncer's clock is the test's, as in the slow writer's test."""
    d = daemon
    converges(d, tmp_path, root)
    debouncer = d.daemon.shared.debouncer
    now = [time.monotonic()]
    debouncer.clock = lambda: now[0]

    def arrived(*paths: Path) -> None:
        wait_for(lambda: all(str(p) in debouncer.pending for p in paths), 10, "the events")

    old, new, busy = root / "sub" / "b.md", root / "sub" / "moved.md", root / "busy.md"
    before = d.embedder.texts_embedded
    old.write_text(old.read_text())  # saved, unchanged
    arrived(old)
    now[0] += 1.9
    os.rename(old, new)
    arrived(old, new)
    now[0] += 0.1
    busy.write_text("# Busy\n\nKept changing.\n")  # nothing is quiet yet
    arrived(busy)
    now[0] += 0.1  # the old path is due (quiet 0.2 s, waiting 2.1), the new one not
    wait_for(lambda: str(old) not in debouncer.pending, 10, "the old path released")
    assert str(new) not in debouncer.pending  # it went in the same batch
    debouncer.clock = time.monotonic
    converges(d, tmp_path, root)
    assert d.embedder.texts_embedded - before == 1  # busy.md's one chunk alone


def test_queue_overflow_and_dead_observer_trigger_rescans(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, queue_size=3)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        with held(d):  # a loop that took each event as it came never let the queue fill
            for i in range(30):  # far more events than the queue holds
                (root / f"over{i}.md").write_text(f"# Over {i}\n\noverflow {i}\n")
            wait_for(d.daemon.shared.watcher.overflowed.is_set, 10, "the queue overflowed")
        converges(d, tmp_path, root)
        assert d.daemon.shared.metrics.rescans._value.get() >= 1
        # the observer dies; a change made meanwhile is repaired by the rescan
        rescans = d.daemon.shared.metrics.rescans._value.get()
        d.daemon.shared.watcher.stop()
        (root / "a.md").write_text("# A\n\nChanged while nobody watched.\n")
        converges(d, tmp_path, root)
        assert d.daemon.shared.watcher.alive()
        assert d.daemon.shared.metrics.rescans._value.get() > rescans
    finally:
        d.stop()


def test_change_while_stopped_is_reconciled_on_start(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    converges(d, tmp_path, root)
    d.stop()
    (root / "a.md").write_text("# A\n\nEdited while the daemon was down.\n")
    (root / "sub" / "b.md").unlink()
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
    finally:
        d.stop()


def test_http_endpoints(daemon: Running, root: Path, tmp_path: Path) -> None:
    d = daemon
    converges(d, tmp_path, root)
    port = tcp_port(d)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token_of(d)}"}
    with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
        assert r.status == 200 and json.load(r)["status"] == "ok"
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        body = r.read().decode()
    for name in (
        "mdindex_documents 3.0",
        "mdindex_points",
        "mdindex_queue_depth",
        "mdindex_chunks_embedded_total",
        "mdindex_errors_total",
        "mdindex_last_sync_timestamp_seconds",
        "mdindex_save_to_indexed_seconds_bucket",
    ):
        assert name in body
    request = urllib.request.Request(base + "/search?q=bananas&k=2", headers=auth)
    with urllib.request.urlopen(request, timeout=10) as r:
        hits = json.load(r)
    assert hits[0]["doc_path"] == "sub/b.md" and "vector_key" not in hits[0]
    with urllib.request.urlopen(urllib.request.Request(base + "/status", headers=auth)) as r:
        status = json.load(r)
    assert status["documents"] == 3 and status["daemon"] is True


def test_regression_folder_moved_then_recreated(
    daemon: Running, root: Path, tmp_path: Path
) -> None:
    """Found by the state machine: watchdog loses track of a folder moved and recreated."""

    def write(p: Path, text: str) -> None:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    write(root / "y" / "z" / "b.md", "# T\n\n## beta\n\nbeta delta.\n")
    shutil.move(str(root / "y"), str(root / "x"))
    write(root / "notes.md", "# T\n\n## gamma\n\ngamma.\n")
    (root / "y" / "z").mkdir(parents=True)
    os.replace(root / "notes.md", root / "y" / "z" / "a.md")
    write(root / "x" / "notes.md", "# T\n\n## alpha\n\nalpha.\n")
    write(root / "notes.md", "# T\n\n## beta\n\nbeta.\n")
    shutil.move(str(root / "x"), str(root / "m"))
    os.replace(root / "notes.md", root / "y" / "z" / "c.md")
    converges(daemon, tmp_path, root)


def test_a_replaced_root_is_watched_anew_and_nothing_is_deleted_on_a_guess(
    tmp_path: Path, root: Path
) -> None:
    """Issue 23, defect 8: after `mv docs docs.bak; mkdir docs` the daemon still said
    "watching", an edit in docs.bak was logged as a removal, and a new file in the
    new docs waited for the 600 s rescan: the observer followed the moved inode."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        before = d.points()
        moved = root.with_name("notes.bak")
        os.rename(root, moved)
        root.mkdir()
        (moved / "a.md").write_text("# A\n\nEdited in the folder moved away.\n")
        (root / "new.md").write_text("# New\n\nWritten in the new folder.\n")
        wait_for(lambda: "new.md" in {p["doc_path"] for p in d.points().values()}, 10, "new.md")
        # new.md lands in the rescan the new folder asks for, before it records the refusal
        status = caught_up(d)
        assert status["phase"] == "degraded" and "another folder" in status["reason"]
        assert "notes" in status["reason"] and "--force" in status["reason"]
        kept = {k: p for k, p in d.points().items() if p["doc_path"] != "new.md"}
        assert kept == before  # nothing deleted, the edit in notes.bak not applied
        assert d.daemon.shared.watcher.alive()
        # events in the new folder are followed
        (root / "sub").mkdir()
        (root / "sub" / "later.md").write_text("# Later\n\nAnother note.\n")
        wait_for(
            lambda: "sub/later.md" in {p["doc_path"] for p in d.points().values()}, 10, "later"
        )
        # `mdindex backfill --force` through the daemon takes the new folder as it is
        assert d.daemon.request_reconcile(timeout=30, force=True)["files_deleted"] == 3
        converges(d, tmp_path, root)
        assert d.daemon.status()["phase"] == "watching"
    finally:
        d.stop()


def test_a_root_emptied_through_events_is_emptied(tmp_path: Path, root: Path) -> None:
    """Every file deleted, each with its event: the user's doing (an unmount
    sends no delete events; it replaces the root's folder, which the guard
    refuses), so the index follows and stays healthy."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        for path in sorted(root.rglob("*.md")):
            path.unlink()
        wait_for(lambda: not d.points(), 10, "the index emptied")
        assert d.daemon.phase == "watching" and not d.daemon.status()["reason"]
    finally:
        d.stop()


def test_the_daemon_reads_the_catalog_once_it_holds_the_lock(tmp_path: Path, root: Path) -> None:
    """Issue 23, defect 10: the daemon read the catalog before it took the writer
    lock; a backfill with other settings slipping in between made it recreate a
    dropped version empty, re-embed every document into it, and point the catalog
    back at it."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, keep_versions=0)
    run_backfill_rollout(s)
    tiny = TinyEmbedder()
    d = Running(s, tiny)  # made before the other backfill, started after it
    other = settings_for(tmp_path, [str(root)], keep_versions=0, sparse_vectors=False)
    run_backfill_rollout(other)
    d.start()
    try:
        wait_for(
            lambda: d.daemon.shared.builds.serving == d.daemon.shared.rollout.target(),
            30,
            "the switch back",
        )
        converges(d, tmp_path, root)
        # built beside the other version from its vectors, not re-embedded into an empty store
        assert tiny.texts_embedded == 0
        path = s.state_dir / "mdindex.versions.json"
        wait_for(lambda: len(json.loads(path.read_text())["versions"]) == 1, 30, "the drop")
        catalog = json.loads(path.read_text())
        assert list(catalog["versions"]) == [catalog["live"]] == [d.daemon.shared.builds.serving]
        assert [p.name for p in (s.state_dir / "edge").iterdir()] == [collection_of(s)]
    finally:
        d.stop()


def run_backfill_rollout(settings: Any) -> None:
    from tests.conftest import run_rollout

    run_rollout(settings, TinyEmbedder())


def test_notes_deleted_by_the_user_go_and_a_rescan_guards_the_rest(tmp_path: Path) -> None:
    """File events are the kernel's word that a path is gone: notes deleted one
    at a time, or a whole folder of them, leave the index with no refusal (the
    count rules are for scans, which cannot tell deleted from unreachable).
    A rescan that would lose more than half of what is left is refused."""
    root = tmp_path / "notes"
    (root / "old").mkdir(parents=True)
    for i in range(10):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nThe note number {i}.\n")
        (root / "old" / f"o{i}.md").write_text(f"# Old {i}\n\nAn old note {i}.\n")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        for i in range(8):
            (root / f"n{i}.md").unlink()
            time.sleep(QUIET_MS / 1000 * 3)  # each its own batch
        rescans = d.daemon.shared.metrics.rescans._value.get()
        shutil.rmtree(root / "old")  # more than half of what is left, at once
        converges(d, tmp_path, root)
        assert {p["doc_path"] for p in d.points().values()} == {"n8.md", "n9.md"}
        # a folder's event asks for a rescan (Timings.dir_rescan_delay_s on): the
        # phase read while it ran said "reconciling"; once it is over it refused nothing
        wait_for(lambda: d.daemon.shared.metrics.rescans._value.get() > rescans, 30, "rescan")
        caught_up(d)
        assert d.daemon.phase == "watching" and not d.daemon.status()["reason"]
        # files that vanish without an event (a scan finds them gone) are a guess;
        # the daemon restarts a stopped observer on its next tick, and a restart
        # between the two unlinks would report n8 as an event (CI saw it), so the
        # stopped observer is made to look alive until the rescan is done
        watcher = d.daemon.shared.watcher
        watcher.alive = lambda: True  # type: ignore[method-assign]
        watcher.stop()
        (root / "n8.md").unlink()
        (root / "n9.md").unlink()
        d.daemon.shared.watcher.overflowed.set()  # a rescan
        wait_for(lambda: d.daemon.phase == "degraded", 10, "degraded")
        assert "no markdown files" in d.daemon.status()["reason"]
        assert {p["doc_path"] for p in d.points().values()} == {"n8.md", "n9.md"}
    finally:
        d.stop()


def test_a_missing_root_does_not_hold_the_others(tmp_path: Path, root: Path) -> None:
    """Found by the hostile review: with one root missing, the daemon refused to
    start, and a root gone while it ran stopped every rescan of the others."""
    other = tmp_path / "later"
    other.mkdir()
    (other / "x.md").write_text("# X\n\nIn the second root.\n")
    s = settings_for(tmp_path, [str(root), str(other)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        wait_for(lambda: len(d.points()) >= 5, 30, "both roots indexed")
        os.rename(other, tmp_path / "later.unmounted")
        wait_for(lambda: d.daemon.phase == "degraded", 10, "degraded")
        assert "later" in d.daemon.status()["reason"]
        (root / "new.md").write_text("# New\n\nStill indexed beside a missing root.\n")
        wait_for(lambda: "new.md" in {p["doc_path"] for p in d.points().values()}, 10, "new")
        d.daemon.shared.watcher.overflowed.set()  # a rescan indexes the rest and keeps x.md
        d.daemon.status(wait=30)  # the barrier: the rescan ran
        docs = {(p["root"], p["doc_path"]) for p in d.points().values()}
        assert ("later", "x.md") in docs and ("notes", "new.md") in docs
    finally:
        d.stop()
    # and a daemon started while it is missing indexes the rest
    (root / "newer.md").write_text("# Newer\n\nWritten while stopped.\n")
    d = Running(s, TinyEmbedder()).start()
    try:
        wait_for(lambda: "newer.md" in {p["doc_path"] for p in d.points().values()}, 30, "newer")
        assert ("later", "x.md") in {(p["root"], p["doc_path"]) for p in d.points().values()}
        # newer.md is written during the startup scan, which names the missing root when it ends
        wait_for(lambda: d.daemon.phase == "degraded", 10, "degraded")
        assert "later" in d.daemon.status()["reason"]
    finally:
        d.stop()
