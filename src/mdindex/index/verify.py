"""`mdindex verify [--repair]`: compare the store with what the files say it should hold.

Every file is planned again from its text; the store's points are compared by
ID, payload and vector key, and a random sample of vectors is re-embedded to
check that each comes from its text. Repair writes what is missing or stale
and deletes the rest, through the sync core.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mdindex.embedding.sparse import Sparse
from mdindex.errors import RepairRefused
from mdindex.index.changes import Key
from mdindex.index.indexer import Indexer
from mdindex.index.planning import DocWork, Planned
from mdindex.index.summary import Summary

log = logging.getLogger(__name__)

# verify re-embeds this many points (about 2 s on a 2-core CPU) to check that
# stored vectors come from their text; bf16 against fp32 gives cosine 0.99998.
VERIFY_SAMPLE = 256
VECTOR_MATCH_COSINE = 0.98
# When more than this share of at least SUSPECT_MIN sampled vectors disagree,
# repair suspects the embedder: a permuted model.onnx once made it rewrite 10 of
# 10 documents with wrong vectors.
SUSPECT_SHARE = 0.5
SUSPECT_MIN = 5


@dataclass
class VerifyReport:
    missing: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    # documents whose recorded links, tags or headings differ from the file
    graph: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    repaired: bool = False
    vectors_checked: int = 0  # sampled and re-embedded
    vectors_disagreeing: int = 0

    @property
    def embedder_suspect(self) -> bool:
        n, bad = self.vectors_checked, self.vectors_disagreeing
        return n >= SUSPECT_MIN and bad > SUSPECT_SHARE * n

    @property
    def in_sync(self) -> bool:
        return not (self.missing or self.stale or self.duplicates or self.graph)

    def as_dict(self) -> dict[str, Any]:
        return {
            "missing": self.missing,
            "stale": self.stale,
            "duplicates": self.duplicates,
            "graph": self.graph,
            "in_sync": self.in_sync,
            "repaired": self.repaired,
            "errors": self.errors,
            "vectors_checked": self.vectors_checked,
            "vectors_disagreeing": self.vectors_disagreeing,
        }


def _entry(pid: str, p: Planned) -> dict[str, Any]:
    return {
        "id": pid,
        "root": p.payload["root"],
        "doc_path": p.payload["doc_path"],
        "chunk_index": p.payload["chunk_index"],
    }


def expected_points(
    indexer: Indexer, report: VerifyReport
) -> tuple[dict[str, Planned], dict[Key, DocWork], set[Key]]:
    """What the store should hold for the current files, and the documents that
    failed (or lie below a folder that could not be listed)."""
    summary = Summary()
    works, kept = indexer.plan_all(summary)
    expected = {p.id: p for w in works for p in w.points}
    report.errors = summary.errors
    failed = {f.key for f in summary.failures} | kept
    return expected, {w.ref.key: w for w in works}, failed


def verify(indexer: Indexer, *, repair: bool = False, force: bool = False) -> VerifyReport:
    """Compare the store with the files; with ``repair``, fix what differs, under
    the same guard on deletions as backfill (``force`` overrides it)."""
    report = VerifyReport()
    indexer.open_store()
    expected, works, failed = expected_points(indexer, report)
    stored = dict(indexer.stored_payloads())
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
            elif not same_payload(got, want):
                report.stale.append({**entry, "reason": "payload differs"})
        elif key in failed:
            continue  # unreadable for now; its points stay until it is readable or gone
        elif (key[0], key[1], payload.get("content_hash")) in chunk_keys:
            report.duplicates.append(entry)
        else:
            report.stale.append({**entry, "reason": "no such chunk in the files"})
    _check_vectors(indexer, report, expected, stored)
    _check_sparse(indexer, report, expected, stored)
    report.missing = [_entry(pid, p) for pid, p in expected.items() if pid not in stored]
    report.graph = _check_graph(indexer, works, failed)
    if repair and report.embedder_suspect and not force:
        raise RepairRefused(
            f"verify: {report.vectors_disagreeing} of {report.vectors_checked} sampled vectors "
            "disagree with their text: the embedder (the model, its ONNX export, a server) "
            "more likely changed than the index; nothing repaired. Check it, or pass --force"
        )
    if repair and not report.in_sync:
        # documents whose every point would go: the guard decides, as for a prune
        gone = {(e["root"], e["doc_path"]) for e in report.stale if e["id"] not in expected}
        gone -= works.keys()
        if not force:
            present = Counter(label for label, _ in works) + Counter(label for label, _ in failed)
            indexer.check_deletes(sorted(gone), present)
        _repair(indexer, report, expected, works)
    return report


def _check_graph(
    indexer: Indexer, works: dict[Key, DocWork], failed: set[Key]
) -> list[dict[str, Any]]:
    """Each document's recorded links, tags and headings (``index.graph``)
    against what its file says now, by digest."""
    recorded = indexer.graph_digests()
    out = []
    for key, work in sorted(works.items()):
        if work.graph is None:
            continue
        have = recorded.get(key)
        if have != work.graph.digest():
            why = "links and tags not recorded" if have is None else "links or tags differ"
            out.append({"root": key[0], "doc_path": key[1], "reason": why})
    for key in sorted(recorded.keys() - works.keys() - failed):
        out.append({"root": key[0], "doc_path": key[1], "reason": "recorded for no file"})
    flagged = {(e["root"], e["doc_path"]) for e in out}
    for key in sorted(indexer.misresolved_links() - flagged):
        out.append({"root": key[0], "doc_path": key[1], "reason": "a link resolves elsewhere now"})
    return out


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


def _check_vectors(
    indexer: Indexer,
    report: VerifyReport,
    expected: dict[str, Planned],
    stored: dict[str, Any],
) -> None:
    """Embed a sample of the points whose keys agree and compare with their stored
    vectors: a key only says which text a vector should come from, and indexes
    written before vector keys were checked can hold a vector of other text."""
    flagged = {e["id"] for e in report.stale}
    agree = sorted(
        (p.vector_key, pid) for pid, p in expected.items() if pid in stored and pid not in flagged
    )
    # One point per key, a new random sample each run, so that repeated
    # verifies cover an index too large to re-embed in one.
    by_key = dict(agree)
    keys = sorted(by_key)
    picked = keys if len(keys) <= VERIFY_SAMPLE else random.sample(keys, VERIFY_SAMPLE)
    sample = [(key, by_key[key]) for key in picked]
    if not sample:
        return
    have = indexer.stored_vectors([pid for _, pid in sample])
    import numpy as np

    fresh = np.asarray(indexer.embed([expected[pid] for _, pid in sample]), dtype=np.float32)
    for (key, pid), new in zip(sample, fresh, strict=True):
        if pid not in have:
            continue
        old = np.asarray(have[pid][1], dtype=np.float32)
        cosine = float(old @ new) / (float(np.linalg.norm(old) * np.linalg.norm(new)) or 1.0)
        report.vectors_checked += 1
        if cosine < VECTOR_MATCH_COSINE:
            report.vectors_disagreeing += 1
            report.stale.append(
                {
                    **_entry(pid, expected[pid]),
                    "reason": f"vector does not match its text (cosine {cosine:.3f})",
                    "vector_key": key,
                }
            )


def _check_sparse(
    indexer: Indexer,
    report: VerifyReport,
    expected: dict[str, Planned],
    stored: dict[str, Any],
) -> None:
    """Every stored sparse vector against the one its text gives: computing them
    is cheap (mdindex.embedding.sparse), so all are checked, not a sample."""
    if not indexer.has_sparse:
        return
    flagged = {e["id"] for e in report.stale}
    ids = sorted(
        pid
        for pid, p in expected.items()
        if pid in stored and pid not in flagged and p.sparse is not None
    )
    for i in range(0, len(ids), 512):
        batch = ids[i : i + 512]
        have = indexer.stored_sparse(batch)
        for pid in batch:
            want = expected[pid].sparse
            got = have.get(pid)
            if got is None or want is None or not _same_sparse(got, want):
                reason = "sparse vector missing" if got is None else "sparse vector differs"
                report.stale.append({**_entry(pid, expected[pid]), "reason": reason})


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
    needs = {
        (e["root"], e["doc_path"]) for e in report.missing + report.stale if e["id"] in expected
    }
    # Keys whose stored vectors are wrong are embedded again, never reused.
    wrong = {e["vector_key"] for e in report.stale if "vector_key" in e}
    group = [works[k] for k in sorted(needs) if k in works]
    indexer.rewrite(group, drop, wrong, works.values(), summary)
    report.repaired = True
    log.info(
        "repaired: %d points written, %d embedded, %d deleted",
        summary.points_upserted,
        summary.chunks_embedded,
        len(drop),
    )
