"""How a link names a document of its root, and which document it resolves to.

Resolution, within the link's root:

- a markdown link's root-relative path: that document; with ``.html`` as
  ``.md`` (a built site's links); else ``PATH.md``, ``PATH.markdown``,
  ``PATH/index.md``, ``PATH/_index.md``, ``PATH/README.md``, in that order;
  spelled as written first, then in any case (a site's URLs are lowercased);
- a wiki link's name: the documents whose file stem is the name (or whose
  path ends with it, for ``[[folder/Name]]``), case-insensitive, as Obsidian
  resolves them; the shortest path wins among several, then the first in order.

An image, or a target that names no document and has another file suffix
(``diagram.png``), is an attachment: ``links --broken`` looks for it on disk
(``query.links``).

A key says which documents a link could resolve to, so that a document
coming or going looks again at those links only (``index.graph``).
"""

from __future__ import annotations

import posixpath
import re
import sqlite3

from mdindex.documents.links import EMBED, EXTERNAL, IMAGE, LINK, MARKDOWN_SUFFIXES, WIKI
from mdindex.documents.parsing import INDEX_STEMS

_PAGE_SUFFIXES = (".html", ".htm")
_FILE_SUFFIX = re.compile(r"\.[a-z][a-z0-9]{0,7}$")

# A key says which documents a link could resolve to, so that a document
# coming or going looks again at those links only: "p:" and the lowercased
# path a markdown link names without its suffix (and without a last
# "/index", "/_index" or "/README": the folder), "w:" and the lowercased name
# of a wiki link. A document answers to the same keys of its own path.


def names_of(path: str) -> list[tuple[str, int]]:
    """The keys a document answers to, as (key, is its file stem for wiki links)."""
    base = _strip_suffix(path).lower()
    folder, stem = posixpath.split(base)
    out = [(f"w:{stem}", 1), (f"p:{base}", 0)]
    if stem in INDEX_STEMS:
        out.append((f"p:{folder}", 0))
    return out


def key_of(kind: str, target: str) -> str:
    """The key a link's target is found by (see above)."""
    if kind == EXTERNAL:
        return ""
    if kind in (WIKI, EMBED):
        return "w:" + _strip_suffix(target.strip("/")).lower().rpartition("/")[2]
    base = target.rstrip("/").lower()
    page = base.endswith(_PAGE_SUFFIXES)
    for suffix in _PAGE_SUFFIXES:
        base = base.removesuffix(suffix)
    base = _strip_suffix(base)
    folder, stem = posixpath.split(base)
    # a built page's index.html is its folder's page (a.md, a/README.md); but
    # a/index and a/index/ may be the folder a/index (a/index/README.md), whose
    # documents answer to p:a/index, as a/index.md does: keyed "p:a", a note
    # added there never resolved them
    return "p:" + (folder if page and stem in INDEX_STEMS else base)


def is_asset(kind: str, target: str) -> bool:
    """A file that is not a document: any image, and a target with a file
    suffix (``.png``, ``.pdf``) other than a document's or a built page's."""
    if kind == EXTERNAL or not target:
        return False
    if kind == IMAGE:
        return True
    suffix = _FILE_SUFFIX.search(target.rpartition("/")[2].lower())
    return suffix is not None and suffix.group() not in MARKDOWN_SUFFIXES + _PAGE_SUFFIXES


def _strip_suffix(name: str) -> str:
    for suffix in MARKDOWN_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def resolve(db: sqlite3.Connection, root: str, source: str, kind: str, target: str) -> str | None:
    """The document of ``root`` the link names, or None."""
    if kind in (LINK, IMAGE):
        # one query: the path as written wins, then any case (a site's URLs
        # are its paths lowercased: Hugo's /functions/lang/translate/ is
        # functions/lang/Translate.md)
        candidates = _path_candidates(target)
        lowered = [c.lower() for c in candidates]
        marks = ",".join("?" * len(lowered))
        sql = f"SELECT path, lower FROM nodes WHERE root=? AND lower IN ({marks})"
        rows = db.execute(sql, (root, *lowered)).fetchall()
        found = {path for path, _ in rows}
        exact = next((c for c in candidates if c in found), None)
        if exact is not None:
            return exact
        by_lower: dict[str, str] = {}
        for path, low in sorted(rows):
            by_lower.setdefault(low, path)
        return next((by_lower[c] for c in lowered if c in by_lower), None)
    if not target:  # [[#Heading]]: this note
        return source
    name = _strip_suffix(target.strip("/")).lower()
    last = name.rpartition("/")[2]
    if "/" not in name:  # the shortest path of that stem, found by the engine
        row = db.execute(
            "SELECT path FROM names WHERE root=? AND name=? AND stem=1 "
            "ORDER BY length(path), path LIMIT 1",
            (root, f"w:{last}"),
        ).fetchone()
        return None if row is None else str(row[0])
    rows = db.execute(
        "SELECT path FROM names WHERE root=? AND name=? AND stem=1", (root, f"w:{last}")
    ).fetchall()
    paths = [p for (p,) in rows if (f"/{_strip_suffix(p).lower()}").endswith(f"/{name}")]
    return min(paths, key=lambda p: (len(p), p)) if paths else None


def _path_candidates(target: str) -> list[str]:
    out = [target] if target else []
    lower = target.lower()
    for suffix in _PAGE_SUFFIXES:
        if lower.endswith(suffix):
            page = target[: -len(suffix)]
            out.append(page + ".md")
            if posixpath.basename(page).lower() == "index":
                target = posixpath.dirname(page)
    prefix = f"{target}/" if target else ""
    if target and not lower.endswith(MARKDOWN_SUFFIXES):
        out += [f"{target}.md", f"{target}.markdown"]
    out += [f"{prefix}index.md", f"{prefix}_index.md", f"{prefix}README.md"]
    return out
