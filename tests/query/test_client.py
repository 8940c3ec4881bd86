"""How the CLI and `mdindex mcp` reach the index: the daemon found through the
lock file (again for every call, so a restarted one is followed), else the
store opened here with the live version's settings."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from mdindex import Index
from mdindex.config import Settings
from mdindex.errors import FreshnessUnknown, LockError, RepairRefused
from mdindex.index.search import Query
from mdindex.query.client import IndexClient
from mdindex.query.daemon import DaemonGone, find_daemon
from tests.cli_helper import in_process
from tests.conftest import TinyEmbedder, run_rollout, settings_for, stored_points
from tests.daemon.running import QUIET_MS, Running, converges, token_of


def sparse(text: str) -> Query:
    return Query(text, k=1, mode="sparse")  # answered without loading a model


@pytest.mark.slow
def test_the_socket_answers_the_cli_without_any_setting(tmp_path: Path, root: Path) -> None:
    """No http_port: the CLI finds the daemon's socket through the lock file."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        assert not [srv for srv in d.daemon.endpoints.servers if srv.path is None]  # no TCP port
        found = find_daemon(s)
        assert found is not None and found.socket and not found.url
        assert found.ask("/status")["documents"] == 1
        assert found.ask("/search?q=recipe")[0]["doc_path"] == "a.md"
        # without the token the socket refuses too
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(found.socket)
        conn.request("GET", "/status")
        assert conn.getresponse().status == 401
        conn.close()
    finally:
        d.stop()


@pytest.mark.slow
def test_a_backfill_of_other_roots_than_the_daemons_is_refused(tmp_path: Path, root: Path) -> None:
    """Found by a newcomer: `mdindex backfill other --state-dir S` while a daemon
    watched ``notes`` there had the daemon reconcile its own roots and exit 0,
    and ``other`` was never indexed (a root that did not exist either)."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        converges(d, tmp_path, root)
        other = tmp_path / "other"
        other.mkdir()
        for roots in ([other], [root, other], [tmp_path / "missing"], [f"notes={other}"]):
            client = IndexClient(settings_for(tmp_path, roots))
            with pytest.raises(LockError, match=r"watches notes=.*restart it"):
                client.backfill(dry_run=False, prune=True, force=False)
        same = settings_for(tmp_path, [root.parent / "other" / ".." / "notes"])
        assert IndexClient(same).backfill(dry_run=False, prune=True, force=False).daemon
    finally:
        d.stop()


@pytest.mark.slow
def test_a_forced_backfill_of_the_daemons_roots_after_one_was_dropped_goes_through(
    tmp_path: Path, root: Path
) -> None:
    """A root left out of the daemon's config: its start refuses to prune it,
    and the state still records it, but `mdindex backfill notes --force` (the
    documented way, through the daemon too) names only roots the daemon has."""
    dropped = tmp_path / "dropped"
    dropped.mkdir()
    (dropped / "d.md").write_text("# D\n\nDropped dahlias.\n")
    run_rollout(settings_for(tmp_path, [root, dropped]), TinyEmbedder())
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        client = IndexClient(s)
        assert "deletions refused" in client.status(wait=30)["reason"]
        summary = client.backfill(dry_run=False, prune=True, force=True)
        assert summary.daemon and summary.files_deleted == 1
    finally:
        d.stop()


def test_a_search_of_a_state_dir_with_nothing_indexed_says_so(
    tmp_path: Path, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A newcomer's mistyped --state-dir: the search said "no results" and
    exited 0, as if the notes held nothing on the subject."""
    empty = settings_for(tmp_path / "typo", [str(root)])
    assert IndexClient(empty).search(sparse("secret recipe")) == []
    [warned] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned.startswith("nothing is indexed in ") and str(empty.state_dir) in warned
    s = settings_for(tmp_path, [str(root)])
    run_rollout(s, TinyEmbedder())
    caplog.clear()
    assert IndexClient(s).search(sparse("nothing like this")) == []  # indexed: no word
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_without_a_daemon_the_store_is_opened_here(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)])
    run_rollout(s, TinyEmbedder())
    client = IndexClient(s)
    [hit] = client.search(sparse("secret recipe"))
    assert hit["doc_path"] == "a.md" and "vector_key" not in hit
    status = client.status()
    assert (status["daemon"], status["phase"], status["documents"]) == (False, "stopped", 1)
    assert client.reconcile() is None  # nobody to ask: the caller syncs itself
    (root / "b.md").write_text("# B\n\nBananas.\n")
    waited = client.status(wait=0.5)
    assert waited["caught_up"] is False and waited["pending"]["changed"] == 1
    # no roots and no daemon: nothing can tell whether the index is caught up
    rootless = settings_for(tmp_path, [])
    status = IndexClient(rootless).status()
    assert status["documents"] == 1 and status["caught_up"] is None
    assert status["coverage"] == "1 indexed (no roots given)" and status["pending"] is None
    assert status["reason"] == "no roots given: the files were not compared with the index"
    with pytest.raises(FreshnessUnknown, match="no daemon holds the index"):
        IndexClient(rootless).status(wait=0.3)


def test_a_search_without_a_daemon_keeps_the_no_ops_fast_path(
    tmp_path: Path, root: Path, engine: str
) -> None:
    """Opening an edge store rewrites some of its files. A search here records
    what it left, when the state recorded what it found, so the next no-op and
    offline status trust the state instead of opening the store (a no-op at
    1.09M points after one took 11.7 s and 1.2 GB, not 4.8 s and 430 MB)."""
    from mdindex.runtime import make_indexer, make_store

    s = settings_for(tmp_path, [str(root)], store=engine)
    run_rollout(s, TinyEmbedder())
    client = IndexClient(s)
    live = client.live_settings()
    assert client.search(sparse("secret recipe"))
    with make_indexer(live, embedder=TinyEmbedder()) as indexer:
        assert indexer.store_unchanged_since_last_run()
    # a store changed behind the state's back is not trusted after a search either
    victim = next(iter(stored_points(live)))
    store = make_store(live)
    store.open()
    store.delete([victim])
    store.close()
    client.search(sparse("secret recipe"))
    with make_indexer(live, embedder=TinyEmbedder()) as indexer:
        assert not indexer.store_unchanged_since_last_run()


@pytest.mark.slow
def test_a_client_follows_a_daemon_that_restarts(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    client = IndexClient(s)
    first = Running(s, TinyEmbedder()).start()
    try:
        assert client.status(wait=30)["daemon"] is True
        found = client.daemon()
        assert found is not None and found.token == token_of(first)
    finally:
        first.stop()
    assert client.daemon() is None and client.status()["daemon"] is False
    second = Running(s, TinyEmbedder()).start()
    try:
        assert token_of(second) != found.token  # a new token with every start
        assert client.status(wait=30)["daemon"] is True
        assert [h["doc_path"] for h in client.search(sparse("recipe"))] == ["a.md"]
        with pytest.raises(DaemonGone):  # what was found before is stale
            found.ask("/status")
    finally:
        second.stop()


def test_without_a_daemon_searches_follow_the_live_version(tmp_path: Path, root: Path) -> None:
    heading = settings_for(tmp_path, [str(root)])
    run_rollout(heading, TinyEmbedder())
    client = IndexClient(heading)
    live = client.live_settings()
    assert live.strategy == "heading" and client.live_settings() is live  # read once
    assert client.search(sparse("recipe"))[0]["strategy"] == "heading"
    # another process switches the index to a token version
    run_rollout(settings_for(tmp_path, [str(root)], strategy="token"), TinyEmbedder())
    assert client.settings.strategy == "heading"
    assert client.live_settings().strategy == "token"
    assert client.search(sparse("recipe"))[0]["strategy"] == "token"


def tamper(settings: Settings) -> tuple[str, dict[str, Any]]:
    """One stored payload edited behind the sync core's back, as a disk fault or
    another program would: drift no reconcile sees (the state still describes
    the point). The point's ID, and the payloads the store held before."""
    from mdindex.runtime import make_store
    from mdindex.sinks import Point
    from mdindex.versions.catalog import reader_settings

    live = reader_settings(settings)
    before = stored_points(live, vectors=True)
    victim = sorted(before)[0]
    payload = {k: v for k, v in before[victim].items() if not k.startswith("_")}
    store = make_store(live).open()
    try:
        vector, sparse = before[victim]["_vector"], before[victim]["_sparse"]
        store.upsert([Point(victim, vector, {**payload, "section": "tampered"}, sparse)])
    finally:
        store.close()
    return victim, {pid: unvectored(p) for pid, p in before.items()}


def unvectored(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if not k.startswith("_")}


@pytest.mark.slow
def test_verify_while_the_daemon_runs_is_done_by_the_daemon(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a user: `mdindex verify` while `mdindex watch` ran was refused
    ("held by pid N (watch); stop it first"), where search, status and
    backfill go through the daemon. The daemon now verifies and repairs its
    live version on its main loop, with the exit codes of a verify without it."""
    tiny = TinyEmbedder()
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    run_rollout(s, tiny)
    victim, before = tamper(s)
    d = Running(s, tiny).start()
    try:
        index = Index.from_settings(s)
        report = index.verify()
        assert report.daemon and not report.repaired
        assert [e["id"] for e in report.stale] == [victim] and not report.missing
        assert d.points()[victim]["section"] == "tampered"  # a verify writes nothing
        state = ["--state-dir", str(s.state_dir)]
        r = in_process(capsys, "verify", root, *state)
        assert r.returncode == 4 and "stale: 1" in r.stdout and "by the watch daemon" in r.stdout
        r = in_process(capsys, "verify", root, "--repair", "--json", *state)
        assert r.returncode == 0 and json.loads(r.stdout)["repaired"] is True
        assert d.points() == before
        assert index.verify().in_sync
        other = tmp_path / "other"
        other.mkdir()
        with pytest.raises(LockError, match=r"watches notes=.*restart it"):
            Index.from_settings(settings_for(tmp_path, [other])).verify()
    finally:
        d.stop()
    assert d.exit_code == 0


class Changed(TinyEmbedder):
    """Another model under the same name: every vector it makes differs."""

    def vector(self, text: str) -> Any:
        return super().vector(text + " changed model")[::-1].copy()


@pytest.mark.slow
def test_a_repair_the_daemon_refuses_exits_2_with_its_reason(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The guard's refusal comes back as itself (exit 2, its one line), not as
    the daemon failing (exit 3), and the daemon goes on answering."""
    for n in range(3):  # points whose vectors verify samples (the tampered one is stale)
        (root / f"n{n}.md").write_text(f"# Note {n}\n\nWords about topic {n}.\n")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    run_rollout(s, TinyEmbedder())
    victim, before = tamper(s)
    d = Running(s, Changed()).start()
    try:
        with pytest.raises(RepairRefused, match="sampled vectors disagree"):
            Index.from_settings(s).verify(repair=True)
        r = in_process(capsys, "verify", root, "--repair", "--state-dir", s.state_dir)
        assert r.returncode == 2 and "nothing repaired" in r.stderr
        assert d.points() == before | {victim: before[victim] | {"section": "tampered"}}
        assert d.daemon.api.health() == (True, "watching")
        assert Index.from_settings(s).search("secret recipe", mode="sparse")
    finally:
        d.stop()
