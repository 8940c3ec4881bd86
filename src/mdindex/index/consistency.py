"""The state must describe the store it sits beside, or it is rebuilt from it.

The state is a cache: a lost, emptied or foreign one, or one that disagrees
with the store's count beyond what an interrupted write explains, is rebuilt
from the store's own points (their IDs, documents and vector keys), so every
vector the store holds is reused and nothing is embedded again.
"""

from __future__ import annotations

import logging

from mdindex.index.state import PointRow, State
from mdindex.sinks import Store

log = logging.getLogger(__name__)


def store_identity(store: Store) -> str:
    """Which store a state describes: its place and collection."""
    return f"{store.where}#{store.collection}"


def mismatch(store: Store, state: State) -> str:
    """Why the state cannot be trusted for this (open) store, "" when it can.
    Writes that other processes or a crash left unfinished are taken in first."""
    described = state.get("store")
    if state.fresh or (described is None and state.is_empty()):
        # a new state (or one a read-only command left empty, never told a store)
        return "no local state" if store.count() else ""
    if described != store_identity(store):
        return "state belongs to another store"
    recover_inflight(store, state)
    interrupted = state.invalidate_pending_docs()
    if interrupted:
        log.info("%d documents were interrupted mid-write; they will be re-synced", interrupted)
    committed, pending = state.point_counts()
    # An interrupted write may have added its new points and deleted some old ones.
    at_risk = state.committed_at_risk()
    stored = store.count()
    if not committed - at_risk <= stored <= committed + pending:
        return f"state knows {committed} points, store holds {stored}"
    return ""


def recover_inflight(store: Store, state: State) -> None:
    """Documents other processes were writing when a run stopped: whatever the
    store holds for them becomes pending here, so the next sync of each
    document deletes what its plan no longer has."""
    docs = state.inflight()
    if not docs:
        return
    log.info("%d documents were being written by workers; reading back their points", len(docs))
    found = [
        (root, path, [PointRow(pid, key) for pid, key in store.doc_points(root, path).items()])
        for root, path in docs
    ]
    state.mark_pending(found)
    state.clear_inflight(docs)


def rebuild_state(store: Store, state: State, reason: str, level: int = logging.WARNING) -> None:
    """The state started over from the store's points: every file is re-chunked
    and compared on the next sync, and every stored vector reused."""
    log.log(level, "rebuilding local state from the store (%s)", reason)
    records = (
        (pid, str(p.get("root", "")), str(p.get("doc_path", "")), str(p.get("vector_key", "")))
        for pid, p, _ in store.scroll(payload=["root", "doc_path", "vector_key"])
    )
    n = state.rebuild(records)
    state.fresh = False
    log.info("state rebuilt with %d points; files will be re-chunked and compared", n)
