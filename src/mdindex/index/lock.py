"""One writer per state dir and collection, enforced with an flock'd file.

The lock file also tells other commands who holds it and, for a daemon, where
its HTTP endpoint listens, so `search` and `status` can ask it instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from mdindex.errors import LockError
from mdindex.jsonfile import open_regular, parse_json, private_dir


def lock_path(state_dir: Path, collection: str) -> Path:
    return state_dir / f"{collection}.lock"


def token_path(state_dir: Path, collection: str) -> Path:
    """Where a daemon writes its API token (0600), for the clients of its user."""
    return state_dir / f"{collection}.token"


def socket_path(state_dir: Path, collection: str) -> Path:
    """The daemon's Unix socket (the lock's record says where it really listens)."""
    return state_dir / f"{collection}.sock"


def _record(fd: int) -> dict[str, Any]:
    """The holder's record in an open lock file: {} when it is empty or garbled."""
    raw = os.pread(fd, 4096, 0)
    try:
        data = parse_json(raw or b"{}", 4096)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def read_holder(path: Path) -> dict[str, Any] | None:
    """The holder's record if the lock is held right now, else None."""
    try:
        fd = open_regular(path)  # a FIFO's open waited for a writer
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _record(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class WriterLock:
    def __init__(self, state_dir: Path, collection: str, command: str) -> None:
        self.path = lock_path(state_dir, collection)
        self.command = command
        self.fd: int | None = None

    def acquire(self, **info: Any) -> WriterLock:
        private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = _record(fd)
            os.close(fd)
            who = f"pid {holder.get('pid', '?')} ({holder.get('command', 'mdindex')})"
            raise LockError(
                f"{self.path} is held by {who}; stop it first or use another --state-dir"
            ) from exc
        self.fd = fd
        self.update(**info)
        return self

    def update(self, **info: Any) -> None:
        if self.fd is None:
            return
        record = json.dumps({"pid": os.getpid(), "command": self.command, **info}).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, record, 0)

    def release(self) -> None:
        # taken first: a second release while this one truncates must not close
        # the descriptor again (by then its number may be another file's)
        fd, self.fd = self.fd, None
        if fd is not None:
            # still held: the record goes, so the file left names no one who stopped
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
