"""The HTTP server's connections held to a deadline and a bound, so that slow
or many clients cannot hold the API (``http``): a request must arrive whole
within the request timeout, past MAX_CONNECTIONS the oldest still sending
gives way, and WORK_SLOTS bound the requests answered at once."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from typing import Any

from mdindex.outside import shown

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 256  # open at once; a thread each
WORK_SLOTS = 16  # authenticated requests being answered at once


class Connections:
    """Connections held to a deadline and a bound, each on a thread of its own.

    A connection is *waiting* from its accept until its request has arrived
    (``arrived``); one still waiting ``request_timeout_s`` after its accept is
    shut down, however slowly it trickles bytes in. Past MAX_CONNECTIONS the
    oldest waiting connection is shut down to make room; only when every
    connection is being answered is a new one turned away with a 503.
    """

    work: threading.BoundedSemaphore
    request_timeout_s: float
    daemon_threads = True
    # The listen backlog (the standard library's is 5): a burst of clients
    # waits in the kernel for the accept loop rather than being dropped.
    request_queue_size = 128

    def setup_connections(self, request_timeout_s: float) -> None:
        self.request_timeout_s = request_timeout_s
        self.work = threading.BoundedSemaphore(WORK_SLOTS)
        self._guard = threading.Lock()
        self._open: dict[Any, float | None] = {}  # socket -> accepted at (None: arrived)
        self._closing = threading.Event()
        threading.Thread(target=self._reap, name="mdindex-http-reaper", daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._guard:
            if len(self._open) >= MAX_CONNECTIONS:
                waiting = [(t, s) for s, t in self._open.items() if t is not None]
                if not waiting:
                    self._refuse(request)
                    return
                _, oldest = min(waiting, key=lambda ts: ts[0])
                self._open[oldest] = None  # its thread ends as soon as it is shut down
                _shut(oldest)
            self._open[request] = time.monotonic()
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._forget(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed: the client's going away is not news (the
        standard library printed a traceback for each, 3.2 MB of log in 40 s
        from connections shut while they trickled); anything else is one line."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("http: connection ended: %s", exc)
            return
        log.error("http: a request failed: %s: %s", type(exc).__name__, shown(str(exc))[:300])
        log.debug("http: the failure", exc_info=exc)

    def arrived(self, request: Any) -> None:
        """The connection's request is in: from now on it is not timed."""
        with self._guard:
            if request in self._open:
                self._open[request] = None

    def _forget(self, request: Any) -> None:
        with self._guard:
            self._open.pop(request, None)

    def _refuse(self, request: Any) -> None:
        with contextlib.suppress(OSError):
            request.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )
        self.shutdown_request(request)  # type: ignore[attr-defined]

    def _reap(self) -> None:
        while not self._closing.wait(0.25):
            now = time.monotonic()
            with self._guard:
                late = [
                    s
                    for s, t in self._open.items()
                    if t is not None and now - t > self.request_timeout_s
                ]
                for sock in late:
                    self._open[sock] = None
            for sock in late:
                _shut(sock)

    def stop_reaping(self) -> None:
        self._closing.set()


def _shut(sock: Any) -> None:
    """End a connection from here: its thread's next read returns nothing."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
