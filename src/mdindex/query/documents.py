"""The indexed documents as the files hold them now, confined to the roots:
what the MCP tools ``read`` and ``related`` answer, its resources list and its
search hits are marked stale against. ``Documents`` is the one path to them,
owned by ``mdindex.Index`` (``Index.documents``) for `mdindex mcp` and Python,
and made by the daemon for the MCP it serves itself.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from mdindex.config import Root, Settings
from mdindex.documents.files import Failure, FileRef, PathFilter, stat_file
from mdindex.documents.reading import decode, read_bytes, text_digest
from mdindex.errors import MdindexError
from mdindex.outside import cut, integer, quoted
from mdindex.query import links
from mdindex.query.links import live_state

log = logging.getLogger(__name__)

MAX_READ_BYTES = 2_000_000  # a read returns at most this much of a file
MAX_READ_LINES = 2_000
MAX_RESOURCES = 10_000


def locate_document(settings: Settings, root: str, path: str, *, indexed: bool = True) -> FileRef:
    """The document ``path`` names under the root labelled ``root``, as the scan
    would see it; ValueError unless it is one the index may hold: a plain
    relative path (no ``..``, nothing absolute), accepted by the path filter
    (no hidden files, the include and exclude globs), a regular file inside
    the root (no link at all unless links are followed, and none out of the
    root), at most ``max_file_bytes``, and, with ``indexed``, recorded in the
    live version's state. Reading it must then go through ``open_checked``
    with the result, which refuses a file swapped after this check."""
    roots = indexed_roots(settings)
    match = next((r for r in roots if r.label == root), None)
    if match is None:
        labels = ", ".join(r.label for r in roots) or "none configured"
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


def indexed_roots(settings: Settings) -> list[Root]:
    """The roots configured, else those the live version's last sync recorded
    (``Index.connect`` names none), as ``related`` and `mdindex links` find them."""
    if settings.root_list():
        return settings.root_list()
    return [Root(label, folder) for label, folder in links.recorded_roots(settings).items()]


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
    """Lines of a document as the file holds them now, numbered from 1. Any
    argument of another type is a ValueError too (read("docs", True) raised
    TypeError, a path list AttributeError, start_line="x" TypeError)."""
    if not isinstance(root, str) or not isinstance(path, str):
        raise ValueError("root and path must be strings")
    start_line, end_line = (
        None if n is None else integer(n, name, -(2**63), 2**63)
        for n, name in ((start_line, "start_line"), (end_line, "end_line"))
    )
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


class Documents:
    """The indexed documents of ``settings``, read now from the files. Every
    argument is checked; a bad one is a ValueError (or a ConfigError) of one line."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def listing(self, most: int = MAX_RESOURCES) -> list[tuple[str, str]]:
        """(root, path) of the indexed documents, at most ``most`` (-1: all)."""
        return indexed_documents(self.settings, most)

    def read(
        self, root: str, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> dict[str, Any]:
        """Lines of a document as the file holds them now, numbered from 1, at
        most ``MAX_READ_LINES`` of them and ``MAX_READ_BYTES`` of the file."""
        return read_document(self.settings, root, path, start_line, end_line)

    def related(self, root: str, path: str) -> dict[str, Any]:
        """A document's links, backlinks and tags within ``MAX_READ_BYTES`` (MCP's ``related``)."""
        return capped(links.related(self.settings, root, path))

    def links(self, document: str | Path, root: str | None = None) -> dict[str, Any]:
        """A document's links, backlinks and tags, whole (`mdindex links FILE`):
        ``document`` is a file under a root, or a path inside ``root``."""
        if root is None:
            root, rel = links.document_of(self.settings, Path(document))
        else:
            rel = Path(document).as_posix()
        return links.related(self.settings, root, rel)

    def broken_links(self) -> list[dict[str, Any]]:
        """Every local link to no indexed document (`mdindex links --broken`)."""
        return links.broken(self.settings)

    def mark_stale(self, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The hits as MCP's ``search`` returns them, each with ``stale``."""
        return mark_stale(self.settings, hits)
