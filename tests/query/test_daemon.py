"""Finding the running daemon through the lock file and the token beside it,
and what its refusals become."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdindex.errors import ConfigError, StoreUnavailable
from mdindex.index.lock import WriterLock, token_path
from mdindex.query.daemon import DaemonClient, DaemonGone, find_daemon
from tests.conftest import TinyEmbedder, settings_for
from tests.daemon.running import QUIET_MS, Running


@pytest.fixture
def holder(tmp_path: Path, root: Path) -> Iterator[WriterLock]:
    """The writer lock as a daemon holds it, before it records where it listens."""
    s = settings_for(tmp_path, [str(root)])
    lock = WriterLock(s.state_dir, s.collection, "watch").acquire()
    yield lock
    lock.release()


def test_only_a_watch_holding_the_lock_is_a_daemon(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)])
    assert find_daemon(s) is None  # no lock file at all
    backfill = WriterLock(s.state_dir, s.collection, "backfill").acquire(socket="/x.sock")
    try:
        assert find_daemon(s) is None  # a backfill holds the store: no daemon to ask
    finally:
        backfill.release()
    lock = WriterLock(s.state_dir, s.collection, "watch").acquire(socket="/x.sock")
    lock.release()
    assert find_daemon(s) is None  # a record left behind, no holder


def test_a_daemon_without_endpoints_yet_is_waited_for(
    tmp_path: Path, root: Path, holder: WriterLock
) -> None:
    s = settings_for(tmp_path, [str(root)])
    with pytest.raises(StoreUnavailable, match=r"did not open its socket within 0 s"):
        find_daemon(s, wait_s=0.2)
    assert find_daemon(s, required=False) is None
    server = settings_for(tmp_path, [str(root)], qdrant_url="http://127.0.0.1:9")
    assert find_daemon(server) is None  # a server store is shared: go to it directly


def test_the_daemon_is_found_with_its_token(tmp_path: Path, root: Path, holder: WriterLock) -> None:
    s = settings_for(tmp_path, [str(root)])
    holder.update(socket="/run/mdindex.sock", http_host="127.0.0.1", http_port=8123)
    with pytest.raises(StoreUnavailable, match="cannot be read"):
        find_daemon(s, wait_s=0.2)
    token_path(s.state_dir, s.collection).write_text("the-token\n")
    assert find_daemon(s) == DaemonClient("/run/mdindex.sock", "http://127.0.0.1:8123", "the-token")
    holder.update(http_host="127.0.0.1", http_port=8123)  # TCP only
    assert find_daemon(s) == DaemonClient("", "http://127.0.0.1:8123", "the-token")


@pytest.mark.slow
def test_what_a_daemon_refuses_is_told_apart(tmp_path: Path, root: Path) -> None:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        found = find_daemon(s)
        assert found is not None
        with pytest.raises(DaemonGone, match="refused the token"):
            DaemonClient(found.socket, "", "another daemon's token").ask("/status")
        with pytest.raises(ConfigError, match="the daemon refused /search: k must be 1 to 100"):
            found.ask("/search?q=apples&k=0")
        with pytest.raises(DaemonGone, match="is gone"):
            DaemonClient(str(tmp_path / "nobody.sock"), "", found.token).ask("/status")
    finally:
        d.stop()


@pytest.mark.parametrize("planted", ["fifo", "zero", "latin-1", "newline", "empty", "huge"])
def test_a_token_file_that_holds_no_token_is_store_unavailable_at_once(
    tmp_path: Path, root: Path, holder: WriterLock, planted: str
) -> None:
    """Found by a review: the token was read with read_text: a FIFO in its
    place held every client in its open, a link to /dev/zero read until
    memory ran out, bytes not UTF-8 raised UnicodeDecodeError out of every
    call, and a newline inside raised ValueError from http.client's header."""

    s = settings_for(tmp_path, [str(root)])
    holder.update(socket="/run/mdindex.sock")
    path = token_path(s.state_dir, s.collection)
    if planted == "fifo":
        os.mkfifo(path)
    elif planted == "zero":
        path.symlink_to("/dev/zero")
    else:
        content = {"latin-1": b"t\xe9", "newline": b"a\nb", "empty": b" \n", "huge": b"t" * 5000}
        path.write_bytes(content[planted])
    raised: list[BaseException] = []

    def find() -> None:
        try:
            find_daemon(s)
        except BaseException as exc:  # what it raised is the test
            raised.append(exc)

    thread = threading.Thread(target=find, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the client still waits on the token file"
    assert len(raised) == 1 and isinstance(raised[0], StoreUnavailable), raised
    assert "cannot be read" in str(raised[0]) and "\n" not in str(raised[0])


def test_a_client_racing_a_daemons_stop_waits_for_its_lock(
    tmp_path: Path, root: Path, holder: WriterLock
) -> None:
    """A stopping daemon removes its token, then closes its stores, then
    releases its lock: a client in between was told the token "cannot be
    read ...; run this as the daemon's user" (StoreUnavailable), where it
    must wait for the lock and then open the store itself."""

    s = settings_for(tmp_path, [str(root)])
    holder.update(socket=str(tmp_path / "gone.sock"))  # its token already removed
    stopped = threading.Timer(0.5, holder.release)  # its stores closed: the lock goes
    stopped.start()
    assert find_daemon(s) is None
    stopped.join()  # the record goes before the lock: the fixture's release waits for it
