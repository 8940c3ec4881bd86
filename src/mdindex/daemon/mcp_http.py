"""MCP's streamable HTTP transport at ``/mcp``, inside the daemon's own HTTP server.

The SDK serves that transport as an ASGI app. Here it runs stateless, with
JSON responses (no event streams to hold open), on an event loop in one
thread of its own; the daemon's handler threads, after their token and Host
checks, hand each ``POST /mcp`` to it whole and write back what it answers.
So the assistant reaches the live index through the same port, token and
checks as ``/search``, and no second server listens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3700.0  # a refresh may wait up to an hour


class McpBridge:
    """The SDK's streamable HTTP app, driven from synchronous handler threads."""

    def __init__(self, server: Any) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        # The daemon's handler has already checked the token, Host and Origin.
        self.app = server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="mdindex-mcp", daemon=True)

    def start(self) -> McpBridge:
        self.thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the MCP transport did not start")
        return self

    def stop(self) -> None:
        if self._stop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self.thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self.loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with self.app.router.lifespan_context(self.app):
            self._ready.set()
            await self._stop.wait()

    def handle(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One HTTP request to the app: status, headers and body of its answer."""
        future = asyncio.run_coroutine_threadsafe(
            self._call(method, target, headers, body), self.loop
        )
        return future.result(REQUEST_TIMEOUT_S)

    async def _call(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        path, _, query = target.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }
        sent = False
        done = asyncio.Event()
        status = 500
        out_headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                out_headers.extend(
                    (k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]
                )
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    done.set()

        try:
            await self.app(scope, receive, send)
        finally:
            done.set()
        return status, out_headers, b"".join(chunks)
