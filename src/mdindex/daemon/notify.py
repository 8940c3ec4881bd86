"""The systemd notification protocol (sd_notify) over $NOTIFY_SOCKET, without libsystemd."""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self) -> None:
        self.address = os.environ.get("NOTIFY_SOCKET", "")
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        wanted = usec.isdigit() and (not pid or pid == str(os.getpid()))
        # Ping at half the watchdog interval, as sd_watchdog_enabled(3) advises.
        self.watchdog_interval = int(usec) / 2e6 if wanted else None
        self._last_ping = 0.0

    def send(self, *fields: str) -> None:
        if not self.address:
            return
        target = self.address
        if target.startswith("@"):
            target = "\0" + target[1:]  # abstract namespace
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(fields).encode(), target)
        except OSError as exc:
            log.debug("sd_notify to %s failed: %s", self.address, exc)

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> None:
        """Ping the watchdog, at most once per half interval."""
        if self.watchdog_interval is None:
            return
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_interval:
            self._last_ping = now
            self.send("WATCHDOG=1")
