"""systemd's notification protocol over $NOTIFY_SOCKET, read by a real datagram
socket: readiness, status, stopping, and watchdog pings at half the interval."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdindex.daemon.notify import Notifier
from tests.conftest import TinyEmbedder, settings_for
from tests.daemon.running import QUIET_MS, Running


class Receiver:
    """What systemd would hear on its notification socket."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.2)

    def messages(self, seconds: float = 0.3) -> list[str]:
        out: list[str] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                out.append(self.sock.recv(4096).decode())
        return out


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    path = tmp_path / "notify.sock"
    receiver = Receiver(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    for name in ("WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(name, raising=False)
    yield receiver
    receiver.sock.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    r.mkdir()
    (r / "a.md").write_text("# A\n\nAlpha apples.\n")
    return r


def test_ready_status_and_stopping(systemd: Receiver) -> None:
    notify = Notifier()
    notify.ready("ready; 3 documents")
    notify.status("watching")
    notify.stopping()
    assert systemd.messages() == [
        "READY=1\nSTATUS=ready; 3 documents",
        "STATUS=watching",
        "STOPPING=1\nSTATUS=stopping",
    ]


def test_the_watchdog_is_pinged_at_most_every_half_interval(
    systemd: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "400000")
    notify = Notifier()
    assert notify.watchdog_interval == pytest.approx(0.2)
    for _ in range(5):
        notify.watchdog()
    assert systemd.messages(0.1) == ["WATCHDOG=1"]
    time.sleep(0.2)
    notify.watchdog()
    notify.watchdog()
    assert systemd.messages(0.1) == ["WATCHDOG=1"]


@pytest.mark.parametrize(
    ("usec", "pid", "pings"),
    [
        ("400000", "", True),
        ("400000", "own", True),
        ("400000", "1", False),  # another process's watchdog
        ("", "", False),
        ("soon", "", False),
    ],
)
def test_only_our_own_watchdog_is_pinged(
    systemd: Receiver, monkeypatch: pytest.MonkeyPatch, usec: str, pid: str, pings: bool
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", usec)
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()) if pid == "own" else pid)
    notify = Notifier()
    notify.watchdog()
    assert systemd.messages(0.1) == (["WATCHDOG=1"] if pings else [])


def test_an_abstract_socket_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"mdindex-test-{uuid.uuid4().hex}"
    receiver = Receiver("\0" + name)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        Notifier().status("abstract")
        assert receiver.messages() == ["STATUS=abstract"]
    finally:
        receiver.sock.close()


def test_without_systemd_nothing_is_sent_and_nothing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    Notifier().ready("nobody listens")
    gone = tmp_path / "gone.sock"
    receiver = Receiver(str(gone))
    receiver.sock.close()
    gone.unlink()  # systemd went away: the socket is gone
    monkeypatch.setenv("NOTIFY_SOCKET", str(gone))
    notify = Notifier()
    assert notify.address == str(gone)
    notify.ready("nobody listens")
    notify.stopping()


@pytest.mark.slow
def test_sd_notify_messages_in_order(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(sock_path))
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    messages: list[str] = []

    def receive(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                messages.append(sock.recv(4096).decode())

    receive(1.5)
    d.stop()
    receive(0.5)
    sock.close()
    kinds = [m.splitlines()[0].split("=")[0] for m in messages]
    assert kinds[0] == "READY" and "STATUS=" in messages[0]
    assert "STATUS" in kinds and "WATCHDOG" in kinds
    assert kinds[-1] == "STOPPING"
    assert kinds.index("READY") < kinds.index("WATCHDOG") < kinds.index("STOPPING")
    assert any("documents" in m for m in messages if m.startswith("STATUS="))
