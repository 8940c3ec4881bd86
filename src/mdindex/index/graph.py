"""The link graph in the local state: which document links to which, kept as
the files change.

Each document's links, tags and headings are recorded when the document is
written (``put``, in the state's commit) and dropped with it (``remove``).
A link is resolved to a document of its own root when it is recorded, and
again whenever a document it may name appears or goes: each link keeps a
``key`` and each document the keys it answers to (see "naming and
resolving" below), and only the links with a key of the document that came
or went are looked at again, once per distinct target. A rename is a new
document and a removed one, so whoever linked to the old path is unresolved
(or resolves to another note of that name), and whoever linked to the new
one resolves, without anything being embedded again.

How a link names a document, and which it resolves to: ``index.naming``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mdindex.documents.links import EXTERNAL, IMAGE, LINK, Graph
from mdindex.index.naming import is_asset, key_of, names_of, resolve

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    root TEXT NOT NULL, path TEXT NOT NULL, title TEXT NOT NULL,
    anchors TEXT NOT NULL, digest TEXT NOT NULL, lower TEXT NOT NULL,
    PRIMARY KEY (root, path)
);
CREATE INDEX IF NOT EXISTS nodes_lower ON nodes (root, lower);
CREATE TABLE IF NOT EXISTS names (
    root TEXT NOT NULL, name TEXT NOT NULL, stem INTEGER NOT NULL, path TEXT NOT NULL,
    PRIMARY KEY (root, name, path)
);
-- the shortest path of a stem, found without sorting every note of that name
CREATE INDEX IF NOT EXISTS names_stem ON names (root, name, stem, length(path), path);
CREATE TABLE IF NOT EXISTS links (
    root TEXT NOT NULL, path TEXT NOT NULL, n INTEGER NOT NULL,
    kind TEXT NOT NULL, target TEXT NOT NULL, anchor TEXT NOT NULL, label TEXT NOT NULL,
    line INTEGER NOT NULL, section TEXT NOT NULL, context TEXT NOT NULL,
    problem TEXT NOT NULL, asset INTEGER NOT NULL, key TEXT NOT NULL, to_path TEXT,
    PRIMARY KEY (root, path, n)
);
CREATE INDEX IF NOT EXISTS links_target ON links (root, key, kind, target, problem, to_path, asset);
CREATE INDEX IF NOT EXISTS links_to ON links (root, to_path);
CREATE TABLE IF NOT EXISTS tags (
    root TEXT NOT NULL, path TEXT NOT NULL, tag TEXT NOT NULL, PRIMARY KEY (root, path, tag)
);
CREATE INDEX IF NOT EXISTS tags_tag ON tags (tag);
"""
TABLES = ("nodes", "names", "links", "tags")
# In the state's meta: {label: folder} as the last backfill found the roots,
# for `mdindex links` to look for attachments without a config.
ROOT_FOLDERS_KEY = "root_folders"


# Which key_of the recorded links were keyed by; a state keyed by another is
# keyed again when opened (2: a link to a/index is keyed as that folder's).
KEYS_VERSION = "2"


def rekey(db: sqlite3.Connection) -> int:
    """Key again, and resolve again, the markdown links whose key ``key_of``
    now gives differently; how many."""
    rows = db.execute(
        "SELECT root, path, n, kind, target, key FROM links WHERE kind IN (?, ?)", (LINK, IMAGE)
    ).fetchall()
    changed = [
        (root, path, n, kind, target)
        for root, path, n, kind, target, key in rows
        if key_of(kind, target) != key
    ]
    db.executemany(
        "UPDATE links SET key=? WHERE root=? AND path=? AND n=?",
        [(key_of(kind, target), root, path, n) for root, path, n, kind, target in changed],
    )
    for root, kind, target in {(r, k, t) for r, _, _, k, t in changed}:
        to, asset = _answer(db, root, "", kind, target)
        db.execute(
            "UPDATE links SET to_path=?, asset=? WHERE root=? AND kind=? AND target=? "
            "AND problem = ''",
            (to, int(asset), root, kind, target),
        )
    return len(changed)


def put(db: sqlite3.Connection, root: str, path: str, graph: Graph) -> None:
    """Record one document's graph (in the caller's transaction), replacing
    what was recorded for it, and resolve its links and those that may name it."""
    new = db.execute("SELECT 1 FROM nodes WHERE root=? AND path=?", (root, path)).fetchone() is None
    if not new:
        _forget(db, root, path)
    anchors = json.dumps(graph.anchors, ensure_ascii=False)
    db.execute(
        "INSERT INTO nodes VALUES (?, ?, ?, ?, ?, ?)",
        (root, path, graph.title, anchors, graph.digest(), path.lower()),
    )
    db.executemany(
        "INSERT OR IGNORE INTO names VALUES (?, ?, ?, ?)",
        [(root, name, stem, path) for name, stem in names_of(path)],
    )
    db.executemany(
        "INSERT OR IGNORE INTO tags VALUES (?, ?, ?)", [(root, path, t) for t in graph.tags]
    )
    rows = []
    answers: dict[tuple[str, str], tuple[str | None, bool]] = {}  # 10,000 links, few targets
    for n, link in enumerate(graph.links):
        to, asset = None, False
        if link.kind != EXTERNAL and not link.problem:
            if (link.kind, link.target) not in answers:
                answers[(link.kind, link.target)] = _answer(db, root, path, link.kind, link.target)
            to, asset = answers[(link.kind, link.target)]
        key = key_of(link.kind, link.target)
        rows.append(
            (root, path, n, link.kind, link.target, link.anchor, link.label, link.line,
             link.section, link.context, link.problem, int(asset), key, to)
        )  # fmt: skip
    db.executemany(f"INSERT INTO links VALUES ({','.join('?' * 14)})", rows)
    if new:
        _reresolve(db, root, [name for name, _ in names_of(path)])


def remove(db: sqlite3.Connection, root: str, path: str) -> None:
    """Drop one document's graph; links that named it resolve again (to another
    document of that name) or become unresolved."""
    names = [
        n for (n,) in db.execute("SELECT name FROM names WHERE root=? AND path=?", (root, path))
    ]
    _forget(db, root, path)
    _reresolve(db, root, names)


def clear(db: sqlite3.Connection) -> None:
    for table in TABLES:
        db.execute(f"DELETE FROM {table}")


def _forget(db: sqlite3.Connection, root: str, path: str) -> None:
    for table in TABLES:
        db.execute(f"DELETE FROM {table} WHERE root=? AND path=?", (root, path))


def _reresolve(db: sqlite3.Connection, root: str, names: list[str]) -> None:
    """Resolve again the links a document of these names may be the target of:
    once per distinct target, whatever the number of links to it (a thousand
    README.md linking to ../README.md is one lookup, not a thousand)."""
    if not names:
        return
    # Only the links whose answer changes are written (rewriting a thousand
    # unchanged links for each note added made N notes named index.md, each
    # linking [[index]], quadratic: 31 s at 4,000); the comparison runs in the
    # covering index. (A new note's own links may already hold the new answer,
    # so one link's answer says nothing of the others'.)
    changed = []
    for key in names:
        for kind, target in _targets(db, root, key):
            answer = _answer(db, root, "", kind, target)
            changed.append((*answer, root, key, kind, target, answer[0], int(answer[1])))
    db.executemany(
        "UPDATE links SET to_path=?, asset=? WHERE root=? AND key=? AND kind=? AND target=? "
        "AND (to_path IS NOT ? OR asset != ?)",
        changed,
    )


def _targets(db: sqlite3.Connection, root: str, key: str) -> Iterator[tuple[str, str]]:
    """Each distinct (kind, target) of the resolvable links with this key: a skip
    from one to the next along the index, so a thousand links to one target
    cost one step, not a thousand rows. An empty target is a wiki link's own
    note ([[#Heading]]), or a markdown link's root folder ([](./) at the root:
    its README.md may come later)."""
    after = ("", "")
    while True:
        row = db.execute(
            "SELECT kind, target FROM links WHERE root=? AND key=? "
            "AND (kind, target) > (?, ?) AND kind != ? AND problem = '' "
            "AND (target != '' OR kind = ?) ORDER BY kind, target LIMIT 1",
            (root, key, *after, EXTERNAL, LINK),
        ).fetchone()
        if row is None:
            return
        yield row[0], row[1]
        after = (row[0], row[1])


def _answer(
    db: sqlite3.Connection, root: str, source: str, kind: str, target: str
) -> tuple[str | None, bool]:
    """Where a link goes: a document, or else whether it names an attachment
    (a document is tried first: ``[[john.doe]]`` is a note, ``docs/v1.2/`` a page)."""
    to = None if kind == IMAGE else resolve(db, root, source, kind, target)
    return to, to is None and is_asset(kind, target)


# -- reading -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkRow:
    """One recorded link, with where it points now."""

    root: str
    path: str  # the document it is in
    kind: str
    target: str
    anchor: str
    label: str
    line: int
    section: str
    context: str
    problem: str
    asset: bool
    to_path: str | None


_COLUMNS = (
    "root, path, kind, target, anchor, label, line, section, context, problem, asset, to_path"
)


def _rows(cursor: Iterable[tuple[object, ...]]) -> Iterator[LinkRow]:
    for r in cursor:
        yield LinkRow(*r[:10], bool(r[10]), r[11])  # type: ignore[arg-type,call-arg]


def outgoing(db: sqlite3.Connection, root: str, path: str) -> list[LinkRow]:
    sql = f"SELECT {_COLUMNS} FROM links WHERE root=? AND path=? ORDER BY n"
    return list(_rows(db.execute(sql, (root, path))))


def backlinks(db: sqlite3.Connection, root: str, path: str) -> list[LinkRow]:
    """Links of other documents that resolve to this one."""
    sql = f"SELECT {_COLUMNS} FROM links WHERE root=? AND to_path=? AND path != ? ORDER BY path, n"
    return list(_rows(db.execute(sql, (root, path, path))))


def every_link(db: sqlite3.Connection) -> Iterator[LinkRow]:
    """Every local link (not external), document by document."""
    sql = f"SELECT {_COLUMNS} FROM links WHERE kind != ? ORDER BY root, path, n"
    return _rows(db.execute(sql, (EXTERNAL,)))


def node(db: sqlite3.Connection, root: str, path: str) -> tuple[str, dict[str, str]] | None:
    """A document's title and heading anchors (anchor: heading text), or None."""
    row = db.execute(
        "SELECT title, anchors FROM nodes WHERE root=? AND path=?", (root, path)
    ).fetchone()
    return None if row is None else (str(row[0]), json.loads(row[1]))


def tags_of(db: sqlite3.Connection, root: str, path: str) -> list[str]:
    rows = db.execute("SELECT tag FROM tags WHERE root=? AND path=? ORDER BY tag", (root, path))
    return [t for (t,) in rows]


def sharing_tags(
    db: sqlite3.Connection, root: str, path: str, most: int = 50
) -> list[tuple[str, str, list[str]]]:
    """Other documents with a tag of this one, most shared tags first."""
    rows = db.execute(
        "SELECT b.root, b.path, group_concat(b.tag, char(31)) FROM tags a JOIN tags b "
        "ON a.tag = b.tag AND NOT (a.root = b.root AND a.path = b.path) "
        "WHERE a.root=? AND a.path=? GROUP BY b.root, b.path "
        "ORDER BY count(*) DESC, b.root, b.path LIMIT ?",
        (root, path, most),
    )
    return [(r, p, sorted(str(t).split("\x1f"))) for r, p, t in rows]


def unresolved_count(db: sqlite3.Connection) -> int:
    """Local links to documents that are not indexed (attachments aside)."""
    row = db.execute(
        "SELECT count(*) FROM links WHERE to_path IS NULL AND kind != ? AND asset = 0",
        (EXTERNAL,),
    ).fetchone()
    return int(row[0])


def misresolved(db: sqlite3.Connection) -> set[tuple[str, str]]:
    """Documents with a link whose recorded answer is not what resolving it
    now gives (verify): each distinct target resolved once."""
    rows = db.execute(
        "SELECT root, kind, target, path, to_path, asset FROM links "
        "WHERE kind != ? AND problem = '' AND (target != '' OR kind = ?)",
        (EXTERNAL, LINK),
    )
    answers: dict[tuple[str, str, str], tuple[str | None, bool]] = {}
    out = set()
    # streamed: fetching all 531k links of bench/scale.py's 100k files at once
    # grew the process by 226 MB, at verify's end
    for root, kind, target, path, to_path, asset in rows:
        if (root, kind, target) not in answers:
            answers[(root, kind, target)] = _answer(db, root, "", kind, target)
        if answers[(root, kind, target)] != (to_path, bool(asset)):
            out.add((root, path))
    return out


def digests(db: sqlite3.Connection) -> dict[tuple[str, str], str]:
    """Each recorded document's graph digest (``Graph.digest``)."""
    return {(r, p): d for r, p, d in db.execute("SELECT root, path, digest FROM nodes")}
