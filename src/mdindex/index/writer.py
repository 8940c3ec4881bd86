"""Writing: planned documents into the store, and the state's record of them.

For every group of documents, the IDs about to be written are recorded first
as pending, then the new points are upserted, then the points the documents
no longer have are deleted, and the state is committed last. A crash at any
moment therefore leaves the store with extra points the next run knows about
and removes, never with a document missing. Vectors the store already holds
(same point, or any point with the same vector key) are reused; the rest are
embedded, on a worker thread while the next group is read when a core is
free for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mdindex.documents.files import Failure, FileRef, printable, trusted_mtime
from mdindex.documents.links import Graph
from mdindex.embedding.embedder import Embedder
from mdindex.errors import StoreError, StoreUnavailable
from mdindex.index import consistency
from mdindex.index.changes import Key
from mdindex.index.planning import DocWork, Planned, now_iso
from mdindex.index.state import DocRow, PointRow, State, put_languages
from mdindex.index.summary import Summary
from mdindex.retry import short
from mdindex.sinks import Store

log = logging.getLogger(__name__)

CRASH_ENV = "MDINDEX_CRASH_POINT"
CRASH_POINTS = ("after_chunk", "after_embed", "after_upsert", "after_delete", "after_commit")
# Where a version's rollout can die (mdindex.versions.rollout): a build dies at the points above.
ROLLOUT_CRASH_POINTS = ("before_switch", "after_switch", "during_drop")


def crash_point(name: str) -> None:
    """Die here, as a power cut would, when MDINDEX_CRASH_POINT names this point.

    ``name@N`` dies at the N-th time the point is reached in this process.
    """
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    target, _, nth = wanted.partition("@")
    if target != name:
        return
    _crash_hits[name] = _crash_hits.get(name, 0) + 1
    if _crash_hits[name] >= int(nth or 1):
        log.warning("crash point %s reached; exiting", name)
        logging.shutdown()
        os._exit(86)


_crash_hits: dict[str, int] = {}


class _Inline:
    """An executor that runs each task at once, for machines with no core to spare."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)
        return future

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class Staged:
    """A group whose vectors are being found or embedded, not yet written."""

    works: list[DocWork]
    planned: list[Planned]
    by_key: dict[str, list[float]]
    todo: list[str]  # vector keys being embedded, in the order of the future's rows
    future: Future[Any] | None
    lender: Staged | None = None  # the previous group, embedding keys we also need
    borrowed: list[str] = field(default_factory=list)


class Writer:
    """Writes planned documents to the store and records them in the state."""

    def __init__(
        self,
        store: Store,
        state: State,
        embedder: Embedder,
        fingerprint: str,
        ensure_open: Callable[[], None],
        on_indexed: Callable[[list[FileRef]], None] | None = None,
        siblings: Sequence[tuple[Store, State]] = (),
    ) -> None:
        self.store = store
        self.state = state
        self.embedder = embedder
        self.fingerprint = fingerprint  # recorded with each document written
        self.ensure_open = ensure_open  # the store is opened (and checked) on first write
        self.on_indexed = on_indexed
        # Other versions of the index, same model: their vectors for the same
        # embedded text are taken rather than embedded again (mdindex.versions.rollout).
        self.siblings = list(siblings)
        # With two cores or fewer, torch's threads already fill the machine and
        # work beside them only slows them down (bench/backfill.py: overhead 1.19 with
        # the worker thread, 0.98 without, in bf16), so embedding runs inline.
        self.pipelined = (os.cpu_count() or 1) > 2

    def pool(self) -> ThreadPoolExecutor | _Inline:
        """Where embedding runs while this thread writes and reads the next group."""
        if self.pipelined:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mdindex-embed")
        return _Inline()

    def count_dry(self, group: list[DocWork], summary: Summary) -> None:
        """What writing this group would do, from the state alone."""
        summary.chunks_embedded += len(self.unknown_keys(group))
        summary.points_upserted += sum(len(w.points) for w in group)
        for w in group:
            old = self.state.point_ids(w.ref.root, w.ref.rel) - {p.id for p in w.points}
            summary.points_deleted += len(old)
        summary.files_changed += len(group)

    def unknown_keys(self, group: list[DocWork]) -> set[str]:
        """The group's vector keys no version's state knows: the texts to embed."""
        keys = {p.vector_key for w in group for p in w.points}
        known = self.state.has_vector_keys(keys)
        for _, state in self.siblings:
            known |= state.has_vector_keys(keys - known)
        return keys - known

    def stage(
        self, group: list[DocWork], pool: ThreadPoolExecutor | _Inline, previous: Staged | None
    ) -> Staged:
        """Find reusable vectors, and start embedding the rest on the worker thread.

        Keys the previous group is still embedding are borrowed from it once it
        is written, so a chunk repeated across neighbouring groups is embedded once.
        """
        self.ensure_open()
        planned = [p for w in group for p in w.points]
        by_key, todo = self.lookup(planned)
        inflight = set(previous.todo) if previous is not None else set()
        borrowed = [key for key in todo if key in inflight]
        for key in borrowed:
            del todo[key]
        future = pool.submit(self.timed_embed, list(todo.values())) if todo else None
        return Staged(group, planned, by_key, list(todo), future, previous, borrowed)

    def write(self, staged: Staged, summary: Summary, prewritten: bool = False) -> None:
        """Write one group: pending IDs, new points, deletes of old ones, then the state.

        ``prewritten``: Ray workers already wrote the points to a server (their
        documents are marked in flight); only deletes and the state remain.
        """
        group, planned, vectors = staged.works, staged.planned, staged.by_key
        if staged.lender is not None:  # written before us, so its vectors are in
            vectors.update((key, staged.lender.by_key[key]) for key in staged.borrowed)
            staged.lender = None  # keep the chain of groups from growing in memory
        if staged.future is not None:
            embedded, seconds = staged.future.result()
            vectors.update(zip(staged.todo, embedded, strict=True))
            summary.chunks_embedded += len(staged.todo)
            summary.embed_seconds += seconds
        crash_point("after_embed")
        stamp = now_iso()
        if prewritten:
            summary.points_upserted += len(planned)
        else:
            self.state.mark_pending(
                [
                    (w.ref.root, w.ref.rel, [PointRow(p.id, p.vector_key) for p in w.points])
                    for w in group
                ]
            )
            try:
                summary.points_upserted += self.store.upsert(
                    [p.point(vectors[p.vector_key], stamp) for p in planned]
                )
            except StoreUnavailable:
                raise
            except StoreError:
                group = self._one_by_one(group, vectors, stamp, summary)
        crash_point("after_upsert")
        stale: list[str] = []
        for w in group:
            stale.extend(self.state.point_ids(w.ref.root, w.ref.rel) - {p.id for p in w.points})
        summary.points_deleted += self.store.delete(stale)
        crash_point("after_delete")
        self.state.commit_docs(self.rows(group), stamp, graphs(group))
        with self.state.transaction() as db:
            put_languages(db, langs(group))
        summary.files_changed += len(group)
        crash_point("after_commit")
        if self.on_indexed is not None:
            self.on_indexed([w.ref for w in group])

    def _one_by_one(
        self, group: list[DocWork], vectors: dict[str, list[float]], stamp: str, summary: Summary
    ) -> list[DocWork]:
        """The store refused a group's points (not for being unreachable): each
        document is written alone, and one the store refuses fails alone. Its
        old points stay and its new ones are taken back, so the next sync tries
        it again; every other document is written."""
        written: list[DocWork] = []
        refused: list[tuple[DocWork, StoreError]] = []
        for w in group:
            try:
                summary.points_upserted += self.store.upsert(
                    [p.point(vectors[p.vector_key], stamp) for p in w.points]
                )
            except StoreUnavailable:
                raise
            except StoreError as error:
                refused.append((w, error))
            else:
                written.append(w)
        for w, why in refused:
            new = {p.id for p in w.points} - self.state.point_ids(w.ref.root, w.ref.rel, True)
            self.store.delete(sorted(new))
            self.state.drop_pending(w.ref.root, w.ref.rel)
            reason = f"the store refused its points ({short(why)}); its old points are kept"
            summary.fail(Failure(w.ref.root, w.ref.rel, reason))
        return written

    def rows(self, group: Iterable[DocWork]) -> list[tuple[str, str, DocRow, list[PointRow]]]:
        """The state rows that record these documents as written."""
        fp = self.fingerprint
        return [
            (
                w.ref.root,
                w.ref.rel,
                DocRow(w.ref.size, trusted_mtime(w.ref), w.doc_hash, fp),
                [PointRow(p.id, p.vector_key) for p in w.points],
            )
            for w in group
        ]

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
        by_key = reusable_vectors(self.store, {p.id: p.vector_key for p in planned})
        wanted = {p.vector_key for p in planned} - by_key.keys()
        if wanted:
            by_key |= reusable_vectors(self.store, self.state.ids_for_vector_keys(wanted))
            wanted -= by_key.keys()
        for store, state in self.siblings:
            if not wanted:
                break
            found = reusable_vectors(store, state.ids_for_vector_keys(wanted))
            by_key |= found
            wanted -= found.keys()
        todo: dict[str, Planned] = {}
        for p in planned:
            if p.vector_key not in by_key:
                todo.setdefault(p.vector_key, p)
        return by_key, todo

    def vectors_for(
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

    def write_docs(
        self,
        works: list[DocWork],
        vectors: dict[str, list[float]],
        summary: Summary,
        *,
        prewritten: bool = False,
    ) -> None:
        """Write documents whose points were planned elsewhere (Ray workers), with
        the vectors they brought; the rest are found in the store or embedded
        here (the store lost them meanwhile: embed rather than fail).
        ``prewritten``: the workers wrote them to the server already."""
        if not works:
            return
        self.ensure_open()
        planned = [p for w in works for p in w.points]
        if not prewritten:
            vectors = self.vectors_for(planned, summary, have=vectors)
        self.write(Staged(works, planned, vectors, [], None), summary, prewritten=prewritten)

    def delete_docs(self, docs: list[Key], summary: Summary, *, dry_run: bool = False) -> None:
        if not docs:
            return
        ids = [pid for root, rel in docs for pid in self.state.point_ids(root, rel)]
        summary.files_deleted += len(docs)
        if dry_run:
            summary.points_deleted += len(ids)
            return
        self.ensure_open()
        summary.points_deleted += self.store.delete(ids)
        self.state.remove_docs(docs)
        for root, rel in docs:
            log.info("removed %s:%s", root, printable(rel))

    def rewrite(
        self,
        works: Sequence[DocWork],
        drop: Sequence[str],
        distrust: Collection[str],
        committed: Iterable[DocWork],
        summary: Summary,
    ) -> None:
        """Repair: write ``works`` again (keys in ``distrust`` re-embedded), delete
        the points ``drop``, and start the state over from the store, with
        ``committed`` recorded as written."""
        planned = [p for w in works for p in w.points]
        if planned:
            vectors = self.vectors_for(planned, summary, distrust=distrust)
            stamp = now_iso()
            self.store.upsert([p.point(vectors[p.vector_key], stamp) for p in planned])
            summary.points_upserted += len(planned)
        summary.points_deleted += self.store.delete(drop)
        consistency.rebuild_state(self.store, self.state, "after repair", logging.INFO)
        committed = list(committed)
        self.state.commit_docs(self.rows(committed), now_iso(), graphs(committed))
        with self.state.transaction() as db:
            put_languages(db, langs(committed))

    def touch(self, ref: FileRef) -> None:
        """A file touched, not changed: only its fast-path stamp moves."""
        self.state.touch(ref.root, ref.rel, ref.size, trusted_mtime(ref))


def graphs(works: Iterable[DocWork]) -> dict[tuple[str, str], Graph]:
    """The link graphs of these documents, by (root, path), where planned."""
    return {(w.ref.root, w.ref.rel): w.graph for w in works if w.graph is not None}


def langs(works: Iterable[DocWork]) -> dict[tuple[str, str], str]:
    """The languages of these documents, by (root, path), from their payloads."""
    return {
        (w.ref.root, w.ref.rel): str(w.points[0].payload.get("lang") or "")
        for w in works
        if w.points
    }


def reusable_vectors(store: Store, wanted: dict[str, str]) -> dict[str, list[float]]:
    """Vectors by vector key, from the stored points named in ``wanted`` (point ID
    -> the vector key needed). A point's vector is taken only when the key
    stored with it is the one needed: a point ID leaves out what the context
    prefix adds, so the same ID can carry the vector of another embedded text."""
    found: dict[str, list[float]] = {}
    for pid, (key, vector) in store.vectors(list(wanted)).items():
        if key == wanted[pid]:
            found.setdefault(key, vector)
    return found
