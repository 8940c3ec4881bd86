"""Crash at every named point, under backfill and under watch, then converge on restart."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mdindex.index.writer import CRASH_ENV, CRASH_POINTS, ROLLOUT_CRASH_POINTS
from mdindex.runtime import make_store, state_path, version_of
from mdindex.versions.catalog import Catalog, reader_settings
from tests.conftest import (
    CORPUS,
    TinyEmbedder,
    assert_same,
    build_indexer,
    rollout_for,
    run_backfill,
    run_rollout,
    settings_for,
    stored_points,
)
from tests.daemon.running import Running, converges
from tests.faults.helpers import (
    LONG,
    fork,
    fresh_points,
    kill_at_random,
    make_tree,
    mutate,
    wait,
)

# slow: forked children, kill -9, daemons
pytestmark = [pytest.mark.usefixtures("engine"), pytest.mark.slow]

CRASHED = 86  # what crash_point() exits with


@pytest.mark.parametrize("nth", [1, 3])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_backfill_crash_then_rerun_converges(tmp_path: Path, point: str, nth: int) -> None:
    root = make_tree(tmp_path / "docs")
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())
    mutate(root)

    def crashing_backfill() -> None:
        os.environ[CRASH_ENV] = f"{point}@{nth}"
        # a group per document, so @3 lands mid-run
        indexer = build_indexer(s, TinyEmbedder(), group_docs=1)
        indexer.backfill()

    assert wait(fork(crashing_backfill)) == CRASHED
    tiny = TinyEmbedder()
    rerun = run_backfill(s, tiny)
    assert rerun["errors"] == []
    want = fresh_points(tmp_path, root)
    assert_same(stored_points(s, vectors=True), want)
    # the re-run embedded only what the crashed run had not already stored
    assert tiny.texts_embedded <= len({p["vector_key"] for p in want.values()})
    assert run_backfill(s, TinyEmbedder())["points_upserted"] == 0


def test_a_vector_only_a_crashed_write_stored_is_reused(tmp_path: Path) -> None:
    """A write that died after its upsert left vectors only pending points hold;
    another document with the same text, read before that write is redone,
    takes them from the store instead of embedding them again."""
    root = tmp_path / "docs"
    root.mkdir()
    text = "# Same\n\nThe very same paragraph, in two files.\n"
    (root / "a.md").write_text(text)
    (root / "b.md").write_text(text)
    s = settings_for(tmp_path, [str(root)])

    def crashing_backfill() -> None:
        os.environ[CRASH_ENV] = "after_upsert@1"  # a.md upserted, b.md not yet
        build_indexer(s, TinyEmbedder(), group_docs=1).backfill()

    assert wait(fork(crashing_backfill)) == CRASHED
    held = {p["vector_key"] for p in stored_points(s).values()}
    tiny = TinyEmbedder()
    with build_indexer(s, tiny, group_docs=1) as indexer:
        summary = indexer.backfill()
    want = fresh_points(tmp_path, root)
    assert_same(stored_points(s, vectors=True), want)
    assert {p["vector_key"] for p in want.values()} == held
    assert summary.chunks_embedded == 0 and tiny.texts_embedded == 0


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_watch_crash_then_restart_converges(tmp_path: Path, point: str) -> None:
    root = make_tree(tmp_path / "docs")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=100, http_port=0)
    run_backfill(s, TinyEmbedder())
    ready = tmp_path / "ready"

    def crashing_watch() -> None:
        os.environ[CRASH_ENV] = point
        d = Running(s, TinyEmbedder()).start()
        ready.write_text("1")
        d.thread.join(120)  # the crash point ends the whole process

    pid = fork(crashing_watch)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "watch child did not start"
        time.sleep(0.05)
    mutate(root)
    assert wait(pid) == CRASHED
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
    finally:
        d.stop()


def test_kill_9_at_random_moments_then_one_clean_run(tmp_path: Path) -> None:
    """SIGKILL a backfill of a real corpus at random moments; a clean run then converges."""
    root = CORPUS if CORPUS.is_dir() else make_tree(tmp_path / "docs", docs=300)
    s = settings_for(tmp_path, [str(root)])
    rng = random.Random(20261130)
    # 20 moments in CI (each about 4 s); MDINDEX_FAULTS=long tries 100
    runs = 100 if LONG else 20
    killed = 0
    for _ in range(runs):
        killed += kill_at_random(lambda: run_backfill(s, TinyEmbedder()), rng, 2.5)
    held = {p["vector_key"] for p in stored_points(s).values()}
    tiny = TinyEmbedder()
    result = run_backfill(s, tiny)
    want = fresh_points(tmp_path, root)
    assert_same(stored_points(s, vectors=True), want)
    needed = {p["vector_key"] for p in want.values()}
    assert result["chunks_embedded"] == len(needed - held), "re-embedded chunks the store held"
    assert killed >= runs // 2
    print(f"kill -9 runs: {killed} of {runs}; clean run embedded {result['chunks_embedded']}")


def assert_live_is_complete(settings: Any, wanted: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The catalog's live version is complete and holds exactly what a fresh
    build of its settings holds: a search at this moment finds everything."""
    catalog = Catalog.load(settings)
    assert catalog.live is not None
    assert catalog.versions[catalog.live].status == "complete"
    live = reader_settings(settings)
    assert_same(stored_points(live, vectors=True), wanted[catalog.live])
    store = make_store(live)
    try:  # where there are aliases (client), the alias names a complete version
        named = store.open().alias_target(settings.collection)
    finally:
        store.close()
    if named is not None:
        complete = {v.collection for v in catalog.versions.values() if v.status == "complete"}
        assert named in complete
    return catalog.live


@pytest.mark.parametrize("point", ["after_upsert@2", "after_commit@2", *ROLLOUT_CRASH_POINTS])
def test_version_switch_crash_then_rerun_converges(tmp_path: Path, point: str) -> None:
    """A build, the switch and the drop of the old version, killed at each point:
    the live version is complete at every moment, and a re-run finishes the job."""
    root = make_tree(tmp_path / "docs")
    old = settings_for(tmp_path, [str(root)], keep_versions=0)
    new = settings_for(tmp_path, [str(root)], keep_versions=0, strategy="token")
    wanted = {
        version_of(old): fresh_points(tmp_path, root),
        version_of(new): fresh_points(tmp_path, root, strategy="token"),
    }
    run_rollout(old, TinyEmbedder())

    def crashing_rollout() -> None:
        os.environ[CRASH_ENV] = point
        rollout_for(new, TinyEmbedder(), group_docs=1).backfill()

    assert wait(fork(crashing_rollout)) == CRASHED
    live = assert_live_is_complete(new, wanted)
    switched = point in ("after_switch", "during_drop")
    assert live == (version_of(new) if switched else version_of(old))
    tiny = TinyEmbedder()
    rerun = run_rollout(new, tiny)
    assert rerun["errors"] == []
    assert assert_live_is_complete(new, wanted) == version_of(new)
    # the old version is gone (keep_versions = 0), its collection and state too
    assert list(Catalog.load(new).versions) == [version_of(new)]
    assert stored_points(old) == {} and not state_path(old).exists()
    # the re-run embedded only what the crashed run had not stored
    assert tiny.texts_embedded <= len({p["vector_key"] for p in wanted[version_of(new)].values()})
    assert run_rollout(new, TinyEmbedder())["points_upserted"] == 0


def test_kill_9_during_version_switches_never_leaves_an_incomplete_live_version(
    tmp_path: Path,
) -> None:
    """SIGKILL backfills that alternate between two settings at random moments:
    after every kill the live version is complete; a clean run then converges."""
    root = make_tree(tmp_path / "docs", docs=150)
    pair = [
        settings_for(tmp_path, [str(root)]),
        settings_for(tmp_path, [str(root)], strategy="token"),
    ]
    wanted = {
        version_of(pair[0]): fresh_points(tmp_path, root),
        version_of(pair[1]): fresh_points(tmp_path, root, strategy="token"),
    }
    run_rollout(pair[0], TinyEmbedder())
    rng = random.Random(20261201)
    runs = 100 if LONG else 20
    killed = 0
    for i in range(runs):
        s = pair[(i + 1) % 2]
        killed += kill_at_random(
            lambda s=s: rollout_for(s, TinyEmbedder(), group_docs=8).backfill(), rng, 1.5
        )
        assert_live_is_complete(s, wanted)
    final = pair[runs % 2]
    run_rollout(final, TinyEmbedder())
    assert assert_live_is_complete(final, wanted) == version_of(final)
    assert killed >= runs // 2
    print(f"kill -9 during switches: {killed} of {runs}")


@pytest.mark.parametrize("damage", ["delete", "truncate-empty", "truncate-half", "garbage", "wal"])
def test_lost_or_corrupt_state_repairs_without_embedding(tmp_path: Path, damage: str) -> None:
    root = make_tree(tmp_path / "docs")
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())
    mutate(root)
    db = state_path(s)
    if damage == "delete":
        db.unlink()
    elif damage == "truncate-empty":
        db.write_bytes(b"")
    elif damage == "truncate-half":
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        db.write_bytes(os.urandom(8192))
    else:
        Path(str(db) + "-wal").write_bytes(os.urandom(4096))
    held = {p["vector_key"] for p in stored_points(s).values()}
    tiny = TinyEmbedder()
    run_backfill(s, tiny)
    want = fresh_points(tmp_path, root)
    assert_same(stored_points(s, vectors=True), want)
    # only the chunks the edit created were embedded; everything else came from the store
    assert tiny.texts_embedded == len({p["vector_key"] for p in want.values()} - held) == 3


@pytest.mark.serial
def test_daemon_stop_is_quick_even_mid_burst(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "docs", docs=2)
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=50)
    d = Running(s, TinyEmbedder()).start()
    stop_at = threading.Event()

    def burst() -> None:
        for i in range(300):
            (root / f"b{i}.md").write_text(f"# B{i}\n\n" + "words " * 400)
            if i == 150:
                stop_at.set()

    t = threading.Thread(target=burst)
    t.start()
    stop_at.wait(30)
    seconds = d.stop(timeout=10)
    t.join()
    assert d.exit_code == 0 and seconds < 10
    run_backfill(s, TinyEmbedder())
    assert_same(stored_points(s, vectors=True), fresh_points(tmp_path, root))


@pytest.mark.model
def test_real_process_crash_then_rerun_with_the_real_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The crash point as a user would meet it: a real `mdindex backfill` process
    dies. The runs before and after it are main() here: what they print is
    checked, and a spawn cost 1.4 s of CPU."""
    import json

    from tests.cli_helper import in_process, mdindex

    root = make_tree(tmp_path / "docs", docs=6)
    state = ["--state-dir", str(tmp_path / "state")]
    assert in_process(capsys, "backfill", str(root), *state).returncode == 0
    mutate(root)
    crash = {"MDINDEX_CRASH_POINT": "after_upsert"}
    crashed = mdindex("backfill", str(root), *state, env=crash)
    assert crashed.returncode == CRASHED, crashed.stderr
    rerun = in_process(capsys, "backfill", str(root), *state, "--json")
    assert rerun.returncode == 0, rerun.stderr
    # the crashed run had stored the new chunks' vectors: nothing is embedded again
    assert json.loads(rerun.stdout)["chunks_embedded"] == 0
    check = in_process(capsys, "verify", str(root), *state, "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["in_sync"] is True
