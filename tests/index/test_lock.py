"""The writer lock: one holder per state dir and collection, and its record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdindex.errors import LockError
from mdindex.index.lock import WriterLock, lock_path, read_holder


def test_the_holder_record_says_who_and_where(tmp_path: Path) -> None:
    lock = WriterLock(tmp_path / "state", "docs", "watch").acquire()
    try:
        path = lock_path(tmp_path / "state", "docs")
        assert read_holder(path) == {"pid": os.getpid(), "command": "watch"}
        lock.update(socket="/run/x.sock", http_port=8123)
        assert read_holder(path) == {
            "pid": os.getpid(),
            "command": "watch",
            "socket": "/run/x.sock",
            "http_port": 8123,
        }
        assert (path.stat().st_mode & 0o777) == 0o600
        assert (path.parent.stat().st_mode & 0o777) == 0o700
    finally:
        lock.release()
    assert read_holder(path) is None
    # found by a newcomer: a stopped daemon's state folder kept a lock file that
    # named its pid, "watch" and a socket gone, as if it still ran
    assert path.read_bytes() == b""


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with WriterLock(tmp_path, "docs", "watch"):
        with pytest.raises(LockError) as exc:
            WriterLock(tmp_path, "docs", "backfill").acquire()
        assert f"pid {os.getpid()} (watch)" in str(exc.value) and exc.value.exit_code == 2
        # another collection is another lock
        with WriterLock(tmp_path, "other", "backfill"):
            pass
    with WriterLock(tmp_path, "docs", "backfill"):  # free again
        pass


def test_a_stale_lock_file_of_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    pid = os.fork()
    if pid == 0:  # a holder that dies without releasing, as a killed process does
        WriterLock(tmp_path, "docs", "watch").acquire(socket="/gone.sock")
        os._exit(0)
    os.waitpid(pid, 0)
    path = lock_path(tmp_path, "docs")
    assert b"/gone.sock" in path.read_bytes()  # its record is still in the file
    assert read_holder(path) is None  # but nobody holds the lock
    with WriterLock(tmp_path, "docs", "backfill"):
        assert read_holder(path) == {"pid": os.getpid(), "command": "backfill"}


def test_a_garbled_record_still_refuses_cleanly(tmp_path: Path) -> None:
    with WriterLock(tmp_path, "docs", "watch") as lock:
        assert lock.fd is not None
        os.ftruncate(lock.fd, 0)
        os.pwrite(lock.fd, b"\xff not json", 0)
        assert read_holder(lock_path(tmp_path, "docs")) == {}
        with pytest.raises(LockError, match=r"pid \? \(mdindex\)"):
            WriterLock(tmp_path, "docs", "backfill").acquire()
