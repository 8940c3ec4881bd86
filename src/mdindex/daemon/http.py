"""The daemon's local HTTP endpoint: /healthz, /metrics, /search and /status."""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mdindex.errors import MdindexError

log = logging.getLogger(__name__)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.documents = Gauge("mdindex_documents", "Documents indexed", registry=r)
        self.points = Gauge("mdindex_points", "Points in the collection", registry=r)
        self.queue_depth = Gauge("mdindex_queue_depth", "Paths waiting to be indexed", registry=r)
        self.embedded = Counter("mdindex_chunks_embedded", "Chunks embedded", registry=r)
        self.upserted = Counter("mdindex_points_upserted", "Points written", registry=r)
        self.deleted = Counter("mdindex_points_deleted", "Points deleted", registry=r)
        self.errors = Counter("mdindex_errors", "Files that failed and store errors", registry=r)
        self.rescans = Counter("mdindex_rescans", "Full rescans run", registry=r)
        self.last_sync = Gauge(
            "mdindex_last_sync_timestamp_seconds",
            "Unix time of the last successful sync",
            registry=r,
        )
        self.healthy = Gauge("mdindex_healthy", "1 when watching and the store answers", registry=r)
        self.latency = Histogram(
            "mdindex_save_to_indexed_seconds",
            "From a file's modification time to its points being written",
            buckets=(0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
            registry=r,
        )


class Api:
    """What the HTTP handler needs from the daemon, as plain callables."""

    def __init__(
        self,
        metrics: Metrics,
        health: Callable[[], tuple[bool, str]],
        search: Callable[[str, int], list[dict[str, Any]]],
        status: Callable[[], dict[str, Any]],
        reconcile: Callable[[], dict[str, Any]],
    ) -> None:
        self.metrics = metrics
        self.health = health
        self.search = search
        self.status = status
        self.reconcile = reconcile


class _Handler(BaseHTTPRequestHandler):
    api: Api
    server_version = "mdindex"

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        try:
            if url.path == "/healthz":
                ok, reason = self.api.health()
                self._json(
                    200 if ok else 503, {"status": "ok" if ok else "unhealthy", "reason": reason}
                )
            elif url.path == "/metrics":
                body = generate_latest(self.api.metrics.registry)
                self._send(200, CONTENT_TYPE_LATEST, body)
            elif url.path == "/search":
                q = (query.get("q") or [""])[0]
                if not q.strip():
                    self._json(400, {"error": "q is required"})
                    return
                k = int((query.get("k") or ["5"])[0])
                self._json(200, self.api.search(q, max(1, min(k, 100))))
            elif url.path == "/status":
                self._json(200, self.api.status())
            else:
                self._json(404, {"error": "not found"})
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
        except MdindexError as exc:
            self._json(503, {"error": str(exc)})

    def do_POST(self) -> None:
        if urllib.parse.urlsplit(self.path).path != "/reconcile":
            self._json(404, {"error": "not found"})
            return
        try:
            self._json(200, self.api.reconcile())
        except MdindexError as exc:
            self._json(503, {"error": str(exc), "exit_code": exc.exit_code})

    def _json(self, code: int, data: Any) -> None:
        self._send(code, "application/json", json.dumps(data, ensure_ascii=False).encode())

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class HttpServer:
    def __init__(self, host: str, port: int, api: Api) -> None:
        handler = type("Handler", (_Handler,), {"api": api})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="mdindex-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
