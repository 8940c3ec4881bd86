"""The sync core shared by backfill, watch and verify.

For every document that changed, new points are written before old ones are
deleted, and the local state is committed last; IDs about to be written are
recorded first as pending. A crash at any moment therefore leaves the store
with extra points the next run knows about and removes, never with a
document missing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mdindex.budget import budget
from mdindex.chunking import Chunker
from mdindex.config import Root, Settings
from mdindex.document import decode, parse_document, read_bytes
from mdindex.embedding import ModelInfo, VectorFn
from mdindex.errors import ConfigError, FileTimeout, InputError, MdindexError, PruneRefused
from mdindex.files import (
    FileRef,
    PathFilter,
    ScanError,
    printable,
    scan,
    under_failed_folder,
)
from mdindex.models import Chunk, Document, digest
from mdindex.sinks import Point, Sink
from mdindex.state import DocRow, PointRow, State
from mdindex.tokens import TokenCounter

log = logging.getLogger(__name__)

CRASH_ENV = "MDINDEX_CRASH_POINT"
CRASH_POINTS = ("after_chunk", "after_embed", "after_upsert", "after_delete", "after_commit")
_ID_NAMESPACE = uuid.UUID("6f6d2a3e-5a1b-4c1e-9a7e-6d64696e6478")
# Larger groups give the embedder longer runs to sort into batches of like
# length: 256 documents made the corpus backfill 10 % faster than 64.
_GROUP_DOCS = 256
_GROUP_CHARS = 512_000  # about 500 chunks: one embedding call, one upsert round
# verify re-embeds this many points (about 2 s on a 2-core CPU) to check that
# stored vectors come from their text; bf16 against fp32 gives cosine 0.99998.
VERIFY_SAMPLE = 256
VECTOR_MATCH_COSINE = 0.98


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


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Summary:
    files_seen: int = 0
    files_changed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    files_failed: int = 0
    chunks_embedded: int = 0
    points_upserted: int = 0
    points_deleted: int = 0
    seconds: float = 0.0
    errors: list[dict[str, str]] = field(default_factory=list)
    dry_run: bool = False

    def fail(self, root: str, rel: str, reason: str) -> None:
        self.files_failed += 1
        shown = printable(f"{root}:{rel}")
        self.errors.append({"path": printable(rel), "root": root, "reason": reason})
        log.warning("skipped %s: %s", shown, reason)

    def as_dict(self) -> dict[str, Any]:
        return {
            "files_seen": self.files_seen,
            "files_changed": self.files_changed,
            "files_unchanged": self.files_unchanged,
            "files_deleted": self.files_deleted,
            "files_failed": self.files_failed,
            "chunks_embedded": self.chunks_embedded,
            "points_upserted": self.points_upserted,
            "points_deleted": self.points_deleted,
            "seconds": round(self.seconds, 3),
            "errors": self.errors,
            "dry_run": self.dry_run,
        }

    def line(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        return (
            f"{self.files_seen} files: {self.files_changed} {verb}, "
            f"{self.files_unchanged} unchanged, "
            f"{self.files_deleted} deleted, {self.files_failed} failed; "
            f"{self.chunks_embedded} chunks embedded, {self.points_upserted} points upserted, "
            f"{self.points_deleted} deleted in {self.seconds:.2f}s"
        )


@dataclass(frozen=True, slots=True)
class Planned:
    """One point as the pipeline wants it, before its vector is known."""

    id: str
    vector_key: str
    embed_input: str
    payload: dict[str, Any]
    token_ids: list[int] | None = None  # of embed_input, when chunking had them


# (candidates, deleted documents, summary, state rows) -> None
SyncRunner = Callable[
    [list[FileRef], list[tuple[str, str]], "Summary", dict[tuple[str, str], DocRow]], None
]


@dataclass
class DocWork:
    """One document's planned points, ready to be written."""

    ref: FileRef
    doc_hash: str
    points: list[Planned]


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
class _Staged:
    """A group whose vectors are being found or embedded, not yet written."""

    works: list[DocWork]
    planned: list[Planned]
    by_key: dict[str, list[float]]
    todo: list[str]  # vector keys being embedded, in the order of the future's rows
    future: Future[Any] | None
    lender: _Staged | None = None  # the previous group, embedding keys we also need
    borrowed: list[str] = field(default_factory=list)


@dataclass
class VerifyReport:
    missing: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    repaired: bool = False

    @property
    def in_sync(self) -> bool:
        return not (self.missing or self.stale or self.duplicates)

    def as_dict(self) -> dict[str, Any]:
        return {
            "missing": self.missing,
            "stale": self.stale,
            "duplicates": self.duplicates,
            "in_sync": self.in_sync,
            "repaired": self.repaired,
            "errors": self.errors,
        }


def point_id(root: str, doc_path: str, content_hash: str, occurrence: int, fingerprint: str) -> str:
    key = "\x1f".join((root, doc_path, content_hash, str(occurrence), fingerprint))
    return str(uuid.uuid5(_ID_NAMESPACE, key))


class Planner:
    """Turns a document's text into planned points: chunks, payloads, IDs and vector keys."""

    def __init__(
        self, settings: Settings, info: ModelInfo, counter: TokenCounter, chunker: Chunker
    ) -> None:
        self.settings = settings
        self.info = info
        self.counter = counter
        self.chunker = chunker
        id_params = {
            "model": info.name,
            "chunker": chunker.params(),
            "prepend_context": settings.prepend_context,
        }
        self.id_fingerprint = _hash_json(id_params)[:16]
        # Settings that change payloads but not IDs still force every document to be rewritten.
        self.doc_fingerprint = _hash_json(
            {
                "id": self.id_fingerprint,
                "base_url": settings.base_url,
                "url_style": settings.url_style,
            }
        )[:16]

    def parse(self, rel: str, text: str) -> Document:
        return parse_document(
            text, rel, base_url=self.settings.base_url, url_style=self.settings.url_style
        )

    def plan_points(
        self, root: str, rel: str, doc: Document, chunks: Sequence[Chunk]
    ) -> list[Planned]:
        seen: dict[str, int] = {}
        out: list[Planned] = []
        for index, chunk in enumerate(chunks):
            content_hash = digest(chunk.text)
            occurrence = seen.get(content_hash, 0)
            seen[content_hash] = occurrence + 1
            embed_input = self.embed_input(doc, chunk)
            vector_key = digest(f"{self.info.name}\x00{embed_input}")[:32]
            url = doc.url
            if url and chunk.anchor:
                url = f"{url}#{chunk.anchor}"
            payload: dict[str, Any] = {
                "text": chunk.text,
                "root": root,
                "doc_path": rel,
                "title": doc.title,
                "url": url,
                "section": chunk.section,
                "heading_path": list(chunk.heading_path),
                "chunk_index": index,
                "char_start": chunk.char_start,
                "char_end": chunk.char_end,
                "line_start": doc.line_of(chunk.char_start),
                "line_end": doc.line_of(max(chunk.char_start, chunk.char_end - 1)),
                "token_count": chunk.token_count,
                "content_hash": content_hash,
                "doc_hash": doc.doc_hash,
                "strategy": self.chunker.strategy,
                "model": self.info.name,
                "meta": doc.meta,
                "vector_key": vector_key,
            }
            pid = point_id(root, rel, content_hash, occurrence, self.id_fingerprint)
            ids = chunk.token_ids if embed_input is chunk.text else None
            out.append(Planned(pid, vector_key, embed_input, payload, ids))
        return out

    def embed_input(self, doc: Document, chunk: Chunk) -> str:
        """The chunk text, optionally behind as much of title and heading path as still fits."""
        if not self.settings.prepend_context:
            return chunk.text
        prefix = " > ".join([doc.title, *chunk.heading_path]) + "\n\n"
        budget = self.counter.model_limit - chunk.token_count
        enc = self.counter.encode(prefix)
        if len(enc.ids) > budget:
            prefix = prefix[: enc.offsets[budget - 1][1]] + "\n\n" if budget > 2 else ""
        candidate = prefix + chunk.text
        # Tokens of a concatenation can differ from the sum; the full count decides.
        if prefix and self.counter.count(candidate) <= self.counter.model_limit:
            return candidate
        return chunk.text


class Indexer:
    """Makes the store equal to the files, touching only what changed."""

    def __init__(
        self,
        settings: Settings,
        *,
        info: ModelInfo,
        counter: TokenCounter,
        chunker: Chunker,
        embedder: VectorFn,
        sink: Sink,
        state: State,
    ) -> None:
        self.settings = settings
        self.info = info
        self.counter = counter
        self.chunker = chunker
        self.embedder = embedder
        self.sink = sink
        self.state = state
        self.roots = {r.label: r for r in settings.root_list()}
        self.accept = PathFilter(settings.include, settings.exclude)
        self.planner = Planner(settings, info, counter, chunker)
        self._store_checked = False
        # With two cores or fewer, torch's threads already fill the machine and
        # work beside them only slows them down (bench/backfill.py: overhead 1.19 with
        # the worker thread, 0.98 without, in bf16), so embedding runs inline.
        self.pipelined = (os.cpu_count() or 1) > 2
        self.group_docs = _GROUP_DOCS
        self.group_chars = _GROUP_CHARS
        # Hooks for the daemon: progress pings, a stop flag checked between
        # groups, and the files whose points were just committed.
        self.on_progress: Callable[[int], None] | None = None
        self.stop_requested: Callable[[], bool] | None = None
        self.on_indexed: Callable[[list[FileRef]], None] | None = None

    # -- store and state consistency ---------------------------------------

    def store_identity(self) -> str:
        return f"{self.sink.where}#{self.sink.collection}"

    def open_store(self) -> None:
        """Open the store and make sure the state describes it; rebuild the state if not."""
        if self._store_checked:
            return
        self.sink.open()
        self.sink.ensure_collection(self.embedder.dimension)
        identity = self.store_identity()
        reason = ""
        if self.state.fresh:
            reason = "no local state" if self.sink.count() else ""
        elif self.state.get("store") != identity:
            reason = "state belongs to another store"
        else:
            self._recover_inflight()
            interrupted = self.state.invalidate_pending_docs()
            if interrupted:
                log.info(
                    "%d documents were interrupted mid-write; they will be re-synced", interrupted
                )
            committed, pending = self.state.point_counts()
            # An interrupted write may have added its new points and deleted some old ones.
            at_risk = self.state.committed_at_risk()
            stored = self.sink.count()
            if not committed - at_risk <= stored <= committed + pending:
                reason = f"state knows {committed} points, store holds {stored}"
        if reason:
            self.rebuild_state(reason)
        self.state.put("store", identity)
        self._store_checked = True

    def _recover_inflight(self) -> None:
        """Documents other processes were writing when a run stopped: whatever the
        store holds for them becomes pending here, so the next sync of each
        document deletes what its plan no longer has."""
        docs = self.state.inflight()
        if not docs:
            return
        log.info("%d documents were being written by workers; reading back their points", len(docs))
        found = [
            (
                root,
                path,
                [PointRow(pid, key) for pid, key in self.sink.doc_points(root, path).items()],
            )
            for root, path in docs
        ]
        self.state.mark_pending(found)
        self.state.clear_inflight(docs)

    def rebuild_state(self, reason: str, level: int = logging.WARNING) -> None:
        log.log(level, "rebuilding local state from the store (%s)", reason)
        records = (
            (pid, str(p.get("root", "")), str(p.get("doc_path", "")), str(p.get("vector_key", "")))
            for pid, p, _ in self.sink.scroll(payload=["root", "doc_path", "vector_key"])
        )
        n = self.state.rebuild(records)
        self.state.fresh = False
        log.info("state rebuilt with %d points; files will be re-chunked and compared", n)

    def store_unchanged_since_last_run(self) -> bool:
        sig = self.sink.signature()
        return bool(sig) and sig != "absent" and self.state.get("store_signature") == sig

    def settle(self, idle: Callable[[], bool] | None = None) -> bool:
        """The store's housekeeping after a sync (an edge store may build its
        search index); False when it gave way to ``idle()`` turning False."""
        if not self._store_checked:
            return True
        return self.sink.settle(idle)

    def finish(self) -> None:
        """Close the store and remember what it looked like, for the next fast path."""
        self.sink.close()
        if self._store_checked:
            self.state.put("store_signature", self.sink.signature())
        self._store_checked = False

    # -- scanning --------------------------------------------------------

    def scan_roots(self, summary: Summary) -> tuple[list[FileRef], list[tuple[str, str]]]:
        """Every document under the roots, and the folders that could not be listed."""
        files: list[FileRef] = []
        folders: list[tuple[str, str]] = []
        for root in self.roots.values():
            for item in scan(root, self.accept, self.settings.follow_symlinks):
                summary.files_seen += 1
                if isinstance(item, ScanError):
                    summary.fail(item.root, item.rel, item.reason)
                    if item.folder:
                        folders.append((item.root, item.rel))
                else:
                    files.append(item)
        return files, folders

    def is_fresh(self, ref: FileRef, rows: dict[tuple[str, str], DocRow]) -> bool:
        row = rows.get(ref.key)
        return (
            row is not None
            and row.size == ref.size
            and row.mtime_ns == ref.mtime_ns
            and row.fingerprint == self.planner.doc_fingerprint
        )

    # -- backfill --------------------------------------------------------

    def backfill(
        self,
        *,
        dry_run: bool = False,
        prune: bool = True,
        force: bool = False,
        runner: SyncRunner | None = None,
    ) -> Summary:
        """Make the store equal to the roots. ``runner`` does the syncing of what
        changed (the Ray backfill hands its own); deciding what changed, the
        prune guard and the state stay here."""
        started = time.monotonic()
        summary = Summary(dry_run=dry_run)
        for root in self.roots.values():
            if not root.path.is_dir() and not force:
                raise PruneRefused(
                    f"root {root.label!r}: {root.path} is not a folder; fix the path, "
                    "or pass --force to prune its documents"
                )
        files, folders = self.scan_roots(summary)
        failed = {(e["root"], e["path"]) for e in summary.errors}
        seen = {f.key for f in files} | failed

        def gone(known: set[tuple[str, str]]) -> list[tuple[str, str]]:
            # A folder that could not be listed keeps everything below it.
            if not prune:
                return []
            return sorted(k for k in known if k not in seen and not under_failed_folder(k, folders))

        known = self.state.known_docs()
        deleted = gone(known)
        if prune and not force:
            self._guard_prune(files, deleted, known)

        rows = self.state.docs()
        candidates = [f for f in files if not self.is_fresh(f, rows)]
        must_open = bool(candidates or deleted or self.state.fresh)
        if not dry_run and (must_open or not self.store_unchanged_since_last_run()):
            self.open_store()
            rows = self.state.docs()
            candidates = [f for f in files if not self.is_fresh(f, rows)]
            known = self.state.known_docs()
            deleted = gone(known)
            if prune and not force:  # the state may have been rebuilt from the store
                self._guard_prune(files, deleted, known)
        summary.files_unchanged += len(files) - len(candidates)
        if runner is not None and not dry_run:
            runner(candidates, deleted, summary, rows)
        else:
            self.sync(candidates, deleted, summary, dry_run=dry_run, rows=rows)
        if not dry_run:
            self.state.put("last_sync", now_iso())
        summary.seconds = time.monotonic() - started
        return summary

    def _guard_prune(
        self,
        files: Sequence[FileRef],
        deleted: Sequence[tuple[str, str]],
        known: set[tuple[str, str]],
    ) -> None:
        for label in self.roots:
            empty = not any(f.root == label for f in files)
            # An empty root whose documents are indexed looks like an unmounted
            # disk or a wrong path, not like a user deleting everything.
            if empty and any(root == label for root, _ in deleted):
                raise PruneRefused(
                    f"root {label!r} has no markdown files; refusing to prune its documents "
                    "(pass --force if that is intended, or --no-prune)"
                )
        if known and len(deleted) > len(known) / 2:
            raise PruneRefused(
                f"{len(deleted)} of {len(known)} indexed documents would be deleted; "
                "refusing to prune more than half (pass --force if that is intended)"
            )

    # -- the sync core ---------------------------------------------------

    def sync(
        self,
        files: Iterable[FileRef],
        deleted: Iterable[tuple[str, str]],
        summary: Summary,
        *,
        dry_run: bool = False,
        rows: dict[tuple[str, str], DocRow] | None = None,
    ) -> None:
        """Index ``files`` (candidates for change) and remove ``deleted`` documents.

        Deletes run after all writes, so a file renamed within the same batch
        finds its old vectors still in the store and reuses them.
        """
        rows = self.state.docs() if rows is None else rows
        # Two stages: while the worker thread embeds one group, this thread
        # writes the group before it and reads and chunks the group after it.
        staged: _Staged | None = None
        pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="mdindex-embed")
            if self.pipelined
            else _Inline()
        )
        with pool:
            for loaded in self._groups(files, rows, summary, dry_run):
                if self._stopping(loaded, staged):
                    return
                works = self._chunk(loaded, summary)
                if dry_run:
                    self._count_dry(works, summary)
                    continue
                nxt = self._stage(works, pool, staged) if works else None
                if staged is not None:
                    self._write(staged, summary)
                staged = nxt
            if staged is not None:
                self._write(staged, summary)
        self._delete_docs(list(deleted), summary, dry_run)

    def _groups(
        self,
        files: Iterable[FileRef],
        rows: dict[tuple[str, str], DocRow],
        summary: Summary,
        dry_run: bool,
    ) -> Iterator[list[tuple[FileRef, Document]]]:
        """Read and parse candidates, in groups bounded by documents and characters."""
        loaded: list[tuple[FileRef, Document]] = []
        chars = 0
        for done, ref in enumerate(files, 1):
            item = self._load(ref, rows.get(ref.key), summary, dry_run)
            if item is not None:
                loaded.append(item)
                chars += len(item[1].text)
            if self.on_progress is not None:
                self.on_progress(done)
            if len(loaded) >= self.group_docs or chars >= self.group_chars:
                yield loaded
                loaded, chars = [], 0
        yield loaded

    def _stopping(self, loaded: list[tuple[FileRef, Document]], staged: _Staged | None) -> bool:
        if self.stop_requested is None or not self.stop_requested():
            return False
        # Nothing of these documents was written yet (the staged group's points
        # are not even marked pending): abandoning them is clean, and the next
        # start or rescan picks them up.
        waiting = len(loaded) + (len(staged.works) if staged is not None else 0)
        log.info("stop requested; abandoning %d documents not yet written", waiting)
        return True

    def known_hash(self, row: DocRow | None) -> str:
        """The hash a file must still have to count as only touched; "" if none."""
        if row is None or row.fingerprint != self.planner.doc_fingerprint:
            return ""
        return row.doc_hash

    def _load(
        self, ref: FileRef, row: DocRow | None, summary: Summary, dry_run: bool
    ) -> tuple[FileRef, Document] | None:
        """Read and parse one candidate; None when it failed or only its mtime moved."""
        doc, reason = read_document(self.planner, ref, self.known_hash(row))
        if reason:
            summary.fail(ref.root, ref.rel, reason)
            return None
        if doc is None:
            if not dry_run:  # touched, not changed: only the fast-path stamp moves
                self.state.touch(ref.root, ref.rel, ref.size, trusted_mtime(ref))
            summary.files_unchanged += 1
            return None
        for warning in doc.warnings:
            log.warning("%s:%s: %s", ref.root, printable(ref.rel), warning)
        return ref, doc

    def _chunk(self, loaded: list[tuple[FileRef, Document]], summary: Summary) -> list[DocWork]:
        """Chunk a group of documents in one batch and plan their points."""
        if not loaded:
            return []
        results = chunk_each(self.chunker, [d for _, d in loaded], self.settings.file_time_budget_s)
        works = []
        for (ref, doc), chunks in zip(loaded, results, strict=True):
            if isinstance(chunks, str):
                summary.fail(ref.root, ref.rel, chunks)
            else:
                points = self.planner.plan_points(ref.root, ref.rel, doc, chunks)
                works.append(DocWork(ref, doc.doc_hash, points))
        crash_point("after_chunk")
        return works

    def _count_dry(self, group: list[DocWork], summary: Summary) -> None:
        """What writing this group would do, from the state alone."""
        planned = [p for w in group for p in w.points]
        known = self.state.has_vector_keys({p.vector_key for p in planned})
        summary.chunks_embedded += len({p.vector_key for p in planned} - known)
        summary.points_upserted += len(planned)
        for w in group:
            old = self.state.point_ids(w.ref.root, w.ref.rel) - {p.id for p in w.points}
            summary.points_deleted += len(old)
        summary.files_changed += len(group)

    def _stage(
        self, group: list[DocWork], pool: ThreadPoolExecutor | _Inline, previous: _Staged | None
    ) -> _Staged:
        """Find reusable vectors, and start embedding the rest on the worker thread.

        Keys the previous group is still embedding are borrowed from it once it
        is written, so a chunk repeated across neighbouring groups is embedded once.
        """
        self.open_store()
        planned = [p for w in group for p in w.points]
        by_key, todo = self._lookup(planned)
        inflight = set(previous.todo) if previous is not None else set()
        borrowed = [key for key in todo if key in inflight]
        for key in borrowed:
            del todo[key]
        future = pool.submit(self._embed, list(todo.values())) if todo else None
        return _Staged(group, planned, by_key, list(todo), future, previous, borrowed)

    def _write(self, staged: _Staged, summary: Summary, prewritten: bool = False) -> None:
        """Write one group: pending IDs, new points, deletes of old ones, then the state.

        ``prewritten``: Ray workers already wrote the points to a server (their
        documents are marked in flight); only deletes and the state remain.
        """
        group, planned, vectors = staged.works, staged.planned, staged.by_key
        if staged.lender is not None:  # written before us, so its vectors are in
            vectors.update((key, staged.lender.by_key[key]) for key in staged.borrowed)
            staged.lender = None  # keep the chain of groups from growing in memory
        if staged.future is not None:
            matrix = np.asarray(staged.future.result(), dtype=np.float32)
            vectors.update(zip(staged.todo, matrix.tolist(), strict=True))
            summary.chunks_embedded += len(staged.todo)
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
            summary.points_upserted += self.sink.upsert(
                [
                    Point(p.id, vectors[p.vector_key], {**p.payload, "indexed_at": stamp})
                    for p in planned
                ]
            )
        crash_point("after_upsert")
        stale: list[str] = []
        for w in group:
            stale.extend(self.state.point_ids(w.ref.root, w.ref.rel) - {p.id for p in w.points})
        summary.points_deleted += self.sink.delete(stale)
        crash_point("after_delete")
        self.state.commit_docs(self._rows(group), stamp)
        summary.files_changed += len(group)
        crash_point("after_commit")
        if self.on_indexed is not None:
            self.on_indexed([w.ref for w in group])

    def _rows(self, group: Sequence[DocWork]) -> list[tuple[str, str, DocRow, list[PointRow]]]:
        """The state rows that record these documents as written."""
        fp = self.planner.doc_fingerprint
        return [
            (
                w.ref.root,
                w.ref.rel,
                DocRow(w.ref.size, trusted_mtime(w.ref), w.doc_hash, fp),
                [PointRow(p.id, p.vector_key) for p in w.points],
            )
            for w in group
        ]

    def _lookup(
        self, planned: Sequence[Planned]
    ) -> tuple[dict[str, list[float]], dict[str, Planned]]:
        """Vectors the store already has (same point, or any point with the same key),
        and a point for each vector still missing, both by vector key."""
        by_key = reusable_vectors(self.sink, {p.id: p.vector_key for p in planned})
        wanted = {p.vector_key for p in planned} - by_key.keys()
        if wanted:
            donors = self.state.ids_for_vector_keys(wanted)
            by_key |= reusable_vectors(self.sink, {pid: key for key, pid in donors.items()})
        todo: dict[str, Planned] = {}
        for p in planned:
            if p.vector_key not in by_key:
                todo.setdefault(p.vector_key, p)
        return by_key, todo

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
        here. ``prewritten``: the workers wrote them to the server already."""
        if not works:
            return
        self.open_store()
        planned = [p for w in works for p in w.points]
        if not prewritten:
            found, todo = self._lookup([p for p in planned if p.vector_key not in vectors])
            vectors.update(found)
            if todo:  # the store lost them meanwhile; embed here rather than fail
                more = np.asarray(self._embed(list(todo.values())), dtype=np.float32)
                vectors.update(zip(todo, more.tolist(), strict=True))
                summary.chunks_embedded += len(todo)
        self._write(_Staged(works, planned, vectors, [], None), summary, prewritten=prewritten)

    def delete_docs(self, docs: list[tuple[str, str]], summary: Summary) -> None:
        self._delete_docs(docs, summary, False)

    def _embed(self, planned: Sequence[Planned]) -> Any:
        # Chunking already tokenized most texts; the embedder reuses those ids.
        return self.embedder.embed(
            [p.embed_input for p in planned], token_ids=[p.token_ids for p in planned]
        )

    def _vectors_for(
        self, planned: Sequence[Planned], summary: Summary, distrust: Collection[str] = ()
    ) -> dict[str, list[float]]:
        """Vectors by vector key: from the same point, from any point with that key, or
        embedded; keys in ``distrust`` (stored vectors known to be wrong) are always embedded."""
        by_key, todo = self._lookup([p for p in planned if p.vector_key not in distrust])
        todo |= {p.vector_key: p for p in planned if p.vector_key in distrust}
        if todo:
            matrix = np.asarray(self._embed(list(todo.values())), dtype=np.float32)
            by_key.update(zip(todo, matrix.tolist(), strict=True))
            summary.chunks_embedded += len(todo)
        return by_key

    def _delete_docs(self, docs: list[tuple[str, str]], summary: Summary, dry_run: bool) -> None:
        if not docs:
            return
        ids = [pid for root, rel in docs for pid in self.state.point_ids(root, rel)]
        summary.files_deleted += len(docs)
        if dry_run:
            summary.points_deleted += len(ids)
            return
        self.open_store()
        summary.points_deleted += self.sink.delete(ids)
        self.state.remove_docs(docs)
        for root, rel in docs:
            log.info("removed %s:%s", root, printable(rel))

    # -- verify ----------------------------------------------------------

    def expected_points(
        self, report: VerifyReport
    ) -> tuple[dict[str, Planned], dict[tuple[str, str], DocWork], set[tuple[str, str]]]:
        """What the store should hold for the current files, and the documents that
        failed (or lie below a folder that could not be listed)."""
        summary = Summary()
        expected: dict[str, Planned] = {}
        works: dict[tuple[str, str], DocWork] = {}
        files, folders = self.scan_roots(summary)
        loaded = [
            item
            for ref in files
            if (item := self._load(ref, None, summary, dry_run=True)) is not None
        ]
        for i in range(0, len(loaded), _GROUP_DOCS):
            for work in self._chunk(loaded[i : i + _GROUP_DOCS], summary):
                works[work.ref.key] = work
                for p in work.points:
                    expected[p.id] = p
        report.errors = summary.errors
        failed = {(e["root"], e["path"]) for e in summary.errors}
        failed |= {k for k in self.state.known_docs() if under_failed_folder(k, folders)}
        return expected, works, failed

    def verify(self, *, repair: bool = False) -> VerifyReport:
        report = VerifyReport()
        self.open_store()
        expected, works, failed = self.expected_points(report)
        stored: dict[str, dict[str, Any]] = {
            pid: payload for pid, payload, _ in self.sink.scroll(payload=True)
        }
        # A point that is not expected but repeats an expected chunk of the same
        # document (e.g. written under other settings) is a duplicate; else stale.
        chunk_keys = {
            (p.payload["root"], p.payload["doc_path"], p.payload["content_hash"])
            for p in expected.values()
        }
        for pid, payload in sorted(stored.items()):
            key = (str(payload.get("root")), str(payload.get("doc_path")))
            entry = {
                "id": pid,
                "root": key[0],
                "doc_path": key[1],
                "chunk_index": payload.get("chunk_index"),
            }
            if pid in expected:
                want = expected[pid].payload
                got = {k: v for k, v in payload.items() if k != "indexed_at"}
                if payload.get("vector_key") != expected[pid].vector_key:
                    report.stale.append({**entry, "reason": "vector key differs"})
                elif got != want:
                    report.stale.append({**entry, "reason": "payload differs"})
            elif key in failed:
                continue  # unreadable for now; its points stay until it is readable or gone
            elif (key[0], key[1], payload.get("content_hash")) in chunk_keys:
                report.duplicates.append(entry)
            else:
                report.stale.append({**entry, "reason": "no such chunk in the files"})
        self._check_vectors(report, expected, stored)
        for pid, p in expected.items():
            if pid not in stored:
                report.missing.append(
                    {
                        "id": pid,
                        "root": p.payload["root"],
                        "doc_path": p.payload["doc_path"],
                        "chunk_index": p.payload["chunk_index"],
                    }
                )
        if repair and not report.in_sync:
            self._repair(report, expected, works)
        return report

    def _check_vectors(
        self, report: VerifyReport, expected: dict[str, Planned], stored: dict[str, Any]
    ) -> None:
        """Embed a sample of the points whose keys agree and compare with their stored
        vectors: a key only says which text a vector should come from, and indexes
        written before vector keys were checked can hold a vector of other text."""
        flagged = {e["id"] for e in report.stale}
        agree = sorted(
            (p.vector_key, pid)
            for pid, p in expected.items()
            if pid in stored and pid not in flagged
        )
        # One point per key, a new random sample each run, so that repeated
        # verifies cover an index too large to re-embed in one.
        by_key = dict(agree)
        keys = sorted(by_key)
        picked = keys if len(keys) <= VERIFY_SAMPLE else random.sample(keys, VERIFY_SAMPLE)
        sample = [(key, by_key[key]) for key in picked]
        if not sample:
            return
        have = self.sink.vectors([pid for _, pid in sample])
        fresh = np.asarray(self._embed([expected[pid] for _, pid in sample]), dtype=np.float32)
        for (key, pid), new in zip(sample, fresh, strict=True):
            if pid not in have:
                continue
            old = np.asarray(have[pid][1], dtype=np.float32)
            cosine = float(old @ new) / (float(np.linalg.norm(old) * np.linalg.norm(new)) or 1.0)
            if cosine < VECTOR_MATCH_COSINE:
                p = expected[pid].payload
                report.stale.append(
                    {
                        "id": pid,
                        "root": p["root"],
                        "doc_path": p["doc_path"],
                        "chunk_index": p["chunk_index"],
                        "reason": f"vector does not match its text (cosine {cosine:.3f})",
                        "vector_key": key,
                    }
                )

    def _repair(
        self,
        report: VerifyReport,
        expected: dict[str, Planned],
        works: dict[tuple[str, str], DocWork],
    ) -> None:
        summary = Summary()
        drop = [e["id"] for e in report.duplicates] + [
            e["id"] for e in report.stale if e["id"] not in expected
        ]
        needs = {
            (e["root"], e["doc_path"]) for e in report.missing + report.stale if e["id"] in expected
        }
        group = [works[k] for k in sorted(needs) if k in works]
        planned = [p for w in group for p in w.points]
        if planned:
            # Keys whose stored vectors are wrong are embedded again, never reused.
            wrong = {e["vector_key"] for e in report.stale if "vector_key" in e}
            vectors = self._vectors_for(planned, summary, distrust=wrong)
            stamp = now_iso()
            self.sink.upsert(
                [
                    Point(p.id, vectors[p.vector_key], {**p.payload, "indexed_at": stamp})
                    for p in planned
                ]
            )
        self.sink.delete(drop)
        # The state now starts over from the repaired store.
        self.rebuild_state("after repair", logging.INFO)
        self.state.commit_docs(self._rows(list(works.values())), now_iso())
        report.repaired = True
        log.info(
            "repaired: %d points written, %d embedded, %d deleted",
            len(planned),
            summary.chunks_embedded,
            len(drop),
        )


# Recorded instead of the mtime of a file modified too close to its stat: no
# file has it, so the next run reads and hashes the file instead of trusting it.
UNTRUSTED_MTIME = -1


def trusted_mtime(ref: FileRef) -> int:
    """The mtime to record for the fast path (racy-git rule, see FileRef.racy)."""
    return UNTRUSTED_MTIME if ref.racy else ref.mtime_ns


def reusable_vectors(sink: Sink, wanted: dict[str, str]) -> dict[str, list[float]]:
    """Vectors by vector key, from the stored points named in ``wanted`` (point ID
    -> the vector key needed). A point's vector is taken only when the key
    stored with it is the one needed: a point ID leaves out what the context
    prefix adds, so the same ID can carry the vector of another embedded text."""
    found: dict[str, list[float]] = {}
    for pid, (key, vector) in sink.vectors(list(wanted)).items():
        if key == wanted[pid]:
            found.setdefault(key, vector)
    return found


INTERNAL_KEYS = ("vector_key",)


def public(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload as users see it: the interface's keys, not our bookkeeping."""
    return {k: v for k, v in payload.items() if k not in INTERNAL_KEYS}


def read_document(planner: Planner, ref: FileRef, known_hash: str) -> tuple[Document | None, str]:
    """Read and parse one file: (document, ""), or (None, "") when its text still
    hashes to ``known_hash`` (touched, not changed), or (None, why) when it
    cannot be indexed."""
    settings = planner.settings
    try:
        text = decode(read_bytes(ref.path, settings.max_file_bytes, ref))
        if known_hash and known_hash == digest(text):
            return None, ""
        with budget(settings.file_time_budget_s):
            return planner.parse(ref.rel, text), ""
    except InputError as exc:
        return None, str(exc)
    except Exception as exc:  # a parser bug must cost one file, not the run
        log.debug("parsing %s failed", ref.rel, exc_info=True)
        return None, f"internal error while parsing: {_describe(exc)}"


def chunk_each(
    chunker: Chunker, docs: Sequence[Document], budget_s: float | None = None
) -> list[list[Chunk] | str]:
    """Chunk documents in one batch; a document the chunker fails on, or that
    runs over its time budget, gets the reason instead of its chunks, and the
    others go on."""
    try:
        with budget(None if budget_s is None else budget_s * len(docs)):
            return list(chunker.chunk_many(docs))
    except FileTimeout:
        pass
    except MdindexError:
        raise
    except Exception:
        pass
    # Chunk one by one to find the document at fault.
    results: list[list[Chunk] | str] = []
    for doc in docs:
        try:
            with budget(budget_s):
                results.append(chunker.chunk(doc))
        except FileTimeout as exc:
            results.append(str(exc))
        except MdindexError:
            raise
        except Exception as exc:
            log.debug("chunking failed", exc_info=True)
            results.append(f"internal error while chunking: {_describe(exc)}")
    return results


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _hash_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def check_roots(roots: Sequence[Root]) -> None:
    if not roots:
        raise ConfigError(
            "roots: no folder to index; give ROOT arguments or set roots in the config"
        )
