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

import logging
import urllib.parse
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from pydantic import BeforeValidator

from mdindex.config import Settings
from mdindex.errors import MdindexError
from mdindex.index.search import MAX_K, Query
from mdindex.outside import integer, number, shown
from mdindex.query.documents import Documents

log = logging.getLogger(__name__)


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


# -- the server ---------------------------------------------------------------


def build_server(
    settings: Settings, backend: Backend, allow_refresh: bool, documents: Documents | None = None
) -> Any:
    """The MCP server: tools and resources over ``backend`` (any transport);
    ``read``, ``related``, the resources and the stale marks over ``documents``
    (``Index.documents``; by default the documents of ``settings``)."""
    docs = documents or Documents(settings)
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
                for root, path in docs.listing()
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
            "stale=true means the file changed since indexing; a section's heading as the "
            "query finds that section first. Examples: "
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
            return {"hits": docs.mark_stale(backend.search(q))}

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
        return checked(lambda: docs.read(root, path, start_line, end_line))  # type: ignore[no-any-return]

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
        return checked(lambda: docs.related(root, path))  # type: ignore[no-any-return]

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
            return str(docs.read(root, path)["text"])
        except (ValueError, MdindexError) as exc:
            raise ResourceError(shown(str(exc).splitlines()[0] if str(exc) else "")) from None

    return server


def serve_stdio(settings: Settings, backend: Backend, documents: Documents) -> None:
    """`mdindex mcp`: serve until the client closes stdin."""
    allow = settings.mcp_allow_refresh if settings.mcp_allow_refresh is not None else True
    build_server(settings, backend, allow, documents).run("stdio")
