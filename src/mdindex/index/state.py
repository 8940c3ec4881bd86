"""Local state: a SQLite cache of what the store holds, never the truth.

It remembers each document's size, mtime and hash (the fast path) and the
point IDs written for it (so deletes go by ID). If it is lost, corrupt or
disagrees with the store, it is rebuilt from the store. Its tables are
``tables``; which vectors it knows the store holds, ``vectors``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mdindex.documents.files import Failure, printable
from mdindex.documents.links import Graph
from mdindex.errors import StateError
from mdindex.index import graph, tables
from mdindex.jsonfile import private_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DocRow:
    size: int
    mtime_ns: int
    doc_hash: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class PointRow:
    id: str
    vector_key: str


def path_scopes(rel: str) -> list[tuple[str, tuple[str, ...]]]:
    """The SQL conditions, with their arguments, for the documents at ``rel`` or
    below it ("" is the whole root). Paths below "a/b" sort between "a/b/" and
    "a/b0" ("0" follows "/"). One query for the path and one for the range:
    joined by OR, SQLite read the points by root alone, every point of the root
    for each path of a batch (113 ms a path at 1.09M points, and a 1,000-file
    checkout took longer than 120 s at 200,000 files)."""
    if not rel:
        return [("1", ())]
    return [("path=?", (rel,)), ("path>=? AND path<?", (f"{rel}/", f"{rel}0"))]


# The roots that hold points, one step of the (root, path) index each: a
# plain DISTINCT reads the whole index (a million rows at 200,000 files).
_ROOTS = """WITH RECURSIVE r(root) AS (
    SELECT min(root) FROM points
    UNION ALL SELECT (SELECT min(root) FROM points WHERE root > r.root) FROM r
    WHERE r.root IS NOT NULL
) SELECT root FROM r WHERE root IS NOT NULL"""


def names_files(signature: str) -> bool:
    """A store's signature that says what its files are: not "" (a server's,
    or none recorded) and not "absent" (no store yet)."""
    return bool(signature) and signature != "absent"


def store_reopened(path: Path, before: str, after: str) -> None:
    """Record in the state at ``path`` that a process which only read the store
    (a search without the daemon) found its files as the last run left them
    (``before``) and left them as ``after``: qdrant-edge rewrites some of its
    files on every open and close, and the next no-op or offline status then
    checked the whole store (at 1.09M points 11.7 s and 1.2 GB of RSS, against
    4.8 s and 430 MB). A compare and set: nothing changes unless the state
    still records ``before``, so a writer's record in between stands; never raises."""
    if not names_files(before) or not after or after == before:
        return
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hold the search
            return
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True, timeout=1)
        try:
            with db:
                db.execute("UPDATE meta SET v=? WHERE k='store_signature' AND v=?", (after, before))
        finally:
            db.close()
    except (OSError, sqlite3.Error, UnicodeEncodeError) as exc:  # a state it may not write
        log.debug("cannot record the store's files after a search: %s", exc)


def points_under(path: Path, roots: Sequence[str], prefix: str, most: int) -> list[str] | None:
    """The paths starting with ``prefix``, in ``roots`` (every root when none),
    of the documents the state at ``path`` records points of; None when they
    hold more than ``most`` points, none, or the state cannot be read. On a
    read-only connection of its own: a daemon searches on threads beside its
    writer, which holds the state's."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix and prefix[-1] < "\U0010ffff" else ""
    if not end:
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would hold the search for ever
            return None
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            labels = list(roots) or [str(r[0]) for r in db.execute(_ROOTS)]
            marks = ",".join("?" * len(labels))
            rows = db.execute(  # a range of the (root, path) index, most + 1 rows at most
                f"SELECT path FROM points WHERE root IN ({marks}) AND path>=? AND path<? LIMIT ?",
                (*labels, prefix, end, most + 1),
            ).fetchall()
        finally:
            db.close()
    except (OSError, sqlite3.Error, UnicodeEncodeError):  # EACCES; a lone surrogate
        return None
    if not rows or len(rows) > most:
        return None
    return sorted({str(r[0]) for r in rows})


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fresh = False  # True when this open created or replaced the file
        private_dir(path.parent)
        try:
            self.db, self.fresh = tables.connect(path)
        except sqlite3.OperationalError as exc:
            # Locked, busy, unopenable: not damage. "database is locked" (another
            # connection holding it exclusively) was taken for a damaged state,
            # and a read-only status deleted it.
            raise StateError(f"local state {path} cannot be opened: {exc}") from exc
        except sqlite3.DatabaseError as exc:  # not a database, or a malformed one
            log.warning("state %s is unreadable (%s); rebuilding it from the store", path, exc)
            self._discard()
            self.db, self.fresh = tables.connect(path)

    def _discard(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise StateError(f"local state {self.path} refuses writes: {exc}") from exc

    # -- meta ------------------------------------------------------------

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT v FROM meta WHERE k=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def adopt_store(self, identity: str) -> None:
        """Describe another store from now on (after a migration copied everything
        to it); its files are not known yet, so the next run checks it."""
        self.put("store", identity)
        self.put("store_signature", "")

    # -- documents -------------------------------------------------------

    def docs(self) -> dict[tuple[str, str], DocRow]:
        return {
            (r, p): DocRow(s, m, h, f)
            for r, p, s, m, h, f in self.db.execute(
                "SELECT root, path, size, mtime_ns, doc_hash, fingerprint FROM docs"
            )
        }

    def doc_count_by_root(self, with_points: bool = False) -> dict[str, int]:
        """Documents recorded, per root label; ``with_points``: also those known
        only by their points (pending ones, a state rebuilt from the store)."""
        docs = "SELECT root, path FROM docs"
        if with_points:
            docs += " UNION SELECT root, path FROM points"
        rows = self.db.execute(f"SELECT root, count(*) FROM ({docs}) GROUP BY root")
        return {r: int(n) for r, n in rows}

    def is_empty(self) -> bool:
        """No document and no point recorded."""
        sql = "SELECT 1 FROM docs UNION ALL SELECT 1 FROM points LIMIT 1"
        return self.db.execute(sql).fetchone() is None

    def doc_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def known_docs(self) -> set[tuple[str, str]]:
        """Documents with a row or with points (pending ones included): a UNION
        sorted every point (0.89 s against 0.36 at 1.09M points, AMD EPYC)."""
        known = {(r, p) for r, p in self.db.execute("SELECT root, path FROM docs")}
        known.update(self.db.execute("SELECT DISTINCT root, path FROM points"))
        return known

    def under(
        self, root: str, rel: str
    ) -> tuple[set[tuple[str, str]], dict[tuple[str, str], DocRow]]:
        """Known documents and their rows at ``rel`` (a file) or below it (a folder).

        An index range, not a scan, so the daemon's per-event work does not grow
        with the size of the index. ``rel`` empty means the whole root.
        """
        rows: dict[tuple[str, str], DocRow] = {}
        known: set[tuple[str, str]] = set()
        for scope, args in path_scopes(rel):
            docs = self.db.execute(
                "SELECT root, path, size, mtime_ns, doc_hash, fingerprint FROM docs "
                f"WHERE root=? AND {scope}",
                (root, *args),
            )
            rows.update({(r, p): DocRow(s, m, h, f) for r, p, s, m, h, f in docs})
            pending = self.db.execute(
                f"SELECT DISTINCT root, path FROM points WHERE root=? AND {scope}", (root, *args)
            )
            known.update((r, p) for r, p in pending)
        return rows.keys() | known, rows

    def touch(self, root: str, rel: str, size: int, mtime_ns: int) -> None:
        sql = "UPDATE docs SET size=?, mtime_ns=? WHERE root=? AND path=?"
        with self.transaction() as db:
            db.execute(sql, (size, mtime_ns, root, rel))

    # -- points ----------------------------------------------------------

    def point_ids(self, root: str, rel: str, committed_only: bool = False) -> set[str]:
        sql = "SELECT id FROM points WHERE root=? AND path=?"
        rows = self.db.execute(sql + (" AND pending=0" if committed_only else ""), (root, rel))
        return {r[0] for r in rows}

    def drop_pending(self, root: str, rel: str) -> None:
        """Forget the IDs a write of this document was about to add (it failed)."""
        with self.transaction() as db:
            db.execute("DELETE FROM points WHERE root=? AND path=? AND pending=1", (root, rel))

    def point_counts(self) -> tuple[int, int]:
        """(committed, pending) point rows."""
        # both counted on the pending index (tables.COUNT_INDEXES): 7 ms at 545k
        # points, where summing the column read the table, 51 ms
        sql = "SELECT count(*), (SELECT count(*) FROM points WHERE pending = 1) FROM points"
        total, pending = self.db.execute(sql).fetchone()
        return int(total) - int(pending), int(pending)

    def committed_at_risk(self) -> int:
        """Committed points of documents that were interrupted mid-write (may be deleted)."""
        row = self.db.execute(
            "SELECT count(*) FROM points WHERE pending=0 AND (root, path) IN "
            "(SELECT root, path FROM points WHERE pending=1)"
        ).fetchone()
        return int(row[0])

    def mark_pending(self, docs: Sequence[tuple[str, str, Sequence[PointRow]]]) -> None:
        """Record IDs about to be written, so a crash cannot orphan them."""
        with self.transaction() as db:
            for root, path, points in docs:
                db.executemany(
                    "INSERT OR IGNORE INTO points (id, root, path, vector_key, pending) "
                    "VALUES (?, ?, ?, ?, 1)",
                    [(p.id, root, path, p.vector_key) for p in points],
                )

    def commit_docs(
        self,
        docs: Sequence[tuple[str, str, DocRow, Sequence[PointRow]]],
        sync_time: str,
        graphs: Mapping[tuple[str, str], Graph] | None = None,
    ) -> None:
        """Record documents as written, and their link graphs (by (root, path))."""
        with self.transaction() as db:
            for root, path, row, points in docs:
                db.execute("DELETE FROM points WHERE root=? AND path=?", (root, path))
                db.executemany(
                    "INSERT OR REPLACE INTO points (id, root, path, vector_key, pending) "
                    "VALUES (?, ?, ?, ?, 0)",
                    [(p.id, root, path, p.vector_key) for p in points],
                )
                db.execute(
                    "INSERT OR REPLACE INTO docs VALUES (?, ?, ?, ?, ?, ?)",
                    (root, path, row.size, row.mtime_ns, row.doc_hash, row.fingerprint),
                )
            for (root, path), doc_graph in (graphs or {}).items():
                graph.put(db, root, path, doc_graph)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('last_write', ?)", (sync_time,))

    def remove_docs(self, docs: Iterable[tuple[str, str]]) -> None:
        with self.transaction() as db:
            for root, path in docs:
                db.execute("DELETE FROM points WHERE root=? AND path=?", (root, path))
                db.execute("DELETE FROM docs WHERE root=? AND path=?", (root, path))
                graph.remove(db, root, path)

    def mark_inflight(self, docs: Iterable[tuple[str, str]]) -> None:
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO inflight VALUES (?, ?)", list(docs))

    def clear_inflight(self, docs: Iterable[tuple[str, str]]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM inflight WHERE root=? AND path=?", list(docs))

    def inflight(self) -> list[tuple[str, str]]:
        return [(r, p) for r, p in self.db.execute("SELECT root, path FROM inflight")]

    def note_failures(
        self, scope: Iterable[tuple[str, str]] | None, failures: Iterable[Failure], at: str
    ) -> None:
        """Forget the failures recorded for ``scope`` (None: all of them) and record these."""
        with self.transaction() as db:
            if scope is None:
                db.execute("DELETE FROM failures")
            else:
                # kept under the name printable() shows, so forgotten under it too
                shown = [(root, printable(rel)) for root, rel in scope]
                db.executemany("DELETE FROM failures WHERE root=? AND path=?", shown)
            db.executemany(
                "INSERT OR REPLACE INTO failures VALUES (?, ?, ?, ?)",
                [(f.root, printable(f.rel), f.reason, at) for f in failures],
            )

    def failed_under(self, root: str, rel: str) -> set[tuple[str, str]]:
        """The failures recorded at ``rel`` or below it, keyed as they are kept
        (their paths as printable() shows them), as ``under`` finds documents."""
        rel = printable(rel)
        scope = "root=? AND (path=? OR (path>=? AND path<?))" if rel else "root=?"
        args: tuple[str, ...] = (root, rel, f"{rel}/", f"{rel}0") if rel else (root,)
        rows = self.db.execute(f"SELECT root, path FROM failures WHERE {scope}", args)
        return {(r, p) for r, p in rows}

    def failures(self) -> list[dict[str, str]]:
        rows = self.db.execute("SELECT root, path, reason, at FROM failures ORDER BY root, path")
        return [{"root": r, "path": p, "reason": why, "at": at} for r, p, why, at in rows]

    def invalidate_pending_docs(self) -> int:
        """Docs with pending points were interrupted mid-write: force them to resync."""
        with self.transaction() as db:
            cur = db.execute(
                "UPDATE docs SET fingerprint='' WHERE (root, path) IN "
                "(SELECT root, path FROM points WHERE pending=1)"
            )
            return cur.rowcount

    def rebuild(self, records: Iterable[tuple[str, str, str, str]]) -> int:
        """Replace everything with (id, root, path, vector_key) read from the store.

        Document rows are dropped, so every file is re-chunked and compared on
        the next sync; vectors the store holds are reused, not re-embedded.
        """
        n = 0
        with self.transaction() as db:
            db.execute("DELETE FROM docs")
            db.execute("DELETE FROM points")
            db.execute("DELETE FROM inflight")  # the store's own points are read below
            graph.clear(db)  # recorded again as each document is written
            for pid, root, path, key in records:
                db.execute(
                    "INSERT OR REPLACE INTO points VALUES (?, ?, ?, ?, 0)", (pid, root, path, key)
                )
                n += 1
        return n
