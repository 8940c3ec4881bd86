"""`mdindex mcp` through the SDK's own client, over stdio, on a real store and model."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import load_settings
from mdindex.mcp_server import read_document, resolve_document
from tests.conftest import TinyEmbedder, run_backfill, settings_for


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    write(
        root,
        "guide/keys.md",
        "---\ntitle: Keys\ntags: [security]\n---\n# Keys\n\n"
        "## Rotate\n\nRotate API keys every ninety days from the console.\n",
    )
    write(root, "guide/otters.md", "# Otters\n\nOtters hold hands while they sleep.\n")
    (tmp_path / "secret.md").write_text("# Secret\n\nOutside every root.\n")
    os.symlink(tmp_path / "secret.md", root / "link.md")
    return root


def test_reads_are_confined_to_the_roots(tmp_path: Path, notes: Path) -> None:
    s = settings_for(tmp_path, [notes])
    roots = s.root_list()
    assert (
        resolve_document(roots, "notes", "guide/keys.md", False)
        == (notes / "guide/keys.md").resolve()
    )
    for bad, reason in [
        ("../secret.md", "without . or .. parts"),
        ("guide/../../secret.md", "without . or .. parts"),
        (str(tmp_path / "secret.md"), "must be relative"),
        ("link.md", "goes through a link"),
        ("guide", "is not a file"),
        ("nope.md", "no such document"),
        ("a\x00b", "relative POSIX path"),
    ]:
        with pytest.raises(ValueError, match=reason):
            resolve_document(roots, "notes", bad, False)
    with pytest.raises(ValueError, match="no root labelled"):
        resolve_document(roots, "other", "guide/keys.md", False)
    # a link that stays inside the root is read when links are followed
    os.symlink(notes / "guide/otters.md", notes / "inside.md")
    assert resolve_document(roots, "notes", "inside.md", True) == (notes / "guide/otters.md")
    with pytest.raises(ValueError, match="goes through a link"):
        resolve_document(roots, "notes", "link.md", True)
    part = read_document(s, "notes", "guide/keys.md", 5, 6)
    assert part["text"] == "# Keys\n" and part["total_lines"] == 10


async def session(tmp_path: Path, notes: Path, body: Any) -> Any:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mdindex", "mcp", str(notes), "--state-dir", str(tmp_path / "state")],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "MDINDEX_BASE_URL": "https://docs.example"},
    )
    async with Client(params) as client:
        return await body(client)


@pytest.mark.model
def test_an_assistant_searches_reads_and_refreshes_over_stdio(tmp_path: Path, notes: Path):
    s = settings_for(tmp_path, [notes], base_url="https://docs.example")
    from mdindex.runtime import make_models

    models = make_models(s)
    from tests.conftest import build_indexer

    with build_indexer(s, models.embedder) as indexer:
        indexer.backfill()
    texts = {p: (notes / p).read_text().split("\n") for p in ("guide/keys.md", "guide/otters.md")}

    async def body(client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["tools"] = {t.name: t for t in (await client.list_tools()).tools}
        out["search"] = await client.call_tool("search", {"query": "how often to rotate api keys"})
        out["filtered"] = await client.call_tool(
            "search", {"query": "otters", "where": ["tags=security"], "k": 3}
        )
        out["read"] = await client.call_tool(
            "read", {"root": "notes", "path": "guide/keys.md", "start_line": 7, "end_line": 9}
        )
        out["escape"] = await client.call_tool("read", {"root": "notes", "path": "../secret.md"})
        out["link"] = await client.call_tool("read", {"root": "notes", "path": "link.md"})
        out["bad_k"] = await client.call_tool("search", {"query": "keys", "k": 0})
        out["bad_type"] = await client.call_tool("search", {"query": 7})
        write(notes, "guide/beavers.md", "# Beavers\n\nBeavers build dams from birch.\n")
        (notes / "guide/otters.md").write_text("# Otters\n\nOtters eat crabs.\n")
        out["stale"] = await client.call_tool("search", {"query": "otters sleeping", "k": 1})
        out["refresh"] = await client.call_tool("refresh", {"timeout_s": 120})
        out["found"] = await client.call_tool("search", {"query": "who builds dams", "k": 1})
        out["status"] = await client.call_tool("status", {})
        out["resource"] = await client.read_resource("mdindex://notes/guide/beavers.md")
        out["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
        return out

    out = asyncio.run(session(tmp_path, notes, body))
    tools = out["tools"]
    assert set(tools) == {"search", "read", "status", "refresh"}
    schema = tools["search"].input_schema
    assert schema["required"] == ["query"] and {"k", "root", "path", "where", "mode"} <= set(
        schema["properties"]
    )
    assert "Example" in tools["read"].description
    hit = out["search"].structured_content["hits"][0]
    assert (hit["root"], hit["path"], hit["section"]) == ("notes", "guide/keys.md", "Rotate")
    assert hit["url"] == "https://docs.example/guide/keys/#rotate"
    lines = texts["guide/keys.md"][hit["start_line"] - 1 : hit["end_line"]]
    assert hit["text"].splitlines()[-1] in lines and hit["stale"] is False
    assert {h["path"] for h in out["filtered"].structured_content["hits"]} == {"guide/keys.md"}
    assert (
        out["read"].structured_content["text"] == "## Rotate\n\nRotate API keys every "
        "ninety days from the console."
    )
    for key, reason in [
        ("escape", "without . or .. parts"),
        ("link", "goes through a link"),
        ("bad_k", "k must be 1 to 100"),
        ("bad_type", "query"),
    ]:
        assert out[key].is_error and reason in out[key].content[0].text, (key, out[key])
    stale = out["stale"].structured_content["hits"][0]
    assert stale["path"] == "guide/otters.md" and stale["stale"] is True
    assert out["refresh"].is_error is False
    assert out["found"].structured_content["hits"][0]["path"] == "guide/beavers.md"
    assert out["status"].structured_content["documents"] == 3
    assert "Beavers build dams" in out["resource"].contents[0].text
    assert "mdindex://notes/guide/beavers.md" in out["resources"]
    assert "mdindex://notes/guide/keys.md" in out["resources"]


def test_refresh_is_not_offered_when_settings_say_so(tmp_path: Path, notes: Path) -> None:
    from mdindex.mcp_server import build_server

    s = load_settings({"roots": [str(notes)], "state_dir": str(tmp_path / "state")})
    run_backfill(s, TinyEmbedder())

    class Nothing:
        def search(self, query: Any) -> list[dict[str, Any]]:
            return []

        def status(self) -> dict[str, Any]:
            return {}

        def refresh(self, timeout_s: float) -> dict[str, Any]:
            raise AssertionError("refresh must not be offered")

    server = build_server(s, Nothing(), allow_refresh=False)
    names = {t.name for t in asyncio.run(server.list_tools())}
    assert names == {"search", "read", "status"}
