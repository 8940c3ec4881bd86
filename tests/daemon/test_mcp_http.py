"""MCP over streamable HTTP at the daemon's /mcp: the SDK's own client, a real daemon."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from mdindex.runtime import make_models
from tests.conftest import settings_for
from tests.daemon.running import QUIET_MS, Running, tcp_port, token_of
from tests.daemon.test_http import request


async def call(url: str, token: str | None, body: Any) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return await body(client)


@pytest.mark.slow
@pytest.mark.model
def test_an_assistant_searches_the_live_index_over_http(tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "keys.md").write_text("# Keys\n\n## Rotate\n\nRotate API keys every ninety days.\n")
    # issue 23, defect 4, over HTTP: files under the root that are not indexed documents
    (root / ".env").write_text("TOKEN=hunter2\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("url = https://x:hunter2@example.com\n")
    (root / "plain.txt").write_text("hunter2\n")
    (root / "drafts").mkdir()
    (root / "drafts" / "secret.md").write_text("# Draft\n\nhunter2\n")
    s = settings_for(tmp_path, [root], quiet_period_ms=QUIET_MS, http_port=0, exclude=["drafts/**"])
    d = Running(s, make_models(s).embedder).start()
    try:
        assert d.daemon.status(60)["caught_up"] is True
        port, token = tcp_port(d), token_of(d)
        url = f"http://127.0.0.1:{port}/mcp"

        async def body(client: Any) -> dict[str, Any]:
            out: dict[str, Any] = {"tools": [t.name for t in (await client.list_tools()).tools]}
            out["search"] = await client.call_tool("search", {"query": "how often rotate keys"})
            out["read"] = await client.call_tool("read", {"root": "notes", "path": "../x.md"})
            out["hidden"] = []
            for path in (".env", ".git/config", "plain.txt", "drafts/secret.md"):
                out["hidden"].append(
                    await client.call_tool("read", {"root": "notes", "path": path})
                )
                with contextlib.suppress(Exception):  # an error is what is wanted
                    res = await client.read_resource(f"mdindex://notes/{path}")
                    out["hidden"].append(res)
            (root / "otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
            out["status"] = await client.call_tool("status", {})
            return out

        out = asyncio.run(call(url, token, body))
        # refresh is off over HTTP unless mcp_allow_refresh says otherwise
        assert out["tools"] == ["search", "read", "related", "status"]
        hit = out["search"].structured_content["hits"][0]
        assert (hit["path"], hit["section"], hit["start_line"]) == ("keys.md", "Rotate", 3)
        assert out["read"].is_error and ".. parts" in out["read"].content[0].text
        assert len(out["hidden"]) == 4  # four tool errors, no resource read at all
        for refused in out["hidden"]:
            assert refused.is_error and "hunter2" not in str(refused)
        assert "phase" in out["status"].structured_content
        # the same checks as the rest of the port: no token, a foreign Host
        assert request(port, "/mcp", method="POST")[0] == 401
        code, _ = request(
            port, "/mcp", {"Authorization": f"Bearer {token}", "Host": "evil.example"}, "POST"
        )
        assert code == 403
        with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in a group
            asyncio.run(call(url, None, lambda c: c.list_tools()))
        assert request(port, "/healthz")[0] == 200
    finally:
        d.stop()
