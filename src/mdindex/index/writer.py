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
from mdindex.index.state import DocRow, PointRow, State
from mdindex.index.summary import Summary
from mdindex.index.tables import put_languages
from mdindex.index.vectors import Vectors
from mdindex.retry import short
from mdindex.sinks import Store

log = logging.getLogger(__name__)

CRASH_ENV = "MDINDEX_CRASH_POINT"
CRASH_POINTS = ("after_chunk", "after_embed", "after_upsert", "after_delete", "after_commit")
# Where a version's rollout can die (mdindex.versions.rollout): a build dies at the points above.
ROLLOUT_CRASH_POINTS = ("before_switch", "after_switch", "during_drop")
# Points written (or read, by verify's pass over every point) between two
# Store.let_go calls. Edge writes and reads through memory maps, and each page
# touched stayed in the process's RSS: two thirds of a cold backfill's peak
# (3.9 GB at 545k points, bench/scale.py), and verify's reads of whole payloads.
LET_GO_EVERY = 16_384


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
        ensure_open: Callable[[], object],
        on_indexed: Callable[[list[FileRef]], None] | None = None,
        siblings: Sequence[tuple[Store, State]] = (),
    ) -> None:
        self.store = store
        self.state = state
        self.embedder = embedder
        self.fingerprint = fingerprint  # recorded with each document written
        self.ensure_open = ensure_open  # the store is opened (and checked) on first write
        self.on_indexed = on_indexed
        self.vectors = Vectors(store, state, embedder, siblings)
        # With two cores or fewer, torch's threads already fill the machine and
        # work beside them only slows them down (bench/backfill.py: overhead 1.19 with
        # the worker thread, 0.98 without, in bf16), so embedding runs inline.
        self.pipelined = (os.cpu_count() or 1) > 2
        self.held = 0  # points written since the store last let go of its pages

    def pool(self) -> ThreadPoolExecutor | _Inline:
        """Where embedding runs while this thread writes and reads the next group."""
        if self.pipelined:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mdindex-embed")
        return _Inline()

    def count_dry(self, group: list[DocWork], summary: Summary) -> None:
        """What writing this group would do, from the state alone."""
        summary.chunks_embedded += len(self.vectors.unknown_keys(group))
        summary.points_upserted += sum(len(w.points) for w in group)
        for w in group:
            old = self.state.point_ids(w.ref.root, w.ref.rel) - {p.id for p in w.points}
            summary.points_deleted += len(old)
        summary.files_changed += len(group)

    def stage(
        self, group: list[DocWork], pool: ThreadPoolExecutor | _Inline, previous: Staged | None
    ) -> Staged:
        """Find reusable vectors, and start embedding the rest on the worker thread.

        Keys the previous group is still embedding are borrowed from it once it
        is written, so a chunk repeated across neighbouring groups is embedded once.
        """
        self.ensure_open()
        planned = [p for w in group for p in w.points]
        by_key, todo = self.vectors.lookup(planned)
        inflight = set(previous.todo) if previous is not None else set()
        borrowed = [key for key in todo if key in inflight]
        for key in borrowed:
            del todo[key]
        future = pool.submit(self.vectors.timed_embed, list(todo.values())) if todo else None
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
        self.held += len(planned)
        if self.held >= LET_GO_EVERY:
            self.store.let_go()
            self.held = 0
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
            vectors = self.vectors.needed(planned, summary, have=vectors)
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
            vectors = self.vectors.needed(planned, summary, distrust=distrust)
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
