"""`mdindex links` and the MCP tool ``related``: a document's links, backlinks
and the documents sharing its tags; and the report of broken links.

Both read the link graph (``index.graph``) from the live version's state,
read-only, so they answer beside a running daemon without asking it.
Attachments (images, PDFs) are not documents and have no place in the graph:
the report looks for them on disk, inside their root, by path (markdown
links) or by file name anywhere in the root (wiki embeds, as Obsidian finds
them). Nothing is read to check a link, and nothing outside a root is looked at.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mdindex.config import Settings
from mdindex.documents.files import printable
from mdindex.documents.links import EMBED, WIKI
from mdindex.documents.parsing import github_slug
from mdindex.errors import ConfigError
from mdindex.index import graph
from mdindex.index.payload import titled
from mdindex.jsonfile import parse_json
from mdindex.outside import cut, quoted, shown

log = logging.getLogger(__name__)

MAX_SHARING = 50  # documents listed as sharing tags
# Files looked at, per root, to find attachments by name (a wiki embed).
MAX_ASSET_SCAN = 200_000


@contextmanager
def live_state(settings: Settings) -> Iterator[sqlite3.Connection | None]:
    """The live version's state, opened read-only; None when there is none."""
    from mdindex.runtime import state_path
    from mdindex.versions.catalog import reader_settings

    path = state_path(reader_settings(settings))
    if not path.exists():
        yield None
        return
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        log.debug("reading the state: %s", exc)
        yield None
        return
    try:
        yield db
    finally:
        db.close()


def root_folders(settings: Settings, db: sqlite3.Connection) -> dict[str, Path]:
    """Each root's folder: as configured, else where the last backfill found it."""
    if settings.root_list():
        return {r.label: r.path for r in settings.root_list()}
    return recorded_root_folders(db)


def recorded_roots(settings: Settings) -> dict[str, Path]:
    """Each root's folder where the live version's last whole sync found it;
    {} when there is no state yet, or it cannot be read."""
    with live_state(settings) as db:
        if db is None:
            return {}
        try:
            return recorded_root_folders(db)
        except sqlite3.Error as exc:
            log.debug("reading the state: %s", exc)
            return {}


def recorded_root_folders(db: sqlite3.Connection) -> dict[str, Path]:
    """Each root's folder where the last whole sync found it ({} before one)."""
    row = db.execute("SELECT v FROM meta WHERE k=?", (graph.ROOT_FOLDERS_KEY,)).fetchone()
    try:
        recorded = parse_json(str(row[0])) if row else {}
    except ValueError:
        recorded = {}
    if not isinstance(recorded, dict):
        return {}
    return {str(k): Path(v) for k, v in recorded.items() if isinstance(v, str)}


def _need(db: sqlite3.Connection | None, settings: Settings) -> sqlite3.Connection:
    from mdindex.versions.catalog import nothing_indexed

    if db is None:
        raise nothing_indexed(settings)
    return db


def related(settings: Settings, root: str, path: str) -> dict[str, Any]:
    """One document's outgoing links (resolved, unresolved, external), its
    backlinks with the line and text around each, and the documents that
    share its tags; ConfigError when the document is not indexed."""
    if not isinstance(root, str) or not isinstance(path, str):
        raise ValueError("root and path must be strings")
    with live_state(settings) as maybe:
        db = _need(maybe, settings)
        this = graph.node(db, root, path) if len(root) + len(path) < 8192 else None
        if this is None:
            raise ConfigError(f"{cut(root)}:{cut(path)} is not an indexed document")
        look = _Looker(db, root_folders(settings, db))
        outgoing, unresolved, external = [], [], []
        for link in graph.outgoing(db, root, path):
            entry = {"line": link.line, "kind": link.kind, "target": link.target}
            entry |= {"anchor": link.anchor, "label": link.label}
            if link.kind == "external":
                external.append({"line": link.line, "url": link.target, "label": link.label})
                continue
            if link.to_path is not None:
                title = look.node(root, link.to_path)[0]
                section = look.heading(link)
                missing = "" if section is not None else f"no heading #{link.anchor} there"
                entry |= {"root": root, "path": link.to_path, "title": title}
                entry |= {"section": section or "", "problem": missing}
            elif link.asset and not link.problem:  # a file, looked for on disk
                missing = look.attachment(link)
                entry |= {"root": root, "path": None, "attachment": True, "problem": missing}
            else:
                entry |= {"root": root, "path": None, "problem": _why(link)}
                unresolved.append(entry)
            outgoing.append(entry)
        backlinks = [
            {
                "root": b.root,
                "path": b.path,
                "title": look.node(b.root, b.path)[0],
                "section": b.section,
                "line": b.line,
                "label": b.label,
                "anchor": b.anchor,
                "context": b.context,
            }
            for b in graph.backlinks(db, root, path)
        ]
        sharing = [
            {"root": r, "path": p, "title": look.node(r, p)[0], "tags": tags}
            for r, p, tags in graph.sharing_tags(db, root, path, MAX_SHARING)
        ]
        return {
            "root": root,
            "path": path,
            "title": this[0],
            "tags": graph.tags_of(db, root, path),
            "outgoing": outgoing,
            "backlinks": backlinks,
            "unresolved": unresolved,
            "external": external,
            "sharing_tags": sharing,
        }


def broken(settings: Settings) -> list[dict[str, Any]]:
    """Every local link whose document, attachment or heading does not exist,
    each with where it is and why."""
    with live_state(settings) as maybe:
        db = _need(maybe, settings)
        return broken_in(db, root_folders(settings, db))


def broken_in(db: sqlite3.Connection, roots: dict[str, Path]) -> list[dict[str, Any]]:
    """``broken`` on a state, the roots' folders given."""
    found: list[dict[str, Any]] = []
    look = _Looker(db, roots)
    for link in graph.every_link(db):
        reason = ""
        if link.problem:
            reason = link.problem
        elif link.asset:
            reason = look.attachment(link)
        elif link.to_path is None:
            reason = _why(link)
        elif link.anchor and look.heading(link) is None:
            reason = f"{link.to_path} has no heading #{link.anchor}"
        if reason:
            found.append(
                {
                    "root": link.root,
                    "path": link.path,
                    "line": link.line,
                    "kind": link.kind,
                    "target": link.target,
                    "anchor": link.anchor,
                    "reason": reason,
                }
            )
    return found


def _why(link: graph.LinkRow) -> str:
    if link.problem:
        return link.problem
    if link.kind in (WIKI, EMBED):
        return f"no note named {quoted(link.target)}"
    return f"no indexed document at {link.target or '(the root)'}"


def _heading(anchors: dict[str, str], anchor: str, kind: str) -> str | None:
    """The heading text an anchor names in a document, or None; "" for no anchor."""
    if not anchor:
        return ""
    wanted = github_slug(anchor) if kind in (WIKI, EMBED) else anchor.lower()
    for key, text in anchors.items():
        if key.lower() == wanted or (kind in (WIKI, EMBED) and text.lower() == anchor.lower()):
            return text
    return None


class _Looker:
    """What the reports look up, each once: a document's title and heading
    anchors, and the file names of a root (for wiki embeds)."""

    def __init__(self, db: sqlite3.Connection, roots: dict[str, Path]) -> None:
        self.db = db
        self.roots = roots
        self._nodes: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
        self._names: dict[str, dict[str, str]] = {}

    def node(self, root: str, path: str) -> tuple[str, dict[str, str]]:
        """A document's title and anchors (anchor: heading text); empty when unknown."""
        if (root, path) not in self._nodes:
            self._nodes[(root, path)] = graph.node(self.db, root, path) or ("", {})
        return self._nodes[(root, path)]

    def heading(self, link: graph.LinkRow) -> str | None:
        """The heading a resolved link's anchor names (see ``_heading``)."""
        return _heading(self.node(link.root, link.to_path or "")[1], link.anchor, link.kind)

    def attachment(self, link: graph.LinkRow) -> str:
        """Why an attachment cannot be found ("" when it is there)."""
        base = self.roots.get(link.root)
        if base is None:
            where = quoted(link.root)
            return f"root {where} is not configured here, so its files cannot be checked"
        if link.kind not in (WIKI, EMBED):
            return _find_inside(base, link.target)
        if link.root not in self._names:
            self._names[link.root] = _file_names(base)
        found = self._names[link.root].get(link.target.rpartition("/")[2].lower())
        if found is None:
            return f"no file named {quoted(link.target)} in the root"
        # as the markdown form is: a link that leads outside is not "found"
        return _find_inside(base, found)


def _find_inside(base: Path, rel: str) -> str:
    """Why there is no file at ``rel`` in the root ("" when there is), looking
    at nothing outside it: each part is looked at (lstat) in turn, and a link
    is followed only where its target, as a path, is inside the root."""
    root = os.path.realpath(base)
    current, parts, hops = root, [p for p in rel.split("/") if p], 0
    while parts:
        step = os.path.join(current, parts.pop(0))
        try:
            mode = os.lstat(step).st_mode
        except OSError:
            return f"no file at {rel}"
        if not stat.S_ISLNK(mode):
            current = step
            continue
        hops += 1
        there = os.path.normpath(os.path.join(current, os.readlink(step)))
        if hops > 40 or os.path.commonpath([root, there]) != root:
            return f"{rel} leads outside the root (a symbolic link)"
        rest = os.path.relpath(there, root)
        current, parts = root, ([] if rest == "." else rest.split(os.sep)) + parts
    try:
        return "" if stat.S_ISREG(os.lstat(current).st_mode) else f"no file at {rel}"
    except OSError:
        return f"no file at {rel}"


def _file_names(base: Path) -> dict[str, str]:
    """Lowercased names of the files in a root (hidden folders left out), each
    with the path of the first file of that name (shortest first)."""
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(folder, base)
        for f in sorted(files):
            out.setdefault(f.lower(), f if rel == "." else f"{rel}/{f}")
        if len(out) >= MAX_ASSET_SCAN:
            log.warning(
                "links: more than %d files in %s; attachments not all looked at",
                MAX_ASSET_SCAN,
                base,
            )
            break
    return out


def document_of(settings: Settings, file: Path) -> tuple[str, str]:
    """The (root label, path) a file names: under a configured root, else under
    the nearest folder above it whose name labels an indexed root (as
    `mdindex backfill FOLDER` labels it)."""
    path = file.absolute()
    real = path.resolve()
    if real.is_dir():
        raise ConfigError(f"{printable(str(file))} is a folder; give one of its documents")
    with live_state(settings) as maybe:
        db = _need(maybe, settings)
        label, sep, rel = str(file).partition(":")
        if sep and not path.exists() and graph.node(db, label, rel) is not None:
            return label, rel  # ROOT:PATH, as the output names documents
        for label, folder in root_folders(settings, db).items():
            if real.is_relative_to(folder.resolve()):
                return label, real.relative_to(folder.resolve()).as_posix()
        for folder in path.parents:
            rel = path.relative_to(folder).as_posix()
            if folder.name and graph.node(db, folder.name, rel) is not None:
                return folder.name, rel
    shown = printable(str(file)[:300])
    raise ConfigError(f"{shown} is not an indexed document (give its root with --root)")


def related_text(data: dict[str, Any]) -> str:
    """`mdindex links FILE` as lines for a person (every field on its line)."""
    d = shown(data)
    head = f"{d['root']}:{d['path']}  {d['title']}"
    lines = [head + (f"  [tags: {', '.join(d['tags'])}]" if d["tags"] else "")]

    def where(e: dict[str, Any]) -> str:
        return f"{e['root']}:{e['path']}" + (f"#{e['anchor']}" if e.get("anchor") else "")

    lines.append(f"links out ({len(d['outgoing'])}):")
    for e in d["outgoing"]:
        if e.get("attachment"):
            found = e["problem"] or "found"
            lines.append(f"  line {e['line']}: attachment {e['target']}: {found}")
        elif e["path"] is None:
            lines.append(f"  line {e['line']}: {e['kind']} '{e['target']}': {e['problem']}")
        else:
            mark = f"  ✗ {e['problem']}" if e["problem"] else ""
            lines.append(f"  line {e['line']}: → {where(e)}  {_titled(e)}{mark}")
    lines.append(f"backlinks ({len(d['backlinks'])}):")
    for b in d["backlinks"]:
        lines.append(f"  {b['root']}:{b['path']}:{b['line']}  {_titled(b)}")
        lines.append(f"      {b['context']}")
    if d["external"]:
        lines.append(f"external ({len(d['external'])}):")
        lines += [f"  line {e['line']}: {e['url']}" for e in d["external"]]
    lines.append(f"sharing tags ({len(d['sharing_tags'])}):")
    for t in d["sharing_tags"]:
        lines.append(f"  {t['root']}:{t['path']}  {t['title']}  [{', '.join(t['tags'])}]")
    return "\n".join(lines)


def _titled(entry: dict[str, Any]) -> str:
    """Title › section, the section left out where it only repeats the title."""
    section = entry["section"]
    return titled(str(entry["title"]), [str(section)] if section else [])


def broken_text(found: list[dict[str, Any]]) -> str:
    """`mdindex links --broken` as lines: FILE:LINE: target: why."""
    lines = [] if found else ["no broken links"]
    for b in shown(found):
        anchor = f"#{b['anchor']}" if b["anchor"] else ""
        target = b["target"] + anchor
        if b["kind"] in (WIKI, EMBED):
            target = f"{'!' if b['kind'] == EMBED else ''}[[{target}]]"
        lines.append(f"{b['root']}:{b['path']}:{b['line']}: {target}: {b['reason']}")
    return "\n".join(lines)
