"""`mdindex watch` as a real process with default settings: SIGTERM mid-burst, restart, and
the CLI of other processes going through its socket."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mdindex.index.lock import lock_path, read_holder
from mdindex.query.daemon import DaemonClient, find_daemon
from tests.cli_helper import ONNX, mdindex, spawn
from tests.conftest import TinyEmbedder, run_backfill, settings_for, stored_points

pytestmark = [pytest.mark.model, pytest.mark.slow]  # mdindex watch as a process

# on top of the ONNX export cli_helper gives every spawn
ENV = {"MDINDEX_QUIET_PERIOD_MS": "100", "MDINDEX_LOG_LEVEL": "WARNING"}


def start(
    root: Path, state: Path, backend: str | None = ONNX
) -> tuple[subprocess.Popen[bytes], DaemonClient]:
    """The daemon with no HTTP setting at all, and how other commands reach it
    (``backend`` as cli_helper takes it)."""
    proc = spawn("watch", root, "--state-dir", state, env=ENV, backend=backend)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "daemon exited during start-up"
        holder = read_holder(lock_path(state, "mdindex"))
        if holder and holder.get("socket"):
            found = find_daemon(settings_for(state.parent, [str(root)], state_dir=str(state)))
            assert found is not None and found.socket and not found.url
            return proc, found
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("daemon did not start")


# `mdindex status --wait` as the client asks it: once every change made before is searchable
CAUGHT_UP = "/status?wait=1&timeout=60"


def stop(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    return code, time.monotonic() - t


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return mdindex(*args, env=ENV)


@pytest.mark.serial
def test_sigterm_mid_burst_then_restart_converges(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "start.md").write_text("# Start\n\nThe first note.\n")
    state = tmp_path / "state"
    proc, daemon = start(root, state)
    deadline = time.monotonic() + 60
    # the product's barrier (`status --wait`), not a poll
    while daemon.ask(CAUGHT_UP, timeout=90)["points"] < 1:
        assert time.monotonic() < deadline
    for i in range(200):
        (root / f"burst{i:03}.md").write_text(
            f"# Burst {i}\n\nNote {i} of a burst, about topic {i % 7}.\n\n## More\n\nDetail {i}.\n"
        )
    time.sleep(1.5)  # the burst is being indexed now
    code, seconds = stop(proc)
    assert code == 0 and seconds < 10, (code, seconds)

    fresh = settings_for(tmp_path / "fresh", [str(root)])
    run_backfill(fresh, TinyEmbedder())
    want = stored_points(fresh)

    proc, daemon = start(root, state)
    try:
        deadline = time.monotonic() + 180
        while True:
            status = daemon.ask(CAUGHT_UP, timeout=90)
            if status["points"] == len(want) and status["queue_paths"] == 0:
                break
            assert time.monotonic() < deadline, status
        # while the daemon holds the store, the other commands go through it
        r = cli("status", "--state-dir", str(state), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["daemon"] is True
        r = cli("search", "note about topic 3", "--state-dir", str(state), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)[0]["doc_path"].startswith("burst")
        r = cli("backfill", str(root), "--state-dir", str(state), "--json")
        assert r.returncode == 0, r.stderr
        summary = json.loads(r.stdout)
        assert summary["files_seen"] == 201 and summary["chunks_embedded"] == 0
        r = cli("backfill", str(root), "--state-dir", str(state), "--dry-run")
        assert r.returncode == 2 and "daemon" in r.stderr
    finally:
        code, seconds = stop(proc)
    assert code == 0 and seconds < 10
    assert stored_points(settings_for(tmp_path, [str(root)])) == want


def test_clients_started_with_the_daemon_wait_for_it(tmp_path: Path) -> None:
    """Issue 23, defect 15: `mdindex watch docs` in one terminal, then at once `mdindex
    status --wait` in another: while the daemon loaded its model, status exited 3
    ("still starting") and search errored the same way."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    state = tmp_path / "state"
    assert cli("backfill", str(root), "--state-dir", str(state)).returncode == 0
    (root / "beavers.md").write_text("# Beavers\n\nBeavers build dams from birch.\n")
    proc = spawn("watch", root, "--state-dir", state, env=ENV)
    try:
        common = ["--state-dir", str(state), "--json"]

        def run(*args: str) -> subprocess.Popen[str]:
            pipe = subprocess.PIPE
            return spawn(*args, *common, stdout=pipe, stderr=pipe, text=True, env=ENV)

        # both at once, while the daemon starts and loads its model
        search = run("search", "sleeping otters", "-k", "1")
        status = run("status", "--wait", "--timeout", "120")
        out, err = search.communicate(timeout=300)
        assert search.returncode == 0, err
        assert json.loads(out)[0]["doc_path"] == "otters.md"
        out, err = status.communicate(timeout=300)
        assert status.returncode == 0, err
        data = json.loads(out)
        assert data["caught_up"] is True and data["daemon"] is True and data["documents"] == 2
    finally:
        code, _ = stop(proc)
    assert code == 0
