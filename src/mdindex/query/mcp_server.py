"""`mdindex mcp`: the index as tools for AI assistants (the Model Context Protocol).

Built on the official SDK (``mcp.server.mcpserver.MCPServer``). Tools:
``search`` (hits with text, URL and line range, each marked stale when its
file changed since it was indexed), ``read`` (a document or lines of it, read
now and confined to the roots), ``related`` (the documents it links to, those
linking to it, those sharing its tags), ``status`` (the freshness report) and, where
allowed, ``refresh`` (index what changed and wait until it is searchable).
Documents are resources ``mdindex://ROOT/PATH``.

Where the answers come from (a ``Backend``): the running daemon when one
holds the store, asked as the CLI asks it; otherwise the store, opened for
each call and closed again, so a daemon started later is not locked out.
Which one is decided again at every call, so a session outlives a daemon's
restart and follows the live version through a switch.
Every argument is checked; a bad one is a tool error with one line, never a
crash of the server.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from pydantic import BeforeValidator

from mdindex.config import Settings
from mdindex.documents.files import Failure, FileRef, PathFilter, stat_file
from mdindex.documents.reading import decode, read_bytes, text_digest
from mdindex.errors import MdindexError
from mdindex.index.search import MAX_K, Query
from mdindex.outside import cut, integer, number, quoted, shown
from mdindex.query.links import live_state, related

log = logging.getLogger(__name__)

MAX_READ_BYTES = 2_000_000  # a read returns at most this much of a file
MAX_READ_LINES = 2_000


def _whole(what: str, lo: int, hi: int) -> BeforeValidator:
    """A tool's number argument through the one checked conversion
    (mdindex.outside), before the SDK's own lax one takes true as 1."""
    return BeforeValidator(lambda v: v if v is None else integer(v, what, lo, hi))


HitCount = Annotated[int, _whole("k", 1, MAX_K)]
StartLine = Annotated[int | None, _whole("start_line", 1, 2**31)]
EndLine = Annotated[int | None, _whole("end_line", 1, 2**31)]
Seconds = Annotated[float, BeforeValidator(lambda v: number(v, "timeout_s", 1, 3600))]
INSTRUCTIONS = (
    "Search the user's markdown notes and docs, kept in sync with the files. "
    "Call search first; open around a hit with read(root, path, start_line, end_line) "
    "using the hit's root, path and lines; related(root, path) gives the notes it links "
    "to and those linking to it. A hit marked stale changed on disk since "
    "it was indexed: read it, or call refresh where it is offered."
)


class Backend(Protocol):
    """Where search, status and refresh are answered: ``mdindex.Index`` for
    `mdindex mcp` (the daemon, or the store opened here, found anew for every
    call, as Python and the command line ask it), or the daemon's own tools
    when it serves MCP itself."""

    def search(self, query: Query) -> list[dict[str, Any]]: ...

    def status(self) -> dict[str, Any]: ...

    def refresh(self, timeout_s: float) -> dict[str, Any]: ...


# -- reading files, confined to the roots -------------------------------------


def locate_document(settings: Settings, root: str, path: str, *, indexed: bool = True) -> FileRef:
    """The document ``path`` names under the root labelled ``root``, as the scan
    would see it; ValueError unless it is one the index may hold: a plain
    relative path (no ``..``, nothing absolute), accepted by the path filter
    (no hidden files, the include and exclude globs), a regular file inside
    the root (no link at all unless links are followed, and none out of the
    root), at most ``max_file_bytes``, and, with ``indexed``, recorded in the
    live version's state. Reading it must then go through ``open_checked``
    with the result, which refuses a file swapped after this check."""
    match = next((r for r in settings.root_list() if r.label == root), None)
    if match is None:
        labels = ", ".join(r.label for r in settings.root_list()) or "none configured"
        raise ValueError(f"no root labelled {quoted(root)} (roots: {labels})")
    if not path or "\x00" in path or "\\" in path or len(path) > 4096:
        raise ValueError("path must be a relative POSIX path inside the root")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"path {quoted(path)} must be relative, without . or .. parts")
    where = f"{root}:{cut(path)}"
    accept = PathFilter(settings.include, settings.exclude)
    if not accept(path):
        raise ValueError(f"{where} is not an indexed document (hidden, or outside include/exclude)")
    found = stat_file(match, path, accept, settings.follow_symlinks)
    if found is None:
        raise ValueError(f"no such document: {where} (or a link, which is not read)")
    if isinstance(found, Failure):
        raise ValueError(f"{where}: {found.reason}")
    if found.size > settings.max_file_bytes:
        raise ValueError(f"{where} is over max_file_bytes ({settings.max_file_bytes})")
    if indexed and not is_indexed(settings, root, path):
        raise ValueError(f"{where} is not an indexed document")
    return found


def capped(answer: dict[str, Any]) -> dict[str, Any]:
    """``related``'s answer within ``MAX_READ_BYTES``, as a read is: the longest
    list halved until it fits, and ``truncated`` says how many of each list
    were left out (10,000 long links in a note once made an 8.3 MB answer)."""
    lists = [k for k, v in answer.items() if isinstance(v, list)]
    keep = {k: len(answer[k]) for k in lists}
    out = answer
    while len(json.dumps(out, ensure_ascii=False).encode()) > MAX_READ_BYTES and any(keep.values()):
        longest = max(lists, key=lambda k: keep[k])
        keep[longest] //= 2
        out = answer | {k: answer[k][: keep[k]] for k in lists}
        out["truncated"] = {k: len(answer[k]) - n for k, n in keep.items() if n < len(answer[k])}
    return out


def read_document(
    settings: Settings,
    root: str,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
) -> dict[str, Any]:
    """Lines of a document as the file holds them now, numbered from 1."""
    ref = locate_document(settings, root, path)
    try:
        data = read_bytes(ref.path, settings.max_file_bytes, ref, head=MAX_READ_BYTES + 1)
    except MdindexError as exc:
        raise ValueError(f"{root}:{cut(path)}: {exc}") from None
    truncated = len(data) > MAX_READ_BYTES
    # a cut may fall inside a character: it is left out, not refused
    text = decode(data[:MAX_READ_BYTES], cut=True) if truncated else decode(data)
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
    now differs from what was indexed (or the file is gone, or cannot be
    read). The text is hashed as it streams through one checked open."""
    now: dict[tuple[str, str], str] = {}
    out = []
    for hit in hits:
        key = (str(hit.get("root")), str(hit.get("doc_path")))
        if key not in now:
            try:
                ref = locate_document(settings, *key, indexed=False)
                now[key] = text_digest(ref.path, settings.max_file_bytes, ref)
            except (ValueError, MdindexError):
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
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from pydantic import ValidationError

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

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            """The SDK's call, its argument check's error as one line (pydantic's
            spans several lines and a link)."""
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    problems = [
                        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: "
                        + e["msg"].removeprefix("Value error, ")
                        for e in cause.errors()[:3]
                    ]
                    raise ToolError(f"{name}: {'; '.join(problems)}"[:500]) from None
                raise

    server = Server("mdindex", instructions=INSTRUCTIONS, log_level="WARNING")

    def checked(fn: Callable[[], Any]) -> Any:
        """A tool's work; what goes wrong is one line to the assistant, escaped."""
        try:
            return fn()
        except (ValueError, MdindexError) as exc:
            raise ToolError(shown(str(exc).splitlines()[0] if str(exc) else "")) from None

    @server.tool(
        name="search",
        description=(
            "Find the passages of the indexed markdown that answer a question. Returns "
            "hits with text, title, section, url (with #anchor), root, path and line range; "
            "stale=true means the file changed since indexing. Examples: "
            '{"query": "how do I rotate API keys"}; '
            '{"query": "max_tokens", "k": 3, "path": "api/", "where": ["tags=release"]}; '
            '{"query": "部署步骤", "lang": "zh"}'
        ),
    )
    def search(
        query: str,
        k: HitCount = 5,
        root: list[str] | str | None = None,
        path: str = "",
        where: list[str] | None = None,
        mode: str = "",
        tag: list[str] | str | None = None,
        lang: str = "",
    ) -> dict[str, Any]:
        """query: the question or keywords. k: hits, 1-100. root: root labels to
        keep. path: a path prefix ("api/") or glob ("guide/**/*.md"). where:
        frontmatter filters "key=value". mode: dense, sparse or hybrid. tag:
        tags every hit's document has ("project/alpha" also matches "project").
        lang: only documents in this language code (en, zh, ru)."""

        def run() -> dict[str, Any]:
            params = {"q": query, "k": k, "root": root, "path": path, "where": where}
            q = Query.from_params(
                {**params, "mode": mode, "tag": tag, "lang": lang},
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
        root: str, path: str, start_line: StartLine = None, end_line: EndLine = None
    ) -> dict[str, Any]:
        """root: a root label. path: relative to the root. start_line, end_line:
        1-based, inclusive (default: the whole file, at most 2,000 lines)."""
        return checked(lambda: read_document(settings, root, path, start_line, end_line))  # type: ignore[no-any-return]

    @server.tool(
        name="related",
        description=(
            "The notes around a document: the documents it links to, those that link to "
            "it (with the line around each link), its unresolved links, and the documents "
            "sharing its tags. Use the root and path a search hit gives. Example: "
            '{"root": "docs", "path": "guide/setup.md"}'
        ),
    )
    def related_tool(root: str, path: str) -> dict[str, Any]:
        """root: a root label. path: relative to the root."""
        return checked(lambda: capped(related(settings, root, path)))  # type: ignore[no-any-return]

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
        def refresh(timeout_s: Seconds = 120.0) -> dict[str, Any]:
            """timeout_s: how long to wait, 1 to 3600 seconds."""
            return checked(lambda: backend.refresh(timeout_s))  # type: ignore[no-any-return]

    @server.resource(
        "mdindex://{root}/{+path}",
        name="document",
        description="An indexed markdown document, as the file is now",
        mime_type="text/markdown",
    )
    def document(root: str, path: str) -> str:
        # ResourceError: the SDK gives the client its line and logs it at INFO; a
        # ToolError here was "Error creating resource" and a traceback at ERROR
        try:
            return str(read_document(settings, root, path)["text"])
        except (ValueError, MdindexError) as exc:
            raise ResourceError(shown(str(exc).splitlines()[0] if str(exc) else "")) from None

    return server


MAX_RESOURCES = 10_000


def indexed_documents(settings: Settings, most: int = MAX_RESOURCES) -> list[tuple[str, str]]:
    """(root, path) of the documents the live version's state records, read
    without writing, at most ``most`` (-1: all of them)."""
    rows = _query_state(
        settings, "SELECT root, path FROM docs ORDER BY root, path LIMIT ?", (most,)
    )
    return [(str(r), str(p)) for r, p in rows]


def is_indexed(settings: Settings, root: str, path: str) -> bool:
    """Whether the live version's state records this document."""
    return bool(_query_state(settings, "SELECT 1 FROM docs WHERE root=? AND path=?", (root, path)))


def _query_state(settings: Settings, sql: str, args: tuple[Any, ...]) -> list[Any]:
    """Rows of a read-only query of the live version's state; [] when there is none."""
    import sqlite3

    with live_state(settings) as db:
        if db is None:
            return []
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            log.debug("reading the state: %s", exc)
            return []


def serve_stdio(settings: Settings, backend: Backend) -> None:
    """`mdindex mcp`: serve until the client closes stdin."""
    allow = settings.mcp_allow_refresh if settings.mcp_allow_refresh is not None else True
    build_server(settings, backend, allow).run("stdio")
