"""`mdindex mcp`: the index as tools for AI assistants (the Model Context Protocol).

Built on the official SDK (``mcp.server.mcpserver.MCPServer``). Tools:
``search`` (hits with text, URL and line range, each marked stale when its
file changed since it was indexed), ``read`` (a document or lines of it, read
now and confined to the roots), ``status`` (the freshness report) and, where
allowed, ``refresh`` (index what changed and wait until it is searchable).
Documents are resources ``mdindex://ROOT/PATH``.

Where the answers come from (a ``Backend``): the running daemon when one
holds the store, asked as the CLI asks it; otherwise the store, opened for
each call and closed again, so a daemon started later is not locked out.
Every argument is checked; a bad one is a tool error with one line, never a
crash of the server.
"""

from __future__ import annotations

import logging
import os
import stat
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mdindex.config import Root, Settings
from mdindex.document import decode
from mdindex.errors import MdindexError
from mdindex.models import digest
from mdindex.search import Query

log = logging.getLogger(__name__)

MAX_READ_BYTES = 2_000_000  # a read returns at most this much of a file
MAX_READ_LINES = 2_000
INSTRUCTIONS = (
    "Search the user's markdown notes and docs, kept in sync with the files. "
    "Call search first; open around a hit with read(root, path, start_line, end_line) "
    "using the hit's root, path and lines. A hit marked stale changed on disk since "
    "it was indexed: read it, or call refresh where it is offered."
)


class Backend(Protocol):
    """Where search, status and refresh are answered."""

    def search(self, query: Query) -> list[dict[str, Any]]: ...

    def status(self) -> dict[str, Any]: ...

    def refresh(self, timeout_s: float) -> dict[str, Any]: ...


class DaemonBackend:
    """The running daemon, over its socket, as `mdindex search` asks it."""

    def __init__(self, ask: Callable[..., Any]) -> None:
        self.ask = ask

    def search(self, query: Query) -> list[dict[str, Any]]:
        return list(self.ask("/search?" + urllib.parse.urlencode(query.as_params())))

    def status(self) -> dict[str, Any]:
        return dict(self.ask("/status"))

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        wait = urllib.parse.urlencode({"wait": 1, "timeout": timeout_s})
        return dict(self.ask(f"/status?{wait}", timeout=timeout_s + 30))


class LocalBackend:
    """No daemon: the model loaded once, the store opened for each call."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.live: Settings | None = None
        self._follow_live()

    def _follow_live(self) -> None:
        """The live version's settings and model (a refresh may switch versions)."""
        from mdindex.runtime import make_models
        from mdindex.versions import reader_settings, version_of

        live = reader_settings(self.settings)
        if self.live is None or version_of(live) != version_of(self.live):
            self.live = live
            self.models = make_models(live, queries_only=True)

    def search(self, query: Query) -> list[dict[str, Any]]:
        from mdindex.runtime import make_store
        from mdindex.search import search

        assert self.live is not None
        store = make_store(self.live)
        try:
            store.open()
            return search(self.models.embedder, self.models.planner.sparse, store, query)
        finally:
            store.close()

    def status(self) -> dict[str, Any]:
        from mdindex.status import offline_status

        return offline_status(self.settings)

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        """A backfill of the roots under the writer lock (what `mdindex backfill` does)."""
        from mdindex.lock import WriterLock
        from mdindex.rollout import Rollout

        s = self.settings
        with WriterLock(s.state_dir, s.collection, "mcp refresh"):
            summary = Rollout(s).open().backfill()
        self._follow_live()
        return {"caught_up": True, **summary.as_dict()}


# -- reading files, confined to the roots -------------------------------------


def resolve_document(roots: list[Root], root: str, path: str, follow: bool) -> Path:
    """The file ``path`` names under the root labelled ``root``; ValueError when
    it is not a plain relative path to a regular file inside that root (no
    ``..``, nothing absolute, no link out of the root, no link at all unless
    links are followed)."""
    match = next((r for r in roots if r.label == root), None)
    if match is None:
        labels = ", ".join(r.label for r in roots) or "none configured"
        raise ValueError(f"no root labelled {root[:64]!r} (roots: {labels})")
    if not path or "\x00" in path or "\\" in path or len(path) > 4096:
        raise ValueError("path must be a relative POSIX path inside the root")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"path {path[:80]!r} must be relative, without . or .. parts")
    base = match.path.resolve()
    current = base
    for part in parts:
        current = current / part
        try:
            info = os.lstat(current)
        except OSError:
            raise ValueError(f"no such document: {root}:{path[:200]}") from None
        if stat.S_ISLNK(info.st_mode):
            target = current.resolve()
            if not follow or not target.is_relative_to(base):
                raise ValueError(f"{root}:{path[:200]} goes through a link, which is not read")
            current = target
    if not current.is_file():
        raise ValueError(f"{root}:{path[:200]} is not a file")
    if not current.resolve().is_relative_to(base):
        raise ValueError(f"{root}:{path[:200]} lies outside its root")
    return current


def read_document(
    settings: Settings,
    root: str,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
) -> dict[str, Any]:
    """Lines of a document as the file holds them now, numbered from 1."""
    file = resolve_document(settings.root_list(), root, path, settings.follow_symlinks)
    with open(file, "rb") as handle:
        data = handle.read(MAX_READ_BYTES + 1)
    truncated = len(data) > MAX_READ_BYTES
    text = decode(data[:MAX_READ_BYTES]) if truncated else decode(data)
    lines = text.split("\n")
    first = max(1, start_line or 1)
    last = min(len(lines), end_line or len(lines), first + MAX_READ_LINES - 1)
    if first > len(lines):
        raise ValueError(f"start_line {first} is past the end ({len(lines)} lines)")
    if last < first:
        raise ValueError("end_line must not be before start_line")
    return {
        "root": root,
        "path": path,
        "start_line": first,
        "end_line": last,
        "total_lines": len(lines),
        "truncated": truncated or last < (end_line or len(lines)),
        "text": "\n".join(lines[first - 1 : last]),
    }


def mark_stale(settings: Settings, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hits as a tool returns them, each with ``stale``: its file's text
    now differs from what was indexed (or the file is gone)."""
    now: dict[tuple[str, str], str] = {}
    out = []
    for hit in hits:
        key = (str(hit.get("root")), str(hit.get("doc_path")))
        if key not in now:
            try:
                file = resolve_document(settings.root_list(), *key, settings.follow_symlinks)
                now[key] = digest(decode(file.read_bytes()))
            except (ValueError, OSError, MdindexError):
                now[key] = ""
        out.append(
            {
                "text": hit.get("text"),
                "score": round(float(hit.get("score", 0.0)), 4),
                "title": hit.get("title"),
                "section": hit.get("section"),
                "heading_path": hit.get("heading_path"),
                "url": hit.get("url"),
                "root": key[0],
                "path": key[1],
                "start_line": hit.get("line_start"),
                "end_line": hit.get("line_end"),
                "stale": now[key] != hit.get("doc_hash"),
            }
        )
    return out


# -- the server ---------------------------------------------------------------


def build_server(settings: Settings, backend: Backend, allow_refresh: bool) -> Any:
    """The MCP server: tools and resources over ``backend`` (any transport)."""
    from mcp import types
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    class Server(MCPServer):
        async def list_resources(self) -> list[Any]:
            """Every indexed document, from the state (read-only), at most MAX_RESOURCES."""
            return [
                types.Resource(
                    uri=f"mdindex://{root}/{urllib.parse.quote(path)}",
                    name=f"{root}:{path}",
                    mime_type="text/markdown",
                )
                for root, path in indexed_documents(settings)
            ]

    server = Server("mdindex", instructions=INSTRUCTIONS, log_level="WARNING")

    def checked(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ValueError as exc:
            raise ToolError(str(exc).splitlines()[0]) from None
        except MdindexError as exc:
            raise ToolError(str(exc).splitlines()[0]) from None

    @server.tool(
        name="search",
        description=(
            "Find the passages of the indexed markdown that answer a question. Returns "
            "hits with text, title, section, url (with #anchor), root, path and line range; "
            "stale=true means the file changed since indexing. Examples: "
            '{"query": "how do I rotate API keys"}; '
            '{"query": "max_tokens", "k": 3, "path": "api/", "where": ["tags=release"]}'
        ),
    )
    def search(
        query: str,
        k: int = 5,
        root: list[str] | None = None,
        path: str = "",
        where: list[str] | None = None,
        mode: str = "",
    ) -> dict[str, Any]:
        """query: the question or keywords. k: hits, 1-100. root: root labels to
        keep. path: a path prefix ("api/") or glob ("guide/**/*.md"). where:
        frontmatter filters "key=value". mode: dense, sparse or hybrid."""

        def run() -> dict[str, Any]:
            q = Query.from_params(
                {"q": query, "k": k, "root": root, "path": path, "where": where, "mode": mode},
                settings.search_mode,
                settings.fusion,
            )
            return {"hits": mark_stale(settings, backend.search(q))}

        return checked(run)  # type: ignore[no-any-return]

    @server.tool(
        name="read",
        description=(
            "Read an indexed document, or some of its lines, as the file is now. Use the "
            "root and path a search hit gives. Example: "
            '{"root": "docs", "path": "guide/setup.md", "start_line": 10, "end_line": 40}'
        ),
    )
    def read(
        root: str, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> dict[str, Any]:
        """root: a root label. path: relative to the root. start_line, end_line:
        1-based, inclusive (default: the whole file, at most 2,000 lines)."""
        return checked(lambda: read_document(settings, root, path, start_line, end_line))  # type: ignore[no-any-return]

    @server.tool(
        name="status",
        description=(
            "How fresh the index is: phase, documents indexed of files seen, files that "
            "failed and why, changes still pending, last sync. Takes no arguments: {}"
        ),
    )
    def status() -> dict[str, Any]:
        return checked(backend.status)  # type: ignore[no-any-return]

    if allow_refresh:

        @server.tool(
            name="refresh",
            description=(
                "Index every change to the files now and wait until it is searchable "
                '(for a note just written). Example: {"timeout_s": 60}'
            ),
        )
        def refresh(timeout_s: float = 120.0) -> dict[str, Any]:
            """timeout_s: how long to wait, 1 to 3600 seconds."""

            def run() -> dict[str, Any]:
                if not 1 <= timeout_s <= 3600:
                    raise ValueError("timeout_s must be 1 to 3600")
                return backend.refresh(timeout_s)

            return checked(run)  # type: ignore[no-any-return]

    @server.resource(
        "mdindex://{root}/{+path}",
        name="document",
        description="An indexed markdown document, as the file is now",
        mime_type="text/markdown",
    )
    def document(root: str, path: str) -> str:
        return str(checked(lambda: read_document(settings, root, path))["text"])

    return server


MAX_RESOURCES = 10_000


def indexed_documents(settings: Settings) -> list[tuple[str, str]]:
    """(root, path) of the documents the state records, read without writing."""
    import sqlite3

    from mdindex.runtime import state_path
    from mdindex.versions import reader_settings

    path = state_path(reader_settings(settings))
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute(
            "SELECT root, path FROM docs ORDER BY root, path LIMIT ?", (MAX_RESOURCES,)
        ).fetchall()
    except sqlite3.Error as exc:
        log.debug("listing documents: %s", exc)
        return []
    finally:
        db.close()
    return [(str(r), str(p)) for r, p in rows]


def serve_stdio(settings: Settings, backend: Backend) -> None:
    """`mdindex mcp`: serve until the client closes stdin."""
    allow = settings.mcp_allow_refresh if settings.mcp_allow_refresh is not None else True
    build_server(settings, backend, allow).run("stdio")
