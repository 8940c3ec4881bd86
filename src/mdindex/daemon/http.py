"""The daemon's API: /healthz, /metrics, /search, /status[?wait=1&timeout=S], POST
/reconcile and /verify[?repair=1&force=1], and /versions and /mcp.

It is always served on a Unix socket in the state dir (mode 0600; other
commands find it through the lock file), and on a TCP port when
``http_port`` is set, for Prometheus and remote clients. Both are guarded the
same way, since the index holds the text of every document:

- a bearer token for everything but /healthz and /metrics (``token``),
  generated at start (or read from the ``http-token`` credential under
  systemd) and written 0600 beside the lock, where the CLI reads it;
- on TCP, a ``Host`` that is the bound name and port (a web page reaching
  127.0.0.1 through DNS rebinding sends its own name), and no ``Origin``
  header at all (browsers send one with every cross-site request);
- a client cannot hold the API: a request must arrive whole (head and body)
  within ``Timings.request_timeout_s`` of its connection, or the connection
  is closed (``connections``); past MAX_CONNECTIONS the oldest connection
  still sending its request gives way to a new one; and of the WORK_SLOTS
  that run requests, only an authenticated one takes one, once its request
  has arrived. So slow or
  many unauthenticated connections leave ``/healthz`` and an authenticated
  ``/search`` answering at once (tests/daemon/test_http.py, 64 connections
  sending a byte every few seconds).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mdindex.daemon.connections import WORK_SLOTS, Connections
from mdindex.daemon.metrics import Metrics
from mdindex.errors import ConfigError, MdindexError, PruneRefused, RepairRefused
from mdindex.jsonfile import JsonRefused, parse_json
from mdindex.outside import integer, number, quoted

log = logging.getLogger(__name__)

MAX_MCP_BODY = 1 << 20  # a tool call is a few hundred bytes
OPEN_PATHS = ("/healthz", "/metrics")  # no token: they say nothing about the documents
MAX_WAIT_S = 3600.0  # /status?wait=1&timeout=S
LOOPBACK = ("127.0.0.1", "localhost", "::1")


# The parameters a request may give more than once; any other given twice is
# refused (`lang=en&lang=zh` searched English alone, silently).
REPEATABLE = ("root", "where", "tag", "fingerprint")


def parameters(query: str) -> dict[str, list[str]]:
    """A request's query parameters, those left empty left out as before, but
    an empty fingerprint (one that names no version, not "every old one");
    ValueError naming one given twice (empty or not) that may be given once."""
    given = urllib.parse.parse_qs(query, keep_blank_values=True)
    for key, values in given.items():
        if len(values) > 1 and key not in REPEATABLE:
            raise ValueError(f"{quoted(key)} is given {len(values)} times; give it once")
    return {
        key: kept
        for key, values in given.items()
        if (kept := [v for v in values if v or key == "fingerprint"])
    }


def switches(query: dict[str, list[str]], names: tuple[str, ...]) -> dict[str, bool]:
    """A POST's on/off parameters, each 0 or 1 (absent: 0); ValueError for any
    other value or parameter (`repair=false` repaired, `repiar=1` did nothing)."""
    for key in query:
        if key not in names:
            raise ValueError(f"{quoted(key)} is not a parameter here ({', '.join(names)})")
    out = {}
    for name in names:
        value = (query.get(name) or ["0"])[0]
        if value not in ("0", "1"):
            raise ValueError(f"{name} must be 0 or 1, not {quoted(value[:40])}")
        out[name] = value == "1"
    return out


class Api:
    """What the HTTP handler needs from the daemon, as plain callables."""

    def __init__(
        self,
        metrics: Metrics,
        health: Callable[[], tuple[bool, str]],
        search: Callable[[dict[str, Any]], list[dict[str, Any]]],
        status: Callable[[float | None], dict[str, Any]],
        reconcile: Callable[..., dict[str, Any]],  # (force=False) -> the summary
        token: str,
        mcp: Any = None,
        versions: Callable[[str, list[str]], dict[str, Any]] | None = None,
        verify: Callable[[bool, bool], dict[str, Any]] | None = None,
    ) -> None:
        self.metrics = metrics
        self.health = health
        self.search = search
        self.status = status
        self.reconcile = reconcile
        self.token = token
        self.mcp = mcp  # a daemon.mcp_http.McpBridge, or None
        self.versions = versions  # (action, fingerprints) -> result: `mdindex versions`
        self.verify = verify  # (repair, force) -> the report: `mdindex verify`


class _Handler(BaseHTTPRequestHandler):
    api: Api
    allowed_hosts: frozenset[str] | None  # None: a Unix socket, no Host to check
    server_version = "mdindex"
    # ``timeout`` (the base class applies it to the connection's socket): the
    # daemon's request timeout, set where HttpServer makes the class

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if not self._allowed(url.path):
            return
        with self._working(url.path) as slot:
            if slot:
                self._get(url)

    def do_POST(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if not self._allowed(path):
            return
        body = self._body() if path == "/mcp" else b""
        if body is None:
            return
        with self._working(path) as slot:
            if slot:
                self._post(path, body)

    def do_DELETE(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if not self._allowed(path):
            return
        with self._working(path) as slot:
            if slot:
                if path == "/mcp":
                    self._mcp(b"")
                else:
                    self._json(404, {"error": "not found"})

    @contextlib.contextmanager
    def _working(self, path: str) -> Iterator[bool]:
        """The request has arrived: its connection is no longer timed, and one of
        the work slots is taken for it (not for the open paths: they are cheap
        and say nothing). False, with a 503 sent, when every slot is busy."""
        server: Connections = self.server  # type: ignore[assignment]
        server.arrived(self.connection)
        if path in OPEN_PATHS:
            yield True
            return
        if not server.work.acquire(blocking=False):
            self._json(503, {"error": f"busy: {WORK_SLOTS} requests are being answered"})
            yield False
            return
        try:
            yield True
        finally:
            server.work.release()

    def _body(self) -> bytes | None:
        """An MCP request's body, read while the connection is still timed."""
        try:
            length = integer(self.headers.get("Content-Length") or 0, "length", 0, MAX_MCP_BODY)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_MCP_BODY:
            self._json(413, {"error": f"an MCP request is at most {MAX_MCP_BODY} bytes"})
            return None
        return self.rfile.read(length) if length else b""

    def _get(self, url: urllib.parse.SplitResult) -> None:
        try:
            query = parameters(url.query)
            if url.path == "/healthz":
                ok, reason = self.api.health()
                self._json(
                    200 if ok else 503, {"status": "ok" if ok else "unhealthy", "reason": reason}
                )
            elif url.path == "/metrics":
                body = generate_latest(self.api.metrics.registry)
                self._send(200, CONTENT_TYPE_LATEST, body)
            elif url.path == "/search":
                params: dict[str, Any] = {
                    key: values if key in REPEATABLE else values[0] for key, values in query.items()
                }
                if not str(params.get("q", "")).strip():
                    self._json(400, {"error": "q is required"})
                    return
                self._json(200, self.api.search(params))
            elif url.path == "/status":
                wait = None
                if query.get("wait", ["0"])[0] not in ("", "0"):
                    wait = number((query.get("timeout") or ["60"])[0], "timeout", 0, MAX_WAIT_S)
                self._json(200, self.api.status(wait))
            else:
                self._json(404, {"error": "not found"})
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
        except MdindexError as exc:
            self._json(503, {"error": str(exc)})

    def _post(self, path: str, body: bytes) -> None:
        if path == "/mcp":
            self._mcp(body)
            return
        try:
            query = parameters(urllib.parse.urlsplit(self.path).query)
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
            return
        if path == "/versions" and self.api.versions is not None:
            action = (query.get("action") or [""])[0]
            if action not in ("use", "drop"):
                self._json(400, {"error": "action must be use or drop"})
                return
            try:
                self._json(200, self.api.versions(action, query.get("fingerprint", [])))
            except ConfigError as exc:
                self._json(400, {"error": str(exc)})
            except MdindexError as exc:
                self._json(503, {"error": str(exc)})
            return
        try:
            flags = switches(query, ("repair", "force") if path == "/verify" else ("force",))
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
            return
        force = flags["force"]
        if path == "/verify" and self.api.verify is not None:
            try:
                self._json(200, self.api.verify(flags["repair"], force))
            except (PruneRefused, RepairRefused) as exc:  # exit 2 at the client, as without
                refused = "repair" if isinstance(exc, RepairRefused) else "prune"
                self._json(409, {"error": str(exc), "refused": refused})
            except MdindexError as exc:
                self._json(503, {"error": str(exc), "exit_code": exc.exit_code})
            return
        if path != "/reconcile":
            self._json(404, {"error": "not found"})
            return
        try:
            self._json(200, self.api.reconcile(force=force))
        except MdindexError as exc:
            self._json(503, {"error": str(exc), "exit_code": exc.exit_code})

    def _mcp(self, body: bytes) -> None:
        """MCP's streamable HTTP transport (daemon.mcp_http), after the checks above."""
        bridge = self.api.mcp
        if bridge is None:
            self._json(404, {"error": "MCP is not served here"})
            return
        try:  # the SDK's reader keeps the last of a key given twice, silently
            parse_json(body or b"{}", MAX_MCP_BODY)
        except JsonRefused as exc:
            self._json(400, {"error": f"the MCP request is refused: {exc}"})
            return
        headers = [(k, v) for k, v in self.headers.items() if k.lower() != "authorization"]
        status, out_headers, answer = bridge.handle(self.command, self.path, headers, body)
        self.send_response(status)
        for key, value in out_headers:
            if key.lower() not in ("content-length", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def _allowed(self, path: str) -> bool:
        """Refuse, with the reason, what a browser or another local user could send."""
        if self.headers.get("Origin") is not None:
            self._json(403, {"error": "requests from web pages (an Origin header) are refused"})
            return False
        if self.allowed_hosts is not None:
            host = (self.headers.get("Host") or "").strip().lower()
            if host not in self.allowed_hosts:
                self._json(403, {"error": f"Host {quoted(host)} is not this endpoint"})
                return False
        if path in OPEN_PATHS:
            return True
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.api.token.encode()
        ):
            self._json(401, {"error": "a bearer token is required (see the state dir's .token)"})
            return False
        return True

    def _json(self, code: int, data: Any) -> None:
        self._send(code, "application/json", json.dumps(data, ensure_ascii=False).encode())

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "unix" if isinstance(self.client_address, str) else str(self.client_address[0])

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class _TcpServer(Connections, ThreadingHTTPServer):
    pass


class _UnixServer(Connections, socketserver.ThreadingUnixStreamServer):
    pass


class HttpServer:
    """The API on a Unix socket (``path``) or a TCP ``host``:``port``."""

    def __init__(
        self,
        api: Api,
        request_timeout_s: float,
        *,
        path: Path | None = None,
        host: str = "",
        port: int = 0,
    ) -> None:
        self.path = path
        self.port = 0
        handler: type[_Handler] = type(
            "Handler",
            (_Handler,),
            {"api": api, "allowed_hosts": None, "timeout": request_timeout_s},
        )
        server: _TcpServer | _UnixServer
        if path is not None:
            path.unlink(missing_ok=True)  # a socket left by a crash; we hold the lock
            server = _UnixServer(str(path), handler)
            os.chmod(path, 0o600)
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            tcp: type[_TcpServer] = type("Server", (_TcpServer,), {"address_family": family})
            server = tcp((host, port), handler)
            self.port = int(server.server_port)
            if host in LOOPBACK:  # elsewhere the Host is the machine's own name: token only
                handler.allowed_hosts = frozenset(
                    f"[{n}]:{self.port}" if ":" in n else f"{n}:{self.port}" for n in LOOPBACK
                )
        server.setup_connections(request_timeout_s)
        self.server = server
        self.thread = threading.Thread(
            target=server.serve_forever, name="mdindex-http", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.stop_reaping()
        self.server.shutdown()
        self.server.server_close()
        if self.path is not None:
            try:  # the stop goes on: the stores are closed and the lock released after this
                self.path.unlink(missing_ok=True)
            except OSError as exc:  # an append-only state folder, a folder in its place
                log.warning("cannot remove the socket %s: %s", self.path, exc.strerror)
