"""`mdindex verify [--repair]`: compare the store with what the files say it should hold.

Every file is planned again from its text, a group of documents at a time
(``plan_groups``), and the store's points of that group, scrolled with
a filter on their documents, are compared by ID, payload and vector key; one
more scroll of every point's (root, path) finds the points of documents with
no file. So verify holds one group, whatever the tree's size (bench/scale.py:
peak RSS against files). A random sample of vectors is re-embedded to check
that each comes from its text. Repair writes what is missing or stale and
deletes the rest, through the sync core; it keeps every document's plan, as
the state is started over from all of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from mdindex.documents.files import under_failed_folder
from mdindex.embedding.sparse import Sparse
from mdindex.errors import PruneRefused, RepairRefused, StoreError
from mdindex.index.changes import Key
from mdindex.index.indexer import Indexer
from mdindex.index.lookahead import tokens
from mdindex.index.planning import DocWork, Planned
from mdindex.index.summary import Summary, VerifyReport
from mdindex.index.writer import LET_GO_EVERY

log = logging.getLogger(__name__)

# verify re-embeds this many points (about 2 s on a 2-core CPU) to check that
# stored vectors come from their text; bf16 against fp32 gives cosine 0.99998.
VERIFY_SAMPLE = 256
VECTOR_MATCH_COSINE = 0.98


def _entry(pid: str, p: Planned) -> dict[str, Any]:
    return {
        "id": pid,
        "root": p.payload["root"],
        "doc_path": p.payload["doc_path"],
        "chunk_index": p.payload["chunk_index"],
    }


def _stored_entry(pid: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": pid,
        "root": str(payload.get("root")),
        "doc_path": str(payload.get("doc_path")),
        "chunk_index": payload.get("chunk_index"),
    }


class Check:
    """One verify pass: what the groups of documents found, gathered until the end."""

    def __init__(self, indexer: Indexer, keep_plans: bool) -> None:
        self.indexer = indexer
        self.report = VerifyReport()
        self.stale: list[dict[str, Any]] = []  # by payload or vector key
        self.sparse_stale: list[dict[str, Any]] = []
        self.graph: list[dict[str, Any]] = []
        self.docs: set[Key] = set()  # every document with a file, planned
        self.missing: dict[str, str] = {}  # expected IDs not found: their vector keys
        self.recorded = indexer.graph_digests()
        # The vector sample: the VERIFY_SAMPLE keys of lowest salted hash, a
        # new random sample each run (repeated verifies cover a large index)
        # drawn in bounded memory; one point per key, as a key names one text.
        self.salt = os.urandom(16)
        self.sample: dict[str, tuple[bytes, str, Planned]] = {}
        self.plans: list[DocWork] | None = [] if keep_plans else None

    def group(self, works: list[DocWork]) -> None:
        """Compare one group of documents with their stored points."""
        expected = {p.id: p for w in works for p in w.points}
        docs = [w.ref.key for w in works]
        self.docs.update(docs)
        stored = dict(self.indexer.stored_payloads(docs)) if docs else {}
        # A point that is not expected but repeats an expected chunk of the same
        # document (e.g. written under other settings) is a duplicate; else stale.
        chunk_keys = {
            (p.payload["root"], p.payload["doc_path"], p.payload["content_hash"])
            for p in expected.values()
        }
        flagged = set()
        for pid, payload in stored.items():
            entry = _stored_entry(pid, payload)
            if pid in expected:
                want = expected[pid].payload
                got = {k: v for k, v in payload.items() if k != "indexed_at"}
                if payload.get("vector_key") != expected[pid].vector_key:
                    self.stale.append({**entry, "reason": "vector key differs"})
                    flagged.add(pid)
                elif not same_payload(got, want):
                    self.stale.append({**entry, "reason": "payload differs"})
                    flagged.add(pid)
            elif (entry["root"], entry["doc_path"], payload.get("content_hash")) in chunk_keys:
                self.report.duplicates.append(entry)
            else:
                self.stale.append({**entry, "reason": "no such chunk in the files"})
        for pid, p in expected.items():
            if pid not in stored:
                self.report.missing.append(_entry(pid, p))
                self.missing[pid] = p.vector_key
        agree = {pid: p for pid, p in expected.items() if pid in stored and pid not in flagged}
        self._draw(agree)
        self._check_sparse(agree)
        self._check_graph(works)
        self.indexer.let_go()  # the group's pages: held, they grew with the tree
        if self.plans is not None:
            self.plans.extend(works)

    def _draw(self, agree: dict[str, Planned]) -> None:
        for pid, p in agree.items():
            key = p.vector_key
            held = self.sample.get(key)
            if held is not None:
                if pid > held[1]:  # the same point whichever group came first
                    self.sample[key] = (held[0], pid, p)
                continue
            rank = hashlib.blake2b(self.salt + key.encode(), digest_size=8).digest()
            self.sample[key] = (rank, pid, p)
        if len(self.sample) > VERIFY_SAMPLE:
            kept = sorted(self.sample.items(), key=lambda kv: kv[1][0])[:VERIFY_SAMPLE]
            self.sample = dict(kept)

    def _check_sparse(self, agree: dict[str, Planned]) -> None:
        """Every stored sparse vector against the one its text gives: computing them
        is cheap (mdindex.embedding.sparse), so all are checked, not a sample."""
        if not self.indexer.has_sparse:
            return
        ids = sorted(pid for pid, p in agree.items() if p.sparse is not None)
        for i in range(0, len(ids), 512):
            batch = ids[i : i + 512]
            have = self.indexer.stored_sparse(batch)
            for pid in batch:
                want, got = agree[pid].sparse, have.get(pid)
                if got is None or want is None or not _same_sparse(got, want):
                    reason = "sparse vector missing" if got is None else "sparse vector differs"
                    self.sparse_stale.append({**_entry(pid, agree[pid]), "reason": reason})

    def _check_graph(self, works: list[DocWork]) -> None:
        """Each document's recorded links, tags and headings (``index.graph``)
        against what its file says now, by digest."""
        for work in works:
            if work.graph is None:
                continue
            key = work.ref.key
            have = self.recorded.get(key)
            if have != work.graph.digest():
                why = "links and tags not recorded" if have is None else "links or tags differ"
                self.graph.append({"root": key[0], "doc_path": key[1], "reason": why})

    def finish(self, failed: set[Key]) -> VerifyReport:
        """The points of documents with no file, the vector sample, and the report."""
        known = self.docs | failed
        points = self.indexer.stored_payloads(keys=["root", "doc_path", "chunk_index"])
        for n, (pid, payload) in enumerate(points, 1):
            if n % LET_GO_EVERY == 0:
                self.indexer.let_go()
            entry = _stored_entry(pid, payload)
            if (entry["root"], entry["doc_path"]) not in known:
                self.stale.append({**entry, "reason": "no such chunk in the files"})
        self._misplaced()
        report = self.report
        report.stale = sorted(self.stale, key=lambda e: e["id"])
        report.duplicates.sort(key=lambda e: e["id"])
        vector_stale = self._check_vectors()
        flagged = {e["id"] for e in vector_stale}
        report.stale += vector_stale
        report.stale += sorted(
            (e for e in self.sparse_stale if e["id"] not in flagged), key=lambda e: e["id"]
        )
        graph = sorted(self.graph, key=lambda e: (e["root"], e["doc_path"]))
        for key in sorted(self.recorded.keys() - self.docs - failed):
            graph.append({"root": key[0], "doc_path": key[1], "reason": "recorded for no file"})
        flagged_docs = {(e["root"], e["doc_path"]) for e in graph}
        for key in sorted(self.indexer.misresolved_links() - flagged_docs):
            graph.append(
                {"root": key[0], "doc_path": key[1], "reason": "a link resolves elsewhere now"}
            )
        report.graph = graph
        return report

    def _misplaced(self) -> None:
        """An expected point stored under another document's payload was found
        in that document's place: stale, with its payload differing, not missing."""
        moved = set()
        for group in (self.stale, self.report.duplicates):
            for i, e in enumerate(group):
                if e["id"] in self.missing:
                    moved.add(e["id"])
                    group[i] = {**e, "reason": "payload differs"}
        if not moved:
            return
        self.stale += [e for e in self.report.duplicates if e["id"] in moved]
        self.report.duplicates = [e for e in self.report.duplicates if e["id"] not in moved]
        self.report.missing = [e for e in self.report.missing if e["id"] not in moved]
        keys = dict(self.indexer.stored_vectors(sorted(moved)))
        for e in self.stale:
            if e["id"] in moved and keys.get(e["id"], ("",))[0] != self.missing[e["id"]]:
                e["reason"] = "vector key differs"

    def _check_vectors(self) -> list[dict[str, Any]]:
        """Embed the sampled points and compare with their stored vectors: a key
        only says which text a vector should come from, and indexes written
        before vector keys were checked can hold a vector of other text."""
        sample = [(key, pid, p) for key, (_, pid, p) in self.sample.items()]
        if not sample:
            return []
        have = self.indexer.stored_vectors([pid for _, pid, _ in sample])
        import numpy as np

        planned = [p for _, _, p in sample]
        if self.plans is None:  # nothing more to embed: the backend for this count
            # (the ONNX export on a small sample: torch took 6.7 s and 811 MB for 11)
            self.indexer.embedder.load((len(planned), sum(tokens(p) for p in planned)))
        fresh = np.asarray(self.indexer.writer.vectors.embed(planned), dtype=np.float32)
        out = []
        for (key, pid, p), new in zip(sample, fresh, strict=True):
            if pid not in have:
                continue
            old = np.asarray(have[pid][1], dtype=np.float32)
            cosine = float(old @ new) / (float(np.linalg.norm(old) * np.linalg.norm(new)) or 1.0)
            self.report.vectors_checked += 1
            if cosine < VECTOR_MATCH_COSINE:
                self.report.vectors_disagreeing += 1
                out.append(
                    {
                        **_entry(pid, p),
                        "reason": f"vector does not match its text (cosine {cosine:.3f})",
                        "vector_key": key,
                    }
                )
        return out


def plan_all(indexer: Indexer, summary: Summary) -> tuple[list[DocWork], set[Key]]:
    """Every document's plan at once (``plan_groups``)."""
    groups, kept = plan_groups(indexer, summary)
    return [w for group in groups for w in group], kept


def plan_groups(indexer: Indexer, summary: Summary) -> tuple[Iterator[list[DocWork]], set[Key]]:
    """Every document under the roots planned from its text, a group at a time
    (verify holds one at once), and the known documents below folders that
    could not be listed. Failures land in ``summary``; nothing is written."""
    seen = indexer.detector.tree()
    for failure in seen.failures:
        summary.fail(failure)
    kept = {k for k in indexer.state.known_docs() if under_failed_folder(k, seen.unlisted)}

    def groups() -> Iterator[list[DocWork]]:
        for loaded in indexer.groups.read(seen.present.values(), lambda ref: "", summary, None):
            works = indexer.groups.plan(loaded, summary)
            for work in works:  # without token ids: 5 KB a point (bench/scale.py)
                work.points = [dataclasses.replace(p, token_ids=None) for p in work.points]
            yield works

    return groups(), kept


def verify(
    indexer: Indexer,
    *,
    repair: bool = False,
    force: bool = False,
    stop: Callable[[], bool] = lambda: False,
) -> VerifyReport:
    """Compare the store with the files; with ``repair``, fix what differs, under
    the same guard on deletions as backfill (``force`` overrides it). ``stop``
    (the daemon's shutdown) ends it between groups, with nothing repaired."""
    indexer.open_store()
    summary = Summary()
    groups, kept = plan_groups(indexer, summary)
    check = Check(indexer, keep_plans=repair)
    for group in groups:
        if stop():  # a SIGTERM waited for the whole verify (644 s at 100,000 files)
            raise StoreError("the daemon is stopping; verify not done, nothing repaired")
        check.group(group)
    failed = {f.key for f in summary.failures} | kept
    report = check.finish(failed)
    report.errors = summary.errors
    if repair and report.embedder_suspect and not force:
        raise RepairRefused(
            f"verify: {report.vectors_disagreeing} of {report.vectors_checked} sampled vectors "
            "disagree with their text: the embedder (the model, its ONNX export, a server) "
            "more likely changed than the index; nothing repaired. Check it, or pass --force"
        )
    if repair and not report.in_sync:
        plans = check.plans or []
        expected = {p.id: p for w in plans for p in w.points}
        works = {w.ref.key: w for w in plans}
        # documents whose every point would go: the guard decides, as for a prune
        gone = {(e["root"], e["doc_path"]) for e in report.stale if e["id"] not in expected}
        gone -= works.keys()
        if not force:
            present = Counter(label for label, _ in works) + Counter(label for label, _ in failed)
            reason = indexer.deletion_refused(sorted(gone), present)
            if reason:
                raise PruneRefused(reason)
        _repair(indexer, report, expected, works)
    return report


def same_payload(a: Any, b: Any) -> bool:
    """Equal payloads, floats to 12 digits: qdrant-edge reads some floats back a
    unit in the last place off (1.5732984201623415e+41 as ...17e+41)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_payload(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_payload(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _same_sparse(a: Sparse, b: Sparse) -> bool:
    import numpy as np

    return a.indices == b.indices and np.allclose(a.values, b.values, rtol=1e-5, atol=1e-6)


def _repair(
    indexer: Indexer,
    report: VerifyReport,
    expected: dict[str, Planned],
    works: dict[Key, DocWork],
) -> None:
    summary = Summary()
    drop = [e["id"] for e in report.duplicates] + [
        e["id"] for e in report.stale if e["id"] not in expected
    ]
    # The document each point belongs to by its file, not the one its stored
    # payload names: a point found under another document's path goes home.
    needs = {
        (expected[e["id"]].payload["root"], expected[e["id"]].payload["doc_path"])
        for e in report.missing + report.stale
        if e["id"] in expected
    }
    # Keys whose stored vectors are wrong are embedded again, never reused.
    wrong = {e["vector_key"] for e in report.stale if "vector_key" in e}
    group = [works[k] for k in sorted(needs) if k in works]
    indexer.open_store()  # opened and checked before anything is written
    indexer.writer.rewrite(group, drop, wrong, works.values(), summary)
    report.repaired = True
    log.info(
        "repaired: %d points written, %d embedded, %d deleted",
        summary.points_upserted,
        summary.chunks_embedded,
        len(drop),
    )
