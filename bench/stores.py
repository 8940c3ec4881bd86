"""The two embedded stores side by side: qdrant-client local mode against qdrant-edge.

    python bench/stores.py [--corpus DIR] [--files 7000,20500] [--edits 10] [--queries 100]

1. Trees of --files files made from the corpus (as bench/memory.py makes
   them; 7,000 files give about 34k points, 20,500 about 100k). For each
   tree and each store, every operation is a fresh process, as a scheduled
   job or a CLI call runs: a cold backfill, a no-op re-run, a re-run after
   editing one paragraph in each of --edits files, `verify` (reads every
   point), a reopen (open the store and count), and --queries searches.
   Vectors come from a hash of the text (bench/common.py HashEmbedder): the
   model costs the same with either store and would hide the difference.
   Reports wall seconds, peak RSS and edge's speed-up per operation.
2. Recall of edge's HNSW index on real embeddings: the corpus's heading and
   token chunks embedded with the real model, indexed (index forced on),
   and --queries queries compared with exact search, top 10.

Writes everything to bench/results/stores.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HashEmbedder, corpus_dir, offline, table, vm_hwm_mb, write_json
from memory import build
from peers import edit_files

OPS = ("cold", "noop", "edit", "verify", "reopen", "search")


class Timed:
    """The store, with the time spent inside its calls added up: the store's share."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.store, name)
        if not callable(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                result = value(*args, **kwargs)
                if name == "scroll":  # a generator: its work happens while iterating
                    result = list(result)
                return result
            finally:
                self.seconds += time.perf_counter() - t

        return timed


def worker(store: str, work: Path, op: str, edits: int, queries: int) -> dict[str, Any]:
    offline()
    from mdindex.config import load_settings
    from mdindex.index.indexer import Indexer
    from mdindex.index.verify import verify
    from mdindex.runtime import make_indexer, make_store
    from mdindex.sinks.base import StoreQuery

    root = work / "docs"
    settings = load_settings(
        {"roots": [str(root)], "state_dir": str(work / f"state-{store}"), "store": store}
    )
    if op == "edit":
        edit_files(root, edits)
    t = time.perf_counter()
    timed = Timed(make_store(settings))
    indexer: Indexer = make_indexer(settings, store=timed, embedder=HashEmbedder())  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    try:
        if op in ("cold", "noop", "edit"):
            summary = indexer.backfill()
            out["embedded"] = summary.chunks_embedded
            out["points"] = summary.points_upserted
            if op == "cold":
                # `mdindex backfill` ends by building edge's index when it pays off
                # (100k points); the store's share below leaves it out.
                start = time.perf_counter()
                timed.store.settle()
                out["index_s"] = time.perf_counter() - start
        elif op == "verify":
            out["in_sync"] = verify(indexer).in_sync
        elif op == "reopen":
            indexer.store.open()
            out["count"] = indexer.store.count()
        else:
            rng = random.Random(3)
            vecs = HashEmbedder().embed([f"query {rng.random()}" for _ in range(queries)])
            indexer.store.open()
            indexer.store.count()
            start = time.perf_counter()
            for v in vecs:
                indexer.store.search(StoreQuery(10, dense=v.tolist()))
            out["ms_per_query"] = (time.perf_counter() - start) / queries * 1000
    finally:
        indexer.close()
    out["seconds"] = time.perf_counter() - t
    out["store_s"] = timed.seconds
    out["peak_rss_mb"] = vm_hwm_mb()
    return out


def run_op(store: str, work: Path, op: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", store, "--work", str(work), "--op", op]
    cmd += ["--edits", str(args.edits), "--queries", str(args.queries)]
    t = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    wall = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{store} {op} failed:\n{proc.stderr[-3000:]}")
    return {"wall_s": wall, **json.loads(lines[-1][len("RESULT ") :])}


def pipeline_table(corpus: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for files in (int(x) for x in args.files.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"mdindex-stores-{files}-"))
        build(corpus, work / "docs", files)
        pristine = work / "pristine"
        shutil.copytree(work / "docs", pristine)
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for store in ("client", "edge"):
            # each store starts from the same tree and edits the same files
            shutil.rmtree(work / "docs")
            shutil.copytree(pristine, work / "docs")
            results[store] = {}
            for op in OPS:
                results[store][op] = got = run_op(store, work, op, args)
                print(f"{files} files {store} {op}: {got}", file=sys.stderr)
        points = results["edge"]["reopen"]["count"]
        for op in OPS:
            c, e = results["client"][op], results["edge"][op]
            row = {
                "files": files,
                "points": points,
                "op": op,
                "client_s": c["wall_s"],
                "edge_s": e["wall_s"],
                "edge_x": c["wall_s"] / e["wall_s"],
                "client_store_s": c["store_s"],
                "edge_store_s": e["store_s"],
                "edge_store_x": c["store_s"] / e["store_s"] if e["store_s"] else None,
                "client_rss_mb": c["peak_rss_mb"],
                "edge_rss_mb": e["peak_rss_mb"],
            }
            if op == "search":
                row |= {"client_ms": c["ms_per_query"], "edge_ms": e["ms_per_query"]}
                row["edge_query_x"] = c["ms_per_query"] / e["ms_per_query"]
            if op in ("cold", "noop", "edit"):
                row["embedded"] = f"{c['embedded']}/{e['embedded']}"
            if op == "cold":
                row["edge_index_s"] = e["index_s"]
            rows.append(row)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def recall(corpus: Path, queries: int) -> dict[str, Any]:
    """HNSW against exact search on the corpus's real embeddings."""
    import numpy as np
    from qdrant_edge import Query, QueryRequest, SearchParams

    from mdindex.chunking import Chunker
    from mdindex.config import DEFAULT_MODEL
    from mdindex.documents.parsing import parse_document
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import load_counter, resolve_model
    from mdindex.sinks import Point
    from mdindex.sinks.edge import EdgeStore
    from mdindex.sinks.edge.query import HNSW_EF

    info = resolve_model(DEFAULT_MODEL)
    counter = load_counter(info)
    texts: list[str] = []
    for strategy in ("heading", "token"):
        chunker = Chunker(counter, strategy)
        for path in sorted(corpus.rglob("*.md")):
            doc = parse_document(path.read_text(encoding="utf-8"), str(path))
            texts.extend(c.text for c in chunker.chunk(doc))
    texts = sorted(set(texts))
    embedder = ModelEmbedder(info, device="cpu")
    t = time.perf_counter()
    vectors = embedder.embed(texts)
    print(f"embedded {len(texts)} chunks in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    rng = random.Random(11)
    qtexts = [" ".join(t.split()[:12]) for t in rng.sample(texts, queries)]
    qvecs = embedder.embed(qtexts)

    work = Path(tempfile.mkdtemp(prefix="mdindex-recall-"))
    store = EdgeStore("r", path=work / "r", index_min_points=0, indexing_threshold_kb=1)
    store.open()
    store.ensure_collection(vectors.shape[1])
    store.upsert([Point(str(uuid.UUID(int=i + 1)), v.tolist(), {}) for i, v in enumerate(vectors)])
    t = time.perf_counter()
    store.settle()
    build_s = time.perf_counter() - t
    indexed = store.describe()["indexed_points"]

    def top(q: Any, params: Any) -> set[Any]:
        req = QueryRequest(limit=10, query=Query.Nearest(q.tolist()), params=params)
        return {p.id for p in store.shard.query(req)}

    out: dict[str, Any] = {"points": len(texts), "indexed": indexed, "build_s": build_s}
    for name, params in (
        ("default_ef", None),
        (f"ef_{HNSW_EF}", SearchParams(hnsw_ef=HNSW_EF)),
    ):
        scores = [
            len(top(q, params) & top(q, SearchParams(exact=True))) / 10 for q in np.asarray(qvecs)
        ]
        out[f"recall_{name}"] = sum(scores) / len(scores)
    store.close()
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--files", default="7000,20500")
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--skip-recall", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--op", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        out = worker(args.worker, Path(args.work), args.op, args.edits, args.queries)
        print("RESULT " + json.dumps(out), flush=True)
        return
    offline()
    corpus = corpus_dir(args.corpus)
    rows = pipeline_table(corpus, args)
    print(
        table(
            rows,
            [
                "files",
                "points",
                "op",
                "client_s",
                "edge_s",
                "edge_x",
                "client_store_s",
                "edge_store_s",
                "edge_store_x",
                "client_rss_mb",
                "edge_rss_mb",
                "embedded",
                "edge_index_s",
            ],
        )
    )
    searches = [r for r in rows if r["op"] == "search"]
    print(table(searches, ["files", "points", "client_ms", "edge_ms", "edge_query_x"]))
    print(
        "(each operation is a whole process; _s are wall seconds, edge_x = client_s / edge_s;"
        " _store_s is the time spent inside the store's calls)"
    )
    result: dict[str, Any] = {"rows": rows}
    if not args.skip_recall:
        result["recall"] = rec = recall(corpus, 200)
        print(
            f"HNSW recall@10 on {rec['points']} real embeddings ({rec['indexed']} indexed, "
            f"built in {rec['build_s']:.1f}s): "
            + ", ".join(f"{k} {v:.4f}" for k, v in rec.items() if k.startswith("recall"))
        )
    print(f"written {write_json('stores', result)}")


if __name__ == "__main__":
    main()
