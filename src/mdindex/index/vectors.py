"""Where a planned point's vector comes from: the same point in the store, any
point with the same vector key (the model and the embedded text), a sibling
version of the same model, or else the model. The local state says which
keys the store holds (``known``, ``ids_for``); the store's own key beside each
vector decides whether it is taken (``reusable``)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Iterable, Sequence

from mdindex.embedding.embedder import Embedder
from mdindex.index.planning import DocWork, Planned
from mdindex.index.state import State
from mdindex.index.summary import Summary
from mdindex.sinks import Store


def ids_for(db: sqlite3.Connection, keys: Iterable[str]) -> dict[str, str]:
    """Points that may hold the vectors of these keys, point ID -> vector key:
    one committed point per key, and for a key no committed point has, every
    pending point with it (a write that stopped after its upsert left those
    vectors in the store; a caller checks the key stored with the point)."""
    out: dict[str, str] = {}
    covered: set[str] = set()
    keys = list(keys)
    for i in range(0, len(keys), 500):
        batch = keys[i : i + 500]
        marks = ",".join("?" * len(batch))
        rows = db.execute(
            f"SELECT vector_key, id, pending FROM points WHERE vector_key IN ({marks}) "
            "ORDER BY pending",
            batch,
        )
        for key, pid, pending in rows:
            if key in covered:
                continue
            if not pending:
                covered.add(key)
            out[pid] = key
    return out


def donors(db: sqlite3.Connection) -> dict[str, str]:
    """Every vector key of a committed point (vectors the store holds), each
    with one point that has it."""
    rows = db.execute("SELECT vector_key, min(id) FROM points WHERE pending=0 GROUP BY vector_key")
    return {key: pid for key, pid in rows}


def known(db: sqlite3.Connection, keys: Iterable[str]) -> set[str]:
    """The keys some committed point has (vectors the store surely holds)."""
    keys = list(keys)
    out: set[str] = set()
    for i in range(0, len(keys), 500):
        batch = keys[i : i + 500]
        marks = ",".join("?" * len(batch))
        out.update(
            key
            for (key,) in db.execute(
                f"SELECT DISTINCT vector_key FROM points "
                f"WHERE pending=0 AND vector_key IN ({marks})",
                batch,
            )
        )
    return out


def reusable(store: Store, wanted: dict[str, str]) -> dict[str, list[float]]:
    """Vectors by vector key, from the stored points named in ``wanted`` (point ID
    -> the vector key needed). A point's vector is taken only when the key
    stored with it is the one needed: a point ID leaves out what the context
    prefix adds, so the same ID can carry the vector of another embedded text."""
    found: dict[str, list[float]] = {}
    for pid, (key, vector) in store.vectors(list(wanted)).items():
        if key == wanted[pid]:
            found.setdefault(key, vector)
    return found


class Vectors:
    """The vectors a write needs, found or embedded."""

    def __init__(
        self,
        store: Store,
        state: State,
        embedder: Embedder,
        siblings: Sequence[tuple[Store, State]] = (),
    ) -> None:
        self.store = store
        self.state = state
        self.embedder = embedder
        # Other versions of the index, same model: their vectors for the same
        # embedded text are taken rather than embedded again (mdindex.versions.rollout).
        self.siblings = list(siblings)

    def unknown_keys(self, group: list[DocWork]) -> set[str]:
        """The group's vector keys no version's state knows: the texts to embed."""
        keys = {p.vector_key for w in group for p in w.points}
        held = known(self.state.db, keys)
        for _, state in self.siblings:
            held |= known(state.db, keys - held)
        return keys - held

    def embed(self, planned: Sequence[Planned]) -> list[list[float]]:
        """Vectors for planned points, from the model, as stored (float32 lists).
        Chunking already tokenized most texts; the embedder reuses those ids."""
        matrix = self.embedder.embed(
            [p.embed_input for p in planned], token_ids=[p.token_ids for p in planned]
        )
        import numpy as np

        return np.asarray(matrix, dtype=np.float32).tolist()  # type: ignore[no-any-return]

    def timed_embed(self, planned: Sequence[Planned]) -> tuple[list[list[float]], float]:
        """``embed``, and the seconds it took (a summary's share of time embedding)."""
        started = time.perf_counter()
        vectors = self.embed(planned)
        return vectors, time.perf_counter() - started

    def lookup(
        self, planned: Sequence[Planned]
    ) -> tuple[dict[str, list[float]], dict[str, Planned]]:
        """Vectors the store already has (same point, or any point with the same key),
        and a point for each vector still missing, both by vector key."""
        by_key = reusable(self.store, {p.id: p.vector_key for p in planned})
        wanted = {p.vector_key for p in planned} - by_key.keys()
        if wanted:
            by_key |= reusable(self.store, ids_for(self.state.db, wanted))
            wanted -= by_key.keys()
        for store, state in self.siblings:
            if not wanted:
                break
            found = reusable(store, ids_for(state.db, wanted))
            by_key |= found
            wanted -= found.keys()
        todo: dict[str, Planned] = {}
        for p in planned:
            if p.vector_key not in by_key:
                todo.setdefault(p.vector_key, p)
        return by_key, todo

    def needed(
        self,
        planned: Sequence[Planned],
        summary: Summary,
        have: dict[str, list[float]] | None = None,
        distrust: Collection[str] = (),
    ) -> dict[str, list[float]]:
        """Vectors by vector key: from ``have``, from the same point, from any point
        with that key, or embedded; keys in ``distrust`` (stored vectors known to
        be wrong) are always embedded."""
        have = have or {}
        by_key, todo = self.lookup(
            [p for p in planned if p.vector_key not in distrust and p.vector_key not in have]
        )
        by_key |= {k: v for k, v in have.items() if k not in distrust}
        todo |= {p.vector_key: p for p in planned if p.vector_key in distrust}
        if todo:
            embedded, seconds = self.timed_embed(list(todo.values()))
            by_key.update(zip(todo, embedded, strict=True))
            summary.chunks_embedded += len(todo)
            summary.embed_seconds += seconds
        return by_key
