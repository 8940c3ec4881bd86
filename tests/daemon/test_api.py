"""What a real daemon answers on its API's threads while it starts and while it
runs (health, search, status and waiting for freshness), and the endpoints it
listens on."""

from __future__ import annotations

import json
import os
import stat
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdindex.daemon import api as daemon_api
from mdindex.errors import ConfigError, StoreError, StoreUnavailable
from mdindex.index.lock import lock_path, read_holder
from mdindex.query.daemon import find_daemon
from tests.conftest import TinyEmbedder, run_rollout, settings_for
from tests.daemon.running import QUIET_MS, Running, tcp_port, wait_for


class SlowLoad(TinyEmbedder):
    """A model that takes as long to load as the test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded = threading.Event()

    def load(self, run: tuple[int, int] | None = None) -> None:
        assert self.loaded.wait(60)


def settled(d: Running) -> None:
    """Until the startup reconcile is over and its version live."""

    def done() -> bool:
        status = d.daemon.api.status()
        return status["phase"] == "watching" and bool(status["versions"][0]["live"])

    wait_for(done, 30, "the first version live")


def a_search_waits_for(api: Any, release: threading.Event) -> None:
    """A search, on a thread of its own, still waiting half a second on, and
    answered once ``release`` is set."""
    found: list[Any] = []

    def search() -> None:
        found.extend(api.search({"q": "bananas", "k": 1, "mode": "sparse"}))

    searcher = threading.Thread(target=search, daemon=True)
    searcher.start()
    searcher.join(0.5)
    assert searcher.is_alive() and found == []  # it waits
    release.set()
    searcher.join(30)
    assert [h["doc_path"] for h in found] == ["sub/b.md"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    (r / "sub").mkdir(parents=True)
    (r / "a.md").write_text("# A\n\nAlpha apples.\n")
    (r / "sub" / "b.md").write_text("# B\n\nBeta bananas.\n")
    return r


@pytest.fixture
def daemon(tmp_path: Path, root: Path) -> Iterator[Running]:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    yield d
    if d.thread.is_alive():
        d.stop()


@pytest.mark.slow
def test_while_the_model_loads_status_answers_and_searches_wait(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    run_rollout(s, TinyEmbedder())  # indexed before: a restart
    model = SlowLoad()
    d = Running(s, model)
    d.thread.start()
    try:
        wait_for(lambda: bool(d.daemon.endpoints.servers), 30, "the endpoints")
        api = d.daemon.api
        assert api.health() == (False, "starting")
        status = api.status()
        assert (status["phase"], status["healthy"], status["daemon"]) == ("starting", False, True)
        assert status["store"] is None and status["reason"] == "loading the model"
        # what the state holds, published as soon as it is open, while the model loads
        wait_for(lambda: api.status()["documents"] == 2, 30, "the state's counts")
        status = api.status()
        assert (status["phase"], status["points"]) == ("starting", 2)
        assert status["coverage"] == "2 indexed (the roots not scanned yet)"
        assert status["last_sync"] is not None and not model.loaded.is_set()
        assert status["queue_paths"] == 0 and status["oldest_wait_s"] is None
        assert status["embedding"] == {} and "caught_up" not in status
        with pytest.raises(StoreError, match="still starting"):
            api.serving(timeout=0.2)
        a_search_waits_for(api, model.loaded)  # the model
    finally:
        model.loaded.set()
        wait_for(lambda: d.daemon.work.next_rescan > 0, 30, "the start")
        d.stop()


class SlowFirstPass(TinyEmbedder):
    """A model whose embedding waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def embed(self, texts: Any, token_ids: Any = None) -> Any:
        assert self.go.wait(60)
        return super().embed(texts, token_ids)


@pytest.mark.slow
def test_a_search_while_the_first_index_is_built_waits_for_it(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a newcomer's walk-through: `mdindex watch` on a new index, then
    `mdindex search`, said "no results" (exit 0): the search was answered from
    the first index while its first pass was still writing it. It waits a
    little, then says so: a waiting search holds one of the server's slots
    (16 of them held every request out, status included, for 120 s)."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    model = SlowFirstPass()
    d = Running(s, model)
    d.thread.start()
    try:
        api = d.daemon.api
        wait_for(d.daemon.shared.ready.is_set, 30, "the model")
        with pytest.raises(StoreError, match="still building the first index"):
            api.serving(timeout=0.3)
        monkeypatch.setattr(daemon_api, "FIRST_INDEX_WAIT_S", 0.3)
        with pytest.raises(StoreError, match=r"first index \(0 of \d files so far\)"):
            api.search({"q": "bananas", "k": 1, "mode": "sparse"})  # its own wait is 120 s
        monkeypatch.undo()
        a_search_waits_for(api, model.go)  # the first pass
    finally:
        model.go.set()
        wait_for(lambda: d.daemon.work.next_rescan > 0, 30, "the start")
        d.stop()


@pytest.mark.slow
def test_a_running_daemon_answers_health_search_and_status(daemon: Running) -> None:
    api = daemon.daemon.api
    settled(daemon)
    assert api.health() == (True, "watching")
    [hit] = api.search({"q": "Alpha apples", "k": 1, "mode": "sparse"})
    assert hit["doc_path"] == "a.md" and "vector_key" not in hit
    with pytest.raises(ValueError, match="k must be 1 to 100"):
        api.search({"q": "apples", "k": 0})
    status = api.status()
    assert (status["phase"], status["healthy"], status["reason"]) == ("watching", True, "")
    assert status["documents"] == 2 and status["coverage"] == "2 of 2"
    assert status["engine"] == "qdrant-edge" and status["points"] == len(daemon.points())
    assert status["embedding"] == TinyEmbedder().describe()
    assert [(v["live"], v["status"]) for v in status["versions"]] == [(True, "complete")]
    assert status["queue_paths"] == 0 and status["build_blocked"] == ""


@pytest.mark.slow
def test_status_waits_until_every_change_before_it_is_searchable(
    daemon: Running, root: Path
) -> None:
    api = daemon.daemon.api
    (root / "new.md").write_text("# New\n\nA zeppelin lands.\n")
    status = api.status(wait=30)
    assert status["caught_up"] is True and status["documents"] == 3
    assert [h["doc_path"] for h in api.search({"q": "zeppelin", "k": 1, "mode": "sparse"})] == [
        "new.md"
    ]
    # deletions the guard refuses are changes still to be made; only a scan
    # refuses them (file events are the kernel's word that a path is gone), and
    # the events could beat the wait's scan to the main loop, so the files go
    # with no observer to report them (made to look alive: the daemon would
    # restart it, and hear of the deletions as events again)
    watcher = daemon.daemon.shared.watcher
    watcher.alive = lambda: True  # type: ignore[method-assign]
    watcher.stop()
    for path in root.rglob("*.md"):
        path.unlink()
    status = api.status(wait=30)
    assert status["caught_up"] is False and status["phase"] == "degraded"
    assert "deletions refused" in status["reason"] and status["healthy"] is False
    assert api.health() == (False, status["reason"])


@pytest.mark.slow
def test_a_store_that_fails_shows_in_health_and_status(daemon: Running) -> None:
    api = daemon.daemon.api
    settled(daemon)
    daemon.daemon.shared.health.store_failed(StoreUnavailable("qdrant-edge refusing writes"))
    assert api.health() == (False, "store: qdrant-edge refusing writes")
    status = api.status()
    assert status["phase"] == "degraded" and status["healthy"] is False


@pytest.mark.slow
def test_versions_requests_are_answered_by_the_main_loop(daemon: Running) -> None:
    api = daemon.daemon.api
    with pytest.raises(ConfigError, match="names no version"):
        api.versions("use", ["0000"])
    assert api.versions("drop", []) == {"dropped": []}


@pytest.mark.slow
def test_the_endpoints_are_a_socket_and_a_tcp_port(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, http_port=0)
    d = Running(s, TinyEmbedder()).start()
    try:
        holder = read_holder(lock_path(s.state_dir, s.collection))
        assert holder is not None and holder["command"] == "watch"
        port = tcp_port(d)
        assert holder["socket"] == str(s.state_dir / "mdindex.sock")
        assert (s.state_dir / "mdindex.token").stat().st_mode & 0o777 == 0o600
        assert (holder["http_host"], holder["http_port"]) == ("127.0.0.1", port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert json.load(r)["status"] == "ok"
    finally:
        d.stop()
    assert not (s.state_dir / "mdindex.sock").exists()
    assert not (s.state_dir / "mdindex.token").exists()  # the stopped daemon's secret goes
    assert find_daemon(s) is None  # the lock is released with the endpoints


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["folder", "link"])
def test_a_token_file_replaced_before_stop_never_stops_the_shutdown(
    tmp_path: Path, root: Path, planted: str
) -> None:
    """The token file removed at stop: a folder in its place raised out of the
    daemon's shutdown (IsADirectoryError), before its stores were closed and
    its lock released; a link in its place goes, never what it names."""
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the daemon's\n")
    d = Running(s, TinyEmbedder()).start()
    token = s.state_dir / "mdindex.token"
    try:
        token.unlink()
        if planted == "folder":
            (token / "inside").mkdir(parents=True)
        else:
            token.symlink_to(outside)
    finally:
        d.stop()
    assert d.exit_code == 0  # the shutdown ran to its end
    assert find_daemon(s) is None and read_holder(lock_path(s.state_dir, s.collection)) is None
    assert outside.read_text() == "not the daemon's\n"
    assert token.is_dir() if planted == "folder" else not os.path.lexists(token)


@pytest.mark.slow
def test_a_relative_state_dir_records_a_socket_found_from_any_folder(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a newcomer: `mdindex watch docs --state-dir state` recorded the
    socket as ``state/mdindex.sock`` in the lock file, so a client in any other
    folder (``Index.connect("/abs/state")``, ``mdindex status --state-dir
    ../state``) read the daemon as gone."""
    monkeypatch.chdir(tmp_path)
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, state_dir="state")
    d = Running(s, TinyEmbedder()).start()
    try:
        holder = read_holder(lock_path(s.state_dir, s.collection))
        # (the daemon is a thread here: the test may not leave its folder)
        assert holder is not None and holder["socket"] == str(tmp_path / "state" / "mdindex.sock")
        found = find_daemon(s)
        assert found is not None and Path(found.socket).is_absolute()
        wait_for(lambda: found.ask("/status")["documents"] == 2, 30, "asked at that path")
        # the process's folder changed since: stop removed state/mdindex.token there
        decoy = tmp_path / "elsewhere" / "state" / "mdindex.token"
        decoy.parent.mkdir(parents=True)
        decoy.write_text("another index's token\n")
        monkeypatch.chdir(decoy.parent.parent)
    finally:
        d.stop()
    assert decoy.read_text() == "another index's token\n"
    assert not (tmp_path / "state" / "mdindex.token").exists()


@pytest.mark.slow
def test_a_socket_path_too_long_moves_to_a_private_folder(tmp_path: Path, root: Path) -> None:
    deep = tmp_path / ("state-" + "x" * 60) / ("y" * 40)
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, state_dir=str(deep))
    assert len(os.fsencode(deep / "mdindex.sock")) >= 100
    d = Running(s, TinyEmbedder()).start()
    try:
        found = find_daemon(s)
        assert found is not None
        sock = Path(found.socket)
        assert sock.name == "api.sock" and sock.parent.name.startswith("mdindex-")
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        # start() returns once the first reconcile is under way
        wait_for(lambda: found.ask("/status")["documents"] == 2, 30, "indexed over the socket")
    finally:
        d.stop()
    assert not sock.parent.exists()


@pytest.mark.slow
def test_status_wait_rests_on_a_barrier_not_a_scan(tmp_path: Path, root: Path) -> None:
    """A wait marks the moment in the event stream and syncs what came before it:
    no whole reconcile (which would move the next rescan's time), and every
    edit made before the call is stored when it returns, a burst of 150 too.
    A quiet period of 10 s shows nothing waited for the debouncer."""
    for i in range(300):
        (root / "sub" / f"n{i}.md").write_text(f"# N{i}\n\nNote {i}.\n")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=10_000)
    d = Running(s, TinyEmbedder()).start()
    try:
        settled(d)
        next_rescan = d.daemon.work.next_rescan
        (root / "a.md").write_text("# A\n\nAlpha apricots now.\n")
        status = d.daemon.api.status(wait=30)
        assert status["caught_up"] and status["caught_up_by"] == "events"
        texts = {p["doc_path"]: p["text"] for p in d.points().values()}
        assert "apricots" in texts["a.md"]
        for i in range(0, 300, 2):  # a burst: a checkout of 150 files
            (root / "sub" / f"n{i}.md").write_text(f"# N{i}\n\nNote {i}, changed.\n")
        (root / "sub" / "n1.md").unlink()
        status = d.daemon.api.status(wait=30)
        assert status["caught_up"] and status["caught_up_by"] == "events"
        texts = {p["doc_path"]: p["text"] for p in d.points().values()}
        assert all("changed" in texts[f"sub/n{i}.md"] for i in range(0, 300, 2))
        assert "sub/n1.md" not in texts
        # nothing waits: a wait costs one open per root and no sync
        assert d.daemon.api.status(wait=30)["caught_up_by"] == "events"
        assert d.daemon.work.next_rescan == next_rescan
    finally:
        d.stop()


@pytest.mark.slow
def test_status_wait_scans_where_no_barrier_can_be_set(tmp_path: Path) -> None:
    """A root with no file in it to open: the whole stat-only reconcile decides."""
    root = tmp_path / "notes"
    (root / "empty" / "deeper").mkdir(parents=True)
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=10_000)
    d = Running(s, TinyEmbedder()).start()
    try:
        settled(d)
        status = d.daemon.api.status(wait=30)
        assert status["caught_up"] and status["caught_up_by"] == "scan"
        (root / "empty" / "deeper" / "x.md").write_text("# X\n\nA first note.\n")
        status = d.daemon.api.status(wait=30)
        assert status["caught_up"]  # one a level or two down will do as a barrier
        assert [p["doc_path"] for p in d.points().values()] == ["empty/deeper/x.md"]
    finally:
        d.stop()


@pytest.mark.slow
@pytest.mark.model
def test_status_wait_with_the_store_down_is_not_caught_up_with_the_reason(
    tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that refuses while `status --wait` waits: the daemon's error came
    back as a refused request, and the command exited 3. The contract's
    `--wait` answers are 0 or 4: now it is 4, with the store's reason in one line."""
    from tests.cli_helper import in_process

    url = "http://127.0.0.1:9"  # nothing listens: every store call fails
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, qdrant_url=url)
    d = Running(s, TinyEmbedder()).start()
    try:
        (root / "c.md").write_text("# C\n\nWritten while the store is down.\n")
        status = d.daemon.api.status(wait=2)
        assert status["caught_up"] is False and "unreachable" in status["reason"]
        assert d.thread.is_alive()
        args = ("--state-dir", str(s.state_dir), "--qdrant-url", url)
        done = in_process(capsys, "status", "--wait", "--timeout", "2", *args)
        assert done.returncode == 4, done.stderr
        # stderr holds this process's daemon's log too: the command's own line
        line = [x for x in done.stderr.splitlines() if "status --wait: not caught up:" in x]
        assert len(line) == 1 and "unreachable" in line[0], done.stderr
    finally:
        d.stop()
    assert d.exit_code == 0
