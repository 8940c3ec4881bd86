"""`mdindex status`: freshness with and without a daemon, and read-your-writes
with `--wait` against a real `mdindex watch` and the real model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mdindex.query.daemon import DaemonClient
from mdindex.query.status import offline_status
from mdindex.runtime import make_indexer, make_store
from tests.cli_helper import mdindex
from tests.conftest import TinyEmbedder, run_backfill, settings_for, stored_points
from tests.daemon.test_as_a_process import ENV, start, stop

pytestmark = [pytest.mark.model, pytest.mark.slow]  # mdindex as a process


def test_without_a_daemon_status_scans_and_reads_the_state(docs_tree: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path, [str(docs_tree)])
    (docs_tree / "bad.md").write_bytes(b"# Bad\n\xff\xfe\n")
    run_backfill(s, TinyEmbedder())
    status = offline_status(s)
    assert status["daemon"] is False and status["phase"] == "stopped"
    assert status["documents"] == 3 and status["files_seen"] == 4
    assert status["coverage"] == "3 of 4" and status["points"] > 0
    assert [(f["path"], "UTF-8" in f["reason"]) for f in status["failed"]] == [("bad.md", True)]
    assert status["pending"] == {"changed": 0, "deleted": 0} and status["caught_up"] is True

    (docs_tree / "new.md").write_text("# New\n\nNot indexed yet.\n")
    (docs_tree / "guide" / "b.md").unlink()
    status = offline_status(s)
    assert status["pending"] == {"changed": 1, "deleted": 1} and status["caught_up"] is False
    assert status["files_seen"] == 4 and status["documents"] == 3
    # a later sync that can read the file forgets its failure
    (docs_tree / "bad.md").write_text("# Fixed\n\nReadable now.\n")
    run_backfill(s, TinyEmbedder())
    status = offline_status(s)
    assert status["failed"] == [] and status["coverage"] == "4 of 4" and status["caught_up"]


def test_status_before_any_backfill_creates_nothing(
    docs_tree: Path, tmp_path: Path, engine: str
) -> None:
    """A mistyped --state-dir, or a first look before the first backfill:
    status said 0 documents and left an empty state file behind (and with the
    client engine, local mode's folder, lock and meta.json)."""
    typo = str(tmp_path / "typo" / "state")
    s = settings_for(tmp_path, [str(docs_tree)], state_dir=typo, store=engine)
    status = offline_status(s)
    assert status["documents"] == 0 and status["files_seen"] == 3 and status["points"] == 0
    assert status["pending"] == {"changed": 3, "deleted": 0} and status["caught_up"] is False
    assert status["reason"] == f"nothing indexed yet in {typo}"
    no_roots = offline_status(settings_for(tmp_path, [], state_dir=typo))
    assert no_roots["reason"].startswith("nothing indexed yet") and no_roots["documents"] == 0
    assert not (tmp_path / "typo").exists()
    # once a backfill made the state, status reads it as before
    run_backfill(s, TinyEmbedder())
    status = offline_status(s)
    assert status["documents"] == 3 and status["reason"] == "" and status["caught_up"] is True
    # the state alone gone, the store whole: status does not say nothing is indexed
    for file in (tmp_path / "typo" / "state").glob("*.sqlite3*"):
        file.unlink()
    status = offline_status(s)
    assert status["points"] > 0 and status["reason"] == (
        f"no local state in {typo}: the next sync rebuilds it from the store"
    )


def test_status_counts_from_the_state_while_the_store_is_as_the_last_run_left_it(
    docs_tree: Path, tmp_path: Path, engine: str
) -> None:
    """Offline status opened the store to count its points: 3.4 s and 0.9 GB of
    RSS at 1.09M points. While the store's files are as the last run left them
    the state's count is the store's, and status opens nothing (loading an edge
    shard rewrites some of its files, so its signature stays only unopened)."""
    s = settings_for(tmp_path, [str(docs_tree)], store=engine)
    run_backfill(s, TinyEmbedder())
    store = make_store(s)
    before = store.signature()
    status = offline_status(s)
    assert store.signature() == before
    with make_indexer(s, embedder=TinyEmbedder()) as indexer:
        opened = indexer.store_status()  # the store opened and asked
    assert opened["points"] == status["points"] == len(stored_points(s)) > 0
    assert {k: status[k] for k in opened} == opened
    # a point deleted behind the state's back: the store's count is shown
    victim = next(iter(stored_points(s)))
    store.open()
    store.delete([victim])
    store.close()
    assert offline_status(s)["points"] == opened["points"] - 1


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return mdindex(*args, env=ENV)


def caught_up(daemon: DaemonClient) -> dict[str, Any]:
    """/status once every earlier write is searchable (or 120 s passed), read
    for as long as the daemon may wait, as the CLI reads it (``IndexClient``):
    the client's default 30 s ran out first while a first start in the run
    measured the backends, and the test failed with TimeoutError."""
    return dict(daemon.ask("/status?wait=1&timeout=120", timeout=150))


def test_a_write_then_status_wait_then_search_finds_it_every_time(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "start.md").write_text("# Start\n\nThe first note.\n")
    (root / "broken.md").write_bytes(b"\xff\xfe broken")
    state = tmp_path / "state"
    proc, daemon = start(root, state, backend=None)  # it checks the measured choice
    try:
        status = caught_up(daemon)
        assert status["caught_up"] is True and status["phase"] == "watching", status
        assert status["coverage"] == "1 of 2" and status["queue_paths"] == 0
        assert [f["path"] for f in status["failed"]] == ["broken.md"]
        # the daemon says how it embeds and why: measured here, or read back
        embedding = status["embedding"]
        assert embedding["name"] in ("torch-fp32", "torch-bf16", "onnx-fp32"), embedding
        assert embedding["source"] in ("measured", "cache") and embedding["reason"]
        animals = ["otter", "heron", "badger", "lynx", "walrus", "gecko", "bison", "crane"]
        for i in range(20):
            animal = animals[i % len(animals)]
            note = root / f"note{i:02}.md"
            # no sleep: the next call must cover a write whose event may not have arrived
            note.write_text(
                f"# Field note {i}\n\nToday the {animal} number {i} crossed the river.\n"
            )
            if i % 5 == 0:  # the CLI, as a script would call it
                r = cli("status", "--wait", "--timeout", "120", "--state-dir", str(state), "--json")
                assert r.returncode == 0, r.stderr
                assert json.loads(r.stdout)["caught_up"] is True
            else:  # the same over HTTP
                assert caught_up(daemon)["caught_up"] is True
            hits = daemon.ask(f"/search?q=the+{animal}+number+{i}+crossed+the+river&k=3")
            assert hits[0]["doc_path"] == f"note{i:02}.md", (i, [h["doc_path"] for h in hits])
            assert f"number {i} crossed" in hits[0]["text"]
        status = daemon.ask("/status")
        assert status["documents"] == 21 and status["coverage"] == "21 of 22"

        # at the timeout: exit 4, with what is still waiting
        for j in range(40):
            (root / f"late{j:02}.md").write_text(f"# Late {j}\n\n" + "More words here. " * 200)
        r = cli("status", "--wait", "--timeout", "0", "--state-dir", str(state), "--json")
        assert r.returncode == 4, r.stderr
        late = json.loads(r.stdout)
        assert late["caught_up"] is False and "queue_paths" in late and "oldest_wait_s" in late
        r = cli("status", "--wait", "--timeout", "300", "--state-dir", str(state), "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["documents"] == 61
        r = cli("status", "--wait", "--timeout", "nan", "--state-dir", str(state))
        assert r.returncode == 2 and "--timeout" in r.stderr
    finally:
        code, _ = stop(proc)
    assert code == 0


def test_a_failed_file_named_with_an_escape_is_counted_once(tmp_path: Path) -> None:
    """Found by a hostile review: the state keeps a failed file's name escaped,
    the scan has it raw, so `status` listed a name with ESC twice."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "ok.md").write_text("# Ok\n\nFine.\n")
    (root / "bad\x1b[2J.md").write_bytes(b"# Bad\n\xff\xfe\x00\n")
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())
    failed = offline_status(s)["failed"]
    assert [f["path"] for f in failed] == ["bad\\x1b[2J.md"], failed


def test_status_wait_says_why_it_is_not_caught_up_and_sees_the_refusal_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Suspected in a hostile review and held: degraded by deletions the guard
    refused, `status --wait` exited 4 at once with nothing on stderr, and went
    on exiting 4 once the files were back, until the next whole rescan (10
    minutes), as a flush cannot tell that a refusal ended. The refused
    deletions are changes it cannot make, so it is not caught up (exit 4),
    and one line says why; once the root holds its files again, it is."""
    from mdindex.cli import main
    from tests.daemon.running import QUIET_MS, Running, wait_for

    root = tmp_path / "notes"
    root.mkdir()
    for name in "abc":
        (root / f"{name}.md").write_text(f"# {name}\n\nText {name}.\n")
    s = settings_for(tmp_path, [root], quiet_period_ms=QUIET_MS)
    run_backfill(s, TinyEmbedder())
    (root / "a.md").unlink()  # 2 of 3 gone while no daemon ran: the guard refuses
    (root / "b.md").unlink()
    d = Running(s, TinyEmbedder()).start()
    state = ["--state-dir", str(s.state_dir)]
    try:
        wait_for(lambda: d.daemon.phase == "degraded", 30, "deletions refused")
        (root / "fresh.md").write_text("# Fresh\n\nA fresh note about volcanoes.\n")
        capsys.readouterr()
        assert main(["status", "--wait", "--timeout", "30", "--json", *state]) == 4
        out, err = capsys.readouterr()
        assert json.loads(out)["caught_up"] is False
        said = [line for line in err.splitlines() if "status --wait" in line]  # the CLI's
        assert len(said) == 1 and "not caught up: deletions refused" in said[0], err
        assert said[0].startswith("mdindex: error: status --wait: not caught up: "), err
        assert "fresh.md" in {p["doc_path"] for p in d.points().values()}
        (root / "a.md").write_text("# a\n\nText a.\n")
        (root / "b.md").write_text("# b\n\nText b.\n")
        assert main(["status", "--wait", "--timeout", "30", "--json", *state]) == 0
        out, _ = capsys.readouterr()
        assert json.loads(out)["caught_up"] is True and d.daemon.phase == "watching"
    finally:
        d.stop()
