"""`mdindex mcp` through the SDK's own client, over stdio, on a real store and model."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import load_settings
from mdindex.documents.types import digest
from mdindex.query.documents import MAX_READ_BYTES, locate_document, mark_stale, read_document
from tests.cli_helper import mcp_server
from tests.conftest import TinyEmbedder, run_backfill, run_rollout, settings_for


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


def test_reads_are_confined_to_indexed_documents(tmp_path: Path, notes: Path) -> None:
    """Issue 23, defect 4: `read` served `.env`, `.git/config`, excluded and .txt files."""
    s = settings_for(tmp_path, [notes], exclude=["private/**"])
    (notes / ".env").write_text("TOKEN=hunter2\n")
    (notes / ".git").mkdir()
    (notes / ".git" / "config").write_text('[remote "origin"]\nurl = https://tok@host/x\n')
    (notes / "private").mkdir()
    (notes / "private" / "plan.md").write_text("# Plan\n\nExcluded from the index.\n")
    (notes / "todo.txt").write_text("not markdown\n")
    write(notes, "later.md", "# Later\n\nWritten after the backfill.\n")
    run_backfill(s, TinyEmbedder())
    (notes / "later.md").rename(notes / "later.md.bak")
    write(notes, "unindexed.md", "# New\n\nNot indexed yet.\n")
    assert locate_document(s, "notes", "guide/keys.md").path == notes / "guide/keys.md"
    for bad, reason in [
        (".env", "not an indexed document"),
        (".git/config", "not an indexed document"),
        ("private/plan.md", "not an indexed document"),
        ("todo.txt", "not an indexed document"),
        ("unindexed.md", "not an indexed document"),
        ("later.md", "no such document"),
        ("../secret.md", "without . or .. parts"),
        ("guide/../../secret.md", "without . or .. parts"),
        (str(tmp_path / "secret.md"), "must be relative"),
        ("link.md", "or a link"),
        ("guide", "not an indexed document"),
        ("a\x00b", "relative POSIX path"),
    ]:
        with pytest.raises(ValueError, match=re.escape(reason)):
            read_document(s, "notes", bad)
    with pytest.raises(ValueError, match="no root labelled"):
        read_document(s, "other", "guide/keys.md")
    part = read_document(s, "notes", "guide/keys.md", 5, 6)
    assert part["text"] == "# Keys\n" and part["total_lines"] == 10
    # a link that stays inside the root is read when links are followed, one out never
    os.symlink(notes / "guide/otters.md", notes / "inside.md")
    followed = settings_for(tmp_path, [notes], follow_symlinks=True, state_dir=str(tmp_path / "f"))
    run_backfill(followed, TinyEmbedder())
    assert "Otters hold hands" in read_document(followed, "notes", "inside.md")["text"]
    with pytest.raises(ValueError, match="outside its root"):
        read_document(followed, "notes", "link.md")


@pytest.mark.serial
def test_a_file_swapped_after_the_check_is_never_read(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23, defect 5: `read` checked the path, then opened it later; a file
    swapped for a link out of the root in between was served, a FIFO hung."""
    import mdindex.query.documents as server

    s = settings_for(tmp_path, [notes])
    run_backfill(s, TinyEmbedder())
    target = notes / "guide/otters.md"
    original = target.read_text()
    check = server.locate_document

    def swap_after_check(swap: Callable[[], None]) -> None:
        def checked_then_swapped(*args: Any, **kw: Any) -> Any:
            found = check(*args, **kw)
            swap()
            return found

        monkeypatch.setattr(server, "locate_document", checked_then_swapped)

    def to_link() -> None:
        target.unlink()
        os.symlink(tmp_path / "secret.md", target)

    swap_after_check(to_link)
    with pytest.raises(ValueError, match="symlink"):
        read_document(s, "notes", "guide/otters.md")
    hit = {"root": "notes", "doc_path": "guide/otters.md", "doc_hash": digest(original)}
    assert server.mark_stale(s, [hit])[0]["stale"] is True

    def to_fifo() -> None:
        target.unlink()
        os.mkfifo(target)

    swap_after_check(lambda: None)
    target.unlink()
    target.write_text(original)
    swap_after_check(to_fifo)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"not a regular file|replaced"):
        read_document(s, "notes", "guide/otters.md")
    assert time.monotonic() - started < 2

    # and under a race, as the hostile review ran it: a thread swaps the file
    # for a link out of the root and back while reads go on
    monkeypatch.setattr(server, "locate_document", check)
    target.unlink()
    target.write_text(original)
    stop = threading.Event()

    def swapper() -> None:
        link = notes / "guide/.swap"
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.symlink(tmp_path / "secret.md", link)
                os.replace(link, target)
                target.unlink()
                target.write_text(original)

    thread = threading.Thread(target=swapper)
    thread.start()
    leaked = reads = 0
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with contextlib.suppress(ValueError):
                reads += 1
                leaked += (
                    "Outside every root" in read_document(s, "notes", "guide/otters.md")["text"]
                )
    finally:
        stop.set()
        thread.join()
    assert reads > 100 and leaked == 0


@pytest.mark.slow
def test_the_stale_check_streams_and_bounds_what_it_reads(tmp_path: Path, notes: Path) -> None:
    """Issue 23, defect 6: a search's stale check read whole files: an indexed file
    grown to 1.5 GB took the process from 332 MB to 1.8 GB per search."""
    import tracemalloc

    s = settings_for(tmp_path, [notes], max_file_bytes=12_000_000)
    big = notes / "guide/big.md"
    big.write_text("# Big\n\n" + "A line of the big note.\n" * 400_000)  # 9.6 MB
    run_backfill(s, TinyEmbedder())
    text = big.read_text()
    hit = {"root": "notes", "doc_path": "guide/big.md", "doc_hash": digest(text)}
    tracemalloc.start()
    try:
        assert mark_stale(s, [hit])[0]["stale"] is False
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 6_000_000, peak  # a few 1 MB pieces, not the 9.6 MB file
        with open(big, "r+b") as fh:
            fh.truncate(1_500_000_000)  # grown, sparse
        tracemalloc.reset_peak()
        assert mark_stale(s, [hit])[0]["stale"] is True
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 6_000_000, peak
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_a_read_cut_inside_a_character_decodes(tmp_path: Path, notes: Path) -> None:
    """Issue 23, defect 14: a read of a file over 2 MB failed ("invalid UTF-8")
    when the 2 MB cut fell inside a multi-byte character."""
    s = settings_for(tmp_path, [notes])
    write(notes, "long.md", "# Long!\n\n" + "é" * 1_200_000 + "\n")  # 9 bytes, then 2 each
    run_backfill(s, TinyEmbedder())
    part = read_document(s, "notes", "long.md", 3, 3)
    assert part["truncated"] is True
    assert (MAX_READ_BYTES - 9) % 2 == 1  # the cut falls inside a character
    assert part["text"] == "é" * ((MAX_READ_BYTES - 9) // 2)


async def session(tmp_path: Path, notes: Path, body: Any) -> Any:
    from mcp import Client

    env = {"MDINDEX_BASE_URL": "https://docs.example"}
    params = mcp_server(notes, "--state-dir", tmp_path / "state", env=env)
    async with Client(params) as client:
        return await body(client)


@pytest.mark.slow
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
    assert set(tools) == {"search", "read", "related", "status", "refresh"}
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
        ("link", "or a link"),
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
    from mdindex.query.mcp_server import build_server

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
    assert names == {"search", "read", "related", "status"}


@pytest.mark.slow
@pytest.mark.model
def test_a_long_session_follows_switches_drops_and_daemon_restarts(
    tmp_path: Path, notes: Path, real_embedder: Any
) -> None:
    """Issue 23, defect 9: a long-lived `mdindex mcp` kept the version it started
    with (after a switch it missed a new file; after a drop it answered [] with no
    error), and after a daemon restart every call failed with 401 and never fell
    back to the store."""
    from tests.daemon.running import Running, wait_for

    s = settings_for(tmp_path, [notes], keep_versions=0)
    run_rollout(s, real_embedder)
    token = settings_for(tmp_path, [notes], keep_versions=0, strategy="token")

    async def body(client: Any) -> dict[str, Any]:
        async def paths(query: str) -> list[str]:
            result = await client.call_tool("search", {"query": query, "k": 3})
            assert not result.is_error, result.content
            return [h["path"] for h in result.structured_content["hits"]]

        out: dict[str, Any] = {"first": await paths("rotate api keys")}
        # a switch to another version, the first one dropped (keep_versions = 0)
        write(notes, "guide/beavers.md", "# Beavers\n\nBeavers build dams from birch.\n")
        run_rollout(token, real_embedder)
        out["after_switch"] = await paths("who builds dams from birch")
        # a daemon starts, restarts (another token), and stops: each call finds it, or not
        for n in (1, 2):
            d = Running(token, real_embedder, group_chars=64_000).start()
            try:
                wait_for(lambda d=d: d.daemon.phase == "watching", 60, "the daemon")
                write(notes, f"guide/daemon{n}.md", f"# Daemon {n}\n\nHerons number {n}.\n")
                assert d.daemon.status(60)["caught_up"] is True
                out[f"daemon{n}"] = await paths(f"herons number {n}")
            finally:
                d.stop()
        out["after_daemons"] = await paths("who builds dams from birch")
        return out

    out = asyncio.run(session(tmp_path, notes, body))
    assert out["first"][0] == "guide/keys.md"
    assert out["after_switch"][0] == "guide/beavers.md"
    assert out["daemon1"][0] == "guide/daemon1.md"
    assert out["daemon2"][0] == "guide/daemon2.md"
    assert out["after_daemons"][0] == "guide/beavers.md"


def test_number_arguments_go_through_the_one_checked_conversion(
    tmp_path: Path, notes: Path
) -> None:
    """k, start_line, end_line and timeout_s through mdindex.outside: NaN,
    infinities, 1e309, 1.5, huge integers and booleans are one line naming the
    argument (the SDK's lax check took true as k=1 and "1.5" as a float)."""
    from mcp.server.mcpserver.exceptions import ToolError

    from mdindex.query.mcp_server import build_server

    s = load_settings({"roots": [str(notes)], "state_dir": str(tmp_path / "state")})
    run_backfill(s, TinyEmbedder())
    asked: list[Any] = []

    class Recorder:
        def search(self, query: Any) -> list[dict[str, Any]]:
            asked.append(query.k)
            return []

        def status(self) -> dict[str, Any]:
            return {}

        def refresh(self, timeout_s: float) -> dict[str, Any]:
            asked.append(timeout_s)
            return {}

    server = build_server(s, Recorder(), allow_refresh=True)

    async def call(name: str, arguments: dict[str, Any]) -> str:
        try:
            await server.call_tool(name, arguments)
        except ToolError as exc:
            return str(exc)
        return "ok"

    def ask(name: str, arguments: dict[str, Any]) -> str:
        return asyncio.run(call(name, arguments))

    schema = {t.name: t.input_schema for t in asyncio.run(server.list_tools())}
    assert schema["search"]["properties"]["k"]["type"] == "integer"
    for k, reason in [
        (float("nan"), "k must be 1 to 100, not nan"),
        (float("inf"), "k must be 1 to 100, not inf"),
        ("1e309", "k must be 1 to 100, not inf"),
        ("1.5", "k must be a whole number, not 1.5"),
        (2.5, "k must be a whole number, not 2.5"),
        (10**400, "k must be 1 to 100, not a larger number"),
        (True, "k must be a number, not bool"),
        (0, "k must be 1 to 100, not 0"),
    ]:
        line = ask("search", {"query": "keys", "k": k})
        assert line == f"search: k: {reason}", (k, line)
    assert ask("search", {"query": "keys", "k": 3.0}) == "ok"
    assert ask("search", {"query": "keys", "k": "4"}) == "ok"
    assert asked == [3, 4]
    read = {"root": "notes", "path": "guide/keys.md"}
    for args, reason in [
        ({"start_line": float("nan")}, "start_line: start_line must be 1 to 2147483648, not nan"),
        ({"end_line": True}, "end_line: end_line must be a number, not bool"),
        ({"start_line": 10**30}, "start_line: start_line must be 1 to 2147483648"),
    ]:
        line = ask("read", read | args)
        assert line.startswith(f"read: {reason}") and "\n" not in line, (args, line)
    assert ask("read", read | {"start_line": 2, "end_line": 3.0}) == "ok"
    for timeout, reason in [
        (float("nan"), "timeout_s must be 1 to 3600, not nan"),
        (1e309, "timeout_s must be 1 to 3600, not inf"),
        (False, "timeout_s must be a number, not bool"),
    ]:
        assert ask("refresh", {"timeout_s": timeout}) == f"refresh: timeout_s: {reason}"
    assert ask("refresh", {"timeout_s": "60"}) == "ok" and asked[-1] == 60.0


# -- generated hostile arguments ------------------------------------------------


class Nothing:
    """A backend with no hits and nothing to report: for what the server answers itself."""

    def search(self, query: Any) -> list[dict[str, Any]]:
        return []

    def status(self) -> dict[str, Any]:
        return {}

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        return {}


HOSTILE = Path(__file__).with_name("examples") / "mcp"
LINE_CHARS = 400  # a tool error's line: the argument's name, the reason, a quote of 80


def _huge() -> Any:
    from hypothesis import strategies as st

    big = st.sampled_from([10**4000, -(10**4000), 1e308, float("inf"), "9" * 4000, "x" * 5000])
    text = st.text(max_size=50) | st.text(min_size=300, max_size=3000) | big
    return st.one_of(text, big, st.lists(text, max_size=3), st.dictionaries(text, text, max_size=2))


def test_generated_arguments_are_answered_or_refused_in_one_short_line(
    tmp_path: Path, notes: Path
) -> None:
    """Found by a hostile review: a 4 KB mode or a 4,000-digit number was
    repeated whole in the tool's error line."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from mcp.server.mcpserver.exceptions import ToolError

    from mdindex.query.mcp_server import build_server
    from tests.regressions import found, kept, load

    s = load_settings({"roots": [str(notes)], "state_dir": str(tmp_path / "state")})
    run_backfill(s, TinyEmbedder())

    server = build_server(s, Nothing(), allow_refresh=True)
    names = {
        "search": ["query", "k", "root", "path", "where", "mode", "tag", "lang"],
        "read": ["root", "path", "start_line", "end_line"],
        "related": ["root", "path"],
        "refresh": ["timeout_s"],
    }

    def check(example: dict[str, Any]) -> None:
        async def call() -> str:
            try:
                await server.call_tool(example["tool"], example["arguments"])
            except ToolError as exc:
                return str(exc)
            return "ok"

        line = asyncio.run(call())
        assert "\n" not in line and len(line) <= LINE_CHARS, (len(line), line[:600])

    for path in found(HOSTILE):
        check(load(path))

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(data=st.data())
    def generated(data: st.DataObject) -> None:
        tool = data.draw(st.sampled_from(sorted(names)))
        keys = data.draw(st.lists(st.sampled_from(names[tool]), unique=True, min_size=1))
        arguments = {"query": "keys", "root": "notes", "path": "guide/keys.md"}
        arguments = {k: v for k, v in arguments.items() if k in names[tool]}
        arguments |= {key: data.draw(_huge()) for key in keys}
        example = {"tool": tool, "arguments": arguments}
        # JSON (ints of 4,000 digits are kept as written); inf is no JSON
        if "inf" in repr(arguments):
            del example["arguments"]
            example["arguments"] = {k: v for k, v in arguments.items() if "inf" not in repr(v)}
        with kept(HOSTILE, example):
            check(example)

    generated()


def test_a_resource_that_cannot_be_read_says_why_in_one_line(tmp_path: Path, notes: Path) -> None:
    """A resource read of a document not indexed, or a path with .. parts, was
    "Error creating resource from template URI" to the client (the reason withheld)
    and a traceback at ERROR in the server's log for every such request."""
    from mcp.server.mcpserver.exceptions import ResourceError, UnexpectedResourceError

    from mdindex.query.mcp_server import build_server

    s = load_settings({"roots": [f"notes={notes}"], "state_dir": str(tmp_path / "state")})
    run_backfill(s, TinyEmbedder())
    (notes / "new.md").write_text("# New\n\nNot indexed yet.\n")

    server = build_server(s, Nothing(), allow_refresh=False)
    [text] = asyncio.run(server.read_resource("mdindex://notes/guide/otters.md"))
    assert text.content == (notes / "guide/otters.md").read_text()
    for uri, reason in [
        ("mdindex://notes/new.md", "notes:new.md is not an indexed document"),
        ("mdindex://notes/gone.md", "no such document: notes:gone.md"),
        ("mdindex://notes/guide%2F..%2Fotters.md", "without . or .. parts"),
        ("mdindex://other/guide/otters.md", "no root labelled 'other'"),
    ]:
        with pytest.raises(ResourceError) as raised:
            asyncio.run(server.read_resource(uri))
        assert not isinstance(raised.value, UnexpectedResourceError), uri
        assert reason in str(raised.value) and "\n" not in str(raised.value)


def test_a_root_may_be_given_as_one_string_as_a_tag_may(tmp_path: Path, notes: Path) -> None:
    """{"root": "notes"} was refused ("root: Input should be a valid list"), where
    {"tag": "security"} is taken: both are one filter or a list of them."""
    from mdindex.query.mcp_server import build_server

    s = load_settings({"roots": [f"notes={notes}"], "state_dir": str(tmp_path / "state")})
    asked = []

    class Recorder:
        def search(self, query: Any) -> list[dict[str, Any]]:
            asked.append(query)
            return []

        def status(self) -> dict[str, Any]:
            return {}

        def refresh(self, timeout_s: float) -> dict[str, Any]:
            return {}

    server = build_server(s, Recorder(), allow_refresh=False)
    for root in ("notes", ["notes"]):
        arguments = {"query": "otters", "root": root, "tag": "animals"}
        result = asyncio.run(server.call_tool("search", arguments))
        assert "hits" in str(result), result
    assert [(q.roots, q.tags) for q in asked] == [(("notes",), ("animals",))] * 2
