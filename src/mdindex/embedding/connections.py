"""Kept-alive HTTP connections to an embedding server, and one call on them
retried while its failure is transient (``mdindex.retry``): the transport of
``remote.RemoteEmbedder``."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.parse
from typing import Any

from mdindex.errors import EmbeddingError, EmbeddingUnavailable
from mdindex.jsonfile import parse_json
from mdindex.outside import shown
from mdindex.retry import retry, short

# HTTP statuses worth another try: the server is busy, restarting or behind a proxy that is.
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
# An answer is a batch of vectors as JSON: 2,048 texts of 1,024 floats is about
# 40 MB; more than this is a broken or hostile server, not vectors.
MAX_ANSWER_BYTES = 256 << 20
# What an honest answer of vectors can hold: each number in at most 32 characters,
# a row's keys and punctuation in 1 KB. Anything longer is refused unread: a
# 256 MB answer of "0," was parsed into 2.5 GB of Python floats (19 MB took 191 MB
# here), with 4 requests in flight.
MAX_DIMENSION = 8192


def answer_bytes(texts: int, dimension: int | None) -> int:
    """The most an answer of ``texts`` vectors of ``dimension`` (unknown: the
    largest any model gives) may hold."""
    return min(MAX_ANSWER_BYTES, 65536 + texts * ((dimension or MAX_DIMENSION) * 32 + 1024))


# What a kept-alive connection the server closed looks like on the next request.
STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)


class HttpStatus(Exception):
    """A server's answer that is not a success: its status and what it said."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {shown(' '.join(body.split())[:300])}")
        self.status = status
        self.body = body


class ServerRefused(EmbeddingError):
    """The server's lasting "no" to a request, with its status and what it said."""

    def __init__(self, where: str, exc: HttpStatus) -> None:
        super().__init__(f"embedding server {where} refused the request: {exc}")
        self.status = exc.status
        self.body = exc.body


def transient(exc: BaseException) -> bool:
    if isinstance(exc, HttpStatus):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, (OSError, http.client.HTTPException))  # refused, reset, timed out


class Deadline:
    """A request's whole time, not each read's: at ``seconds`` its socket is shut,
    which ends a read blocked in another thread. The socket's own timeout holds
    for one read only: an answer sent a byte a second was read for as many
    seconds as it has bytes (12 days for 128 vectors of 384)."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self._conn = conn
        self._passed = threading.Event()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        self._passed.set()
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)

    def passed(self) -> bool:
        return self._passed.is_set()

    def cancel(self) -> None:
        self._timer.cancel()


class Connections:
    """Requests to one server, each on an idle kept-alive connection or a new one."""

    def __init__(
        self,
        where: str,
        parsed: urllib.parse.SplitResult,
        key: str,
        timeout_s: float,
        retry_budget_s: float,
        keep: int,
    ) -> None:
        self.where = where  # the URL, its password masked
        self._parsed = parsed
        self._key = key
        self.timeout_s = timeout_s
        self.retry_budget_s = retry_budget_s
        self.keep = keep
        # Kept-alive connections not in use: a request takes one (or opens one) and
        # puts it back when its answer is read whole. At most ``keep`` are kept,
        # whichever threads (the daemon's HTTP threads, the workers) ask.
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, path: str, body: bytes | None, max_bytes: int = MAX_ANSWER_BYTES
    ) -> Any:
        """One call, retried while the failure is transient; the JSON answer, of at
        most ``max_bytes`` (what an honest answer to it can hold)."""

        def call() -> Any:
            return self._send(method, path, body, max_bytes)

        return retry(
            call,
            what=f"embedding server {method} {path}",
            budget_s=self.retry_budget_s,
            transient=transient,
            failed=lambda exc: (
                ServerRefused(self.where, exc)
                if isinstance(exc, HttpStatus)
                else EmbeddingError(f"embedding server {self.where}: {short(exc)}")
            ),
            gave_up=lambda exc, n: EmbeddingUnavailable(
                f"embedding server {self.where} unreachable after {n} attempts over "
                f"{self.retry_budget_s:.0f}s: {short(exc)}"
            ),
        )

    def _send(self, method: str, path: str, body: bytes | None, max_bytes: int) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        for again in (False, True):
            conn, reused = self._connection()
            cut = Deadline(conn, self.timeout_s)
            try:
                conn.request(method, self._parsed.path + path, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read(max_bytes + 1)
                if cut.passed():  # the read ends at the cut, with what had come
                    raise TimeoutError
                if len(raw) > max_bytes:
                    raise EmbeddingError(
                        f"embedding server {self.where} answered {path} with more than "
                        f"{max_bytes:,} bytes"
                    )
            except BaseException as exc:
                conn.close()  # a half-read answer must not be read by the next request
                if cut.passed():
                    raise TimeoutError(f"no whole answer within {self.timeout_s:g} s") from None
                # a kept-alive connection the server has closed meanwhile: once more,
                # on a new one, before counting it as a failure
                if not (reused and not again and isinstance(exc, STALE)):
                    raise
            else:
                self._release(conn, response)
                break
            finally:
                cut.cancel()
        if response.status >= 400:
            raise HttpStatus(response.status, raw.decode("utf-8", "replace"))
        try:
            return parse_json(raw, max_bytes)
        except ValueError as exc:
            raise EmbeddingError(f"embedding server {self.where} answered {path}: {exc}") from None

    def close(self) -> None:
        """Close every idle connection (a later request opens one again)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle kept-alive connection, or a new one; and whether it is reused."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        host, port = self._parsed.hostname or "", self._parsed.port
        if self._parsed.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout_s), False
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s), False

    def _release(
        self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse
    ) -> None:
        """Keep the connection for the next request, unless the server closes it
        or enough are kept already."""
        with self._lock:
            if not response.will_close and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()
