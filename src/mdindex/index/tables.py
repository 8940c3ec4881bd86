"""The local state's SQLite tables: made when it is opened, emptied when they
are of another version; and the languages recorded beside the documents."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path

from mdindex.index import graph

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    root TEXT NOT NULL, path TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    doc_hash TEXT NOT NULL, fingerprint TEXT NOT NULL,
    PRIMARY KEY (root, path)
);
CREATE TABLE IF NOT EXISTS points (
    id TEXT PRIMARY KEY, root TEXT NOT NULL, path TEXT NOT NULL,
    vector_key TEXT NOT NULL, pending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS points_doc ON points (root, path);
-- Documents that other processes (Ray workers) may be writing to the store:
-- their point IDs are not known here until the driver commits them.
CREATE TABLE IF NOT EXISTS inflight (
    root TEXT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (root, path)
);
CREATE INDEX IF NOT EXISTS points_vector ON points (vector_key);
-- Files the last syncs could not index, for status (added without a schema
-- bump: older states gain the empty table).
CREATE TABLE IF NOT EXISTS failures (
    root TEXT NOT NULL, path TEXT NOT NULL, reason TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (root, path)
);
-- Each document's language (payload lang), for status: added without a schema
-- bump, filled as documents are written (the payload layout that brought lang
-- rewrites every document once).
CREATE TABLE IF NOT EXISTS langs (
    root TEXT NOT NULL, path TEXT NOT NULL, lang TEXT NOT NULL, PRIMARY KEY (root, path)
);
CREATE TRIGGER IF NOT EXISTS langs_follow_docs AFTER DELETE ON docs BEGIN
    DELETE FROM langs WHERE root = old.root AND path = old.path;
END;
"""


# What status counts after every sync reads through these instead of the
# tables: at 100,000 files (545k points, 531k links) the counts took 51, 69 and
# 119 ms, and 7, 16 and 4 ms with them (bench/scale.py's kept state, AMD EPYC).
# Made apart from the schema, and only where the state can be written now.
COUNT_INDEXES = {
    "points_pending": "CREATE INDEX IF NOT EXISTS points_pending ON points (pending)",
    "langs_lang": "CREATE INDEX IF NOT EXISTS langs_lang ON langs (lang)",
    "links_unresolved": "CREATE INDEX IF NOT EXISTS links_unresolved ON links (kind) "
    "WHERE to_path IS NULL AND asset = 0",
}


def languages(db: sqlite3.Connection) -> dict[str, int]:
    """Documents indexed per language ("" unknown), most first; documents
    written before languages were recorded are not counted. A row is written
    after its document's (``put_languages``) and goes with it (the trigger)."""
    rows = db.execute("SELECT lang, COUNT(*) FROM langs GROUP BY lang ORDER BY COUNT(*) DESC, lang")
    return {lang: n for lang, n in rows}


def put_languages(db: sqlite3.Connection, langs: Mapping[tuple[str, str], str]) -> None:
    """Record documents' languages (by (root, path)), after ``State.commit_docs``."""
    rows = [(root, path, lang) for (root, path), lang in langs.items()]
    db.executemany("INSERT OR REPLACE INTO langs VALUES (?, ?, ?)", rows)


def connect(path: Path) -> tuple[sqlite3.Connection, bool]:
    """The state's database at ``path``, its tables made; True with it when
    this open created it or emptied one of another version."""
    fresh = False
    existed = path.exists() and path.stat().st_size > 0
    # Created 0600 before SQLite opens it: its -wal and -shm files take its mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA + graph.SCHEMA)
        row = db.execute("SELECT v FROM meta WHERE k='schema'").fetchone()
    except sqlite3.DatabaseError:
        db.close()
        raise
    if row is None or row[0] != SCHEMA_VERSION:
        if existed:
            log.warning("state %s is empty or from another version; rebuilding", path)
        db.executescript("DELETE FROM docs; DELETE FROM points; DELETE FROM meta;")
        graph.clear(db)
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        fresh = True
    _rekey(db)
    _count_indexes(db)
    return db, fresh


def _count_indexes(db: sqlite3.Connection) -> None:
    """``COUNT_INDEXES`` made, once. Not in the schema script: an index made on
    an existing state needs the write lock, and the schema's error (a state
    another holds busy, a read-only file) reads as a damaged state. Here the
    state gains them at a later open instead."""
    have = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    if have >= COUNT_INDEXES.keys():
        return
    # held by a writer: tried at a later open, at once (every open waited out
    # the 5 s busy timeout while another wrote)
    waited = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute("BEGIN IMMEDIATE")
        for sql in COUNT_INDEXES.values():
            db.execute(sql)
        db.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        log.debug("state busy or read-only; its count indexes are made later: %s", exc)
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(waited)}")


def _rekey(db: sqlite3.Connection) -> None:
    """Links keyed by an older ``graph.key_of`` keyed again, once; a state
    another holds busy is keyed at a later open."""
    row = db.execute("SELECT v FROM meta WHERE k='graph_keys'").fetchone()
    if row is not None and row[0] == graph.KEYS_VERSION:
        return
    try:
        db.execute("BEGIN IMMEDIATE")
        graph.rekey(db)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('graph_keys', ?)", (graph.KEYS_VERSION,))
        db.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if db.in_transaction:
            db.execute("ROLLBACK")
        log.debug("state busy; its links are keyed again later: %s", exc)
