"""An embedding server of our own on loopback, for what infinity-emb will not
do: answer garbage. It speaks the OpenAI protocol over real HTTP (``/models``,
``/embeddings``); while ``answer`` is set, it is what every embeddings request
gets back, raw, as the body of a 200. Unset, it embeds honestly: bag-of-words
vectors (``TinyEmbedder``'s), so a test can compare what is stored. With
``drip_s`` set, whatever it answers comes a byte at a time."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.conftest import TinyEmbedder

MODEL = "tiny-bow"


class HostileServer:
    def __init__(self) -> None:
        self.answer: bytes | Callable[[list[str]], bytes] | None = None
        self.models: list[Any] = [{"id": MODEL}]  # what /models lists
        self.requests = 0
        self.drip_s = 0.0  # when set: the answer is sent a byte at a time, this far apart
        self.tiny = TinyEmbedder()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.reply(json.dumps({"object": "list", "data": server.models}).encode())

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                texts = json.loads(self.rfile.read(size))["input"]
                server.requests += 1
                answer = server.answer
                if answer is None:
                    vectors = server.tiny.embed(texts).tolist()
                    rows = [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(vectors)
                    ]
                    body = json.dumps({"object": "list", "data": rows, "model": MODEL}).encode()
                else:
                    body = answer(texts) if callable(answer) else answer
                self.reply(body)

            def reply(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not server.drip_s:
                    self.wfile.write(body)
                    return
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(server.drip_s)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_port}/v1"


@contextlib.contextmanager
def hostile_server() -> Iterator[HostileServer]:
    server = HostileServer()
    thread = threading.Thread(target=server.http.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()
