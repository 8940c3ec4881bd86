"""Store faults: the embedded store turns read-only mid-run, a server is unreachable.

The read-only store is real: the command runs in its own mount namespace
(unshare) with the store folder bind-mounted, and the test remounts that
bind read-only (nsenter) while the run is writing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mdindex.index.lock import lock_path, read_holder
from mdindex.query.daemon import find_daemon
from mdindex.runtime import state_path
from tests.cli_helper import command, environment, mdindex, spawn
from tests.conftest import TinyEmbedder, run_backfill, settings_for, stored_points
from tests.daemon.running import Running, tcp_port, wait_for
from tests.faults.helpers import fresh_points, make_tree

# slow: mdindex as a process in mount namespaces
pytestmark = [pytest.mark.usefixtures("engine"), pytest.mark.slow]
# read when each CLI starts (cli_helper): the engine is the test's
RETRY = {"MDINDEX_RETRY_BUDGET_S": "3"}


def _can_make_namespaces() -> bool:
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


namespaces = pytest.mark.skipif(
    not _can_make_namespaces(), reason="needs root with unshare and nsenter (mount namespaces)"
)


def in_namespace(store: Path, *args: str, mode: str = "rw") -> list[str]:
    """`mdindex ARGS` in a private mount namespace where ``store`` is a bind mount."""
    script = f'mount --bind -o {mode} "{store}" "{store}" && exec "$0" "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *command(*args)]


def remount(pid: int, store: Path, mode: str) -> None:
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "mount", "-o", f"remount,{mode},bind", str(store)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def docs_committed(state_db: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{state_db}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT count(*) FROM docs").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def assert_state_never_ahead_of_store(settings) -> None:
    """Every document the state records as done has all its points in the store."""
    db = sqlite3.connect(state_path(settings))
    rows = db.execute(
        "SELECT p.id FROM points p JOIN docs d ON p.root=d.root AND p.path=d.path WHERE p.pending=0"
    ).fetchall()
    db.close()
    stored = stored_points(settings)
    missing = [pid for (pid,) in rows if pid not in stored]
    assert not missing, f"{len(missing)} points recorded as done but not in the store"


@namespaces
@pytest.mark.model
def test_backfill_store_read_only(tmp_path: Path, real_embedder) -> None:
    root = make_tree(tmp_path / "docs", docs=4)
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, real_embedder)
    (root / "more.md").write_text("# More\n\nA document the read-only store cannot take.\n")
    before = docs_committed(state_path(s))
    done = subprocess.run(
        in_namespace(
            s.store_path, "backfill", str(root), "--state-dir", str(s.state_dir), mode="ro"
        ),
        env=environment(RETRY),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr
    assert "read-only" in done.stderr.lower() or "readonly" in done.stderr.lower()
    assert docs_committed(state_path(s)) == before
    assert_state_never_ahead_of_store(s)


@namespaces
@pytest.mark.model
def test_backfill_store_full_mid_run(tmp_path: Path, real_embedder) -> None:
    """The store's disk fills up mid-run: retries, exit 3, nothing recorded that was not written."""
    root = make_tree(tmp_path / "docs", docs=4)
    store = tmp_path / "store"
    s = settings_for(tmp_path, [str(root)], qdrant_path=str(store))
    run_backfill(s, real_embedder)
    for i in range(600):  # about ten groups: the disk fills after the first
        (root / f"more{i:03}.md").write_text(f"# More {i}\n\nExtra document {i} with its text.\n")
    aside = tmp_path / "aside"
    # Edge's WAL and segment files take about 100 MB up front.
    size_mb = 256 if s.store == "edge" else 64
    # In a private namespace the store moves onto a small tmpfs; whatever the
    # run leaves there is copied back before the namespace goes away.
    script = (
        f'cp -a "{store}" "{aside}" && mount -t tmpfs -o size={size_mb}m tmpfs "{store}" && '
        f'cp -a "{aside}/." "{store}/" && "$0" "$@"; rc=$?; '
        f'rm -f "{store}/filler"; cp -a "{store}/." "{aside}/"; exit $rc'
    )
    cmd = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        *command("backfill", root, "--state-dir", s.state_dir, "--qdrant-path", store),
    ]
    before = docs_committed(state_path(s))
    proc = subprocess.Popen(cmd, env=environment(RETRY), stderr=subprocess.PIPE, text=True)
    backfill = ""
    try:
        deadline = time.monotonic() + 180
        while docs_committed(state_path(s)) <= before:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.05)
        # The backfill (the shell's child) is stopped while the disk fills: its
        # model embeds ahead of the writer, so the groups after the first were
        # written within the fill's second once (a .ci/run exited 0).
        [backfill] = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(backfill), signal.SIGSTOP)
        assert docs_committed(state_path(s)) < before + 600  # a group is left to write
        fill = subprocess.run(
            [
                "nsenter",
                "-t",
                str(proc.pid),
                "-m",
                "sh",
                "-c",
                f'dd if=/dev/zero of="{store}/filler" bs=1M count={size_mb} 2>/dev/null; true',
            ],
            capture_output=True,
            timeout=60,
        )
        assert fill.returncode == 0
        os.kill(int(backfill), signal.SIGCONT)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            if backfill:  # stopped, it would outlive the shell
                os.kill(int(backfill), signal.SIGKILL)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, err
    assert "refusing writes" in err and "full" in err.lower() and "retry" in err
    shutil.rmtree(store)
    aside.rename(store)  # what the run had written, back in place
    assert docs_committed(state_path(s)) > before
    assert_state_never_ahead_of_store(s)
    run_backfill(s, real_embedder)
    # the real model wrote these: payloads are compared, its vectors are its own
    assert stored_points(s) == fresh_points(tmp_path, root, vectors=False)


@namespaces
@pytest.mark.model
def test_watch_store_read_only_then_writable(tmp_path: Path, real_embedder) -> None:
    root = make_tree(tmp_path / "docs", docs=4)
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, real_embedder)
    store = s.store_path
    watch_env = {
        **RETRY,
        "MDINDEX_HTTP_PORT": "0",
        "MDINDEX_QUIET_PERIOD_MS": "100",
        "MDINDEX_LOG_LEVEL": "WARNING",
    }
    proc = subprocess.Popen(
        in_namespace(store, "watch", str(root), "--state-dir", str(s.state_dir), mode="ro"),
        env=environment(watch_env),
    )
    try:
        base = ""
        deadline = time.monotonic() + 120
        while not base:
            holder = read_holder(lock_path(s.state_dir, s.collection))
            if holder and holder.get("http_port"):
                base = f"http://127.0.0.1:{holder['http_port']}"
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)

        def health() -> int:
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as exc:
                return exc.code

        (root / "during.md").write_text("# During\n\nWritten while the store was read-only.\n")
        wait_for(lambda: health() == 503, 60, "unhealthy while read-only")
        daemon = find_daemon(s)
        assert daemon is not None
        assert daemon.ask("/status")["healthy"] is False
        remount(proc.pid, store, "rw")
        wait_for(lambda: health() == 200, 60, "healthy again")
        wait_for(
            lambda: daemon.ask("/status")["documents"] == 5,
            60,
            "the file written meanwhile indexed",
        )
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    # the real model wrote these: payloads are compared, its vectors are its own
    assert stored_points(s) == fresh_points(tmp_path, root, vectors=False)


@pytest.mark.serial
def test_watch_with_unreachable_server_keeps_retrying(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "docs", docs=2)
    s = settings_for(
        tmp_path, [str(root)], qdrant_url="http://127.0.0.1:9", retry_budget_s=0.3, http_port=0
    )
    d = Running(s, TinyEmbedder()).start()
    try:
        url = f"http://127.0.0.1:{tcp_port(d)}/healthz"
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(url, timeout=10)
        assert exc.value.code == 503
        body = json.loads(exc.value.read().decode())
        assert body["status"] == "unhealthy" and "unreachable" in body["reason"]
        errors = d.daemon.shared.metrics.errors._value.get()
        (root / "x.md").write_text("# X\n\nwhile the server is down\n")
        wait_for(lambda: d.daemon.shared.metrics.errors._value.get() > errors, 30, "another retry")
        assert d.thread.is_alive()
        assert d.daemon.indexer.state.doc_count() == 0  # nothing recorded as done
    finally:
        assert d.stop() < 10
    assert d.exit_code == 0


def _can_chattr() -> bool:
    if os.geteuid() != 0 or not shutil.which("chattr"):
        return False
    probe = subprocess.run(["chattr", "-i", str(Path(__file__).parent)], capture_output=True)
    return probe.returncode == 0


def immutable(folder: Path, on: bool) -> None:
    subprocess.run(["chattr", "-R", "+i" if on else "-i", str(folder)], check=True)


@pytest.mark.skipif(not _can_chattr(), reason="needs root and chattr (ext4, xfs)")
def test_watch_outlives_an_immutable_store(tmp_path: Path) -> None:
    """`chattr -R +i` on the store under `mdindex watch`: the daemon died with
    SIGBUS (exit 135, no log line) at its next write. Now it shows degraded with
    the cause, searches what is there, catches up when the flag goes, and
    stops cleanly even while the store is immutable again."""
    root = make_tree(tmp_path / "docs", docs=4)
    s = settings_for(tmp_path, [str(root)])
    state = ("--state-dir", str(s.state_dir))
    assert mdindex("backfill", root, *state).returncode == 0
    store = s.store_path
    env = {**RETRY, "MDINDEX_HTTP_PORT": "0", "MDINDEX_QUIET_PERIOD_MS": "100"}
    proc = spawn("watch", root, *state, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: find_daemon(s, required=False) is not None, 120, "the daemon up")
        daemon = find_daemon(s)
        assert daemon is not None
        # edge opens its files for writing: a store immutable before it is
        # opened cannot be opened at all (a one-line store error)
        found = mdindex("search", "Document 2 section 1", *state, env=env)
        assert found.returncode == 0 and "doc02.md" in found.stdout, found.stderr
        immutable(store, True)
        (root / "during.md").write_text("# During\n\nWritten while the store was immutable.\n")
        wait_for(lambda: daemon.ask("/status")["phase"] == "degraded", 60, "degraded")
        status = daemon.ask("/status")
        assert status["healthy"] is False and "immutable" in status["reason"], status
        found = mdindex("search", "Document 2 section 1", *state, env=env)
        assert found.returncode == 0 and "doc02.md" in found.stdout, found.stderr
        immutable(store, False)
        wait_for(lambda: daemon.ask("/status")["documents"] == 5, 60, "caught up")
        assert daemon.ask("/status")["healthy"] is True
        immutable(store, True)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        immutable(store, False)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err  # 135 (SIGBUS) before
    assert "immutable" in err
    # the real model wrote these: payloads are compared, its vectors are its own
    assert stored_points(s) == fresh_points(tmp_path, root, vectors=False)
