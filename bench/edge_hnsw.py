"""Why a hybrid edge store scanned every vector, and what its searches cost now.

    nice -n 5 python bench/edge_hnsw.py [--sizes 50000,200000] [--quantization none,int8]
        [--hnsw 16x100,32x256] [--vectors latent,words,model]

Issue 37: dense search on the default store grew linearly (11.7, 34.1, 60.4 ms
at 54k, 273k, 546k points). The cause, shown here with qdrant-edge alone
(``quirk``, ready to report upstream): a shard with a sparse vector reports
every point as indexed from its first write, since a sparse vector's inverted
index counts as an index (qdrant lib/segment/src/types.rs:
``SparseVectorDataConfig::is_indexed`` is always true; segment/read_view/info.rs
adds up every vector's index). mdindex's ``wants_index`` read that count, so a
hybrid store was never optimized, and every search was a plain scan.

Then, for each size, quantization and graph (m x ef_construct), one process
builds a store as mdindex does (``EdgeStore``: 384-d cosine vectors from
bench/common.py's HashEmbedder with words=True, BM25 sparse vectors from
mdindex's SparseEncoder, the payload indexes, generated texts of 80 words over
a Zipf vocabulary; or, with ``model``, the paragraphs and sentences of
../shared with the default model's vectors, asked the evalsets' questions), and measures
searches as mdindex asks them (30 hits of 100 candidates, the ``root`` filter):

- ``scan``: before the index is built, as every search ran before the fix;
- then ``settle`` (the build, timed), and a fresh process opens the store and
  measures ``exact`` (every vector), ``dense``, ``sparse`` and ``hybrid``
  through the index, recall@10 of dense and hybrid against their exact
  searches (``hnsw_ef`` as mdindex sets it), dense and hybrid with
  ``hnsw_ef`` at 128 to 2,048 (wall and CPU ms; recall strict and with the
  exact search's ties counted), and its RSS after the searches (anonymous
  and mapped files).

Figures are ratios against exact search in the same run. Writes
bench/results/edge_hnsw.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HashEmbedder, cpu_name, table, write_json

SYLLABLES = [
    "ka",
    "ri",
    "to",
    "na",
    "se",
    "mo",
    "lu",
    "pe",
    "di",
    "fa",
    "go",
    "ha",
    "ji",
    "ke",
    "lo",
    "mi",
    "nu",
    "po",
    "qu",
    "ra",
]
VOCABULARY = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES]  # 8,000
QUERIES = 50
EFS = (128, 256, 512, 1024, 2048)
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def texts(n: int, seed: int, words: int = 80) -> list[str]:
    """Texts of ``words`` words drawn from the vocabulary by Zipf's law (a few
    words in most texts, most in few), as prose is."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, size=(n, words)), len(VOCABULARY)) - 1
    return [" ".join(VOCABULARY[r] for r in row) for row in ranks]


def paragraphs() -> list[str]:
    """Real prose for ``--vectors model``: every distinct paragraph of 8 words or
    more of ../shared/corpus and ../shared/evalsets, and each one's sentences
    of 8 words or more (about 60k texts)."""
    import re

    seen: set[str] = set()
    for path in sorted([*SHARED.glob("corpus/**/*.md"), *SHARED.glob("evalsets/**/*.md")]):
        for para in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
            para = " ".join(para.split())
            parts = [para, *re.split(r"(?<=[.!?])\s+", para)]
            seen.update(p for p in parts if len(p.split()) >= 8)
    return sorted(seen)


def model_texts(n: int) -> list[str]:
    return paragraphs()[:n]


def model_questions() -> list[str]:
    """QUERIES questions of ../shared/evalsets, half from each set."""
    asked: list[str] = []
    for name in ("anthropic-docs", "chroma-chunking"):
        lines = (SHARED / "evalsets" / name / "questions.jsonl").read_text().splitlines()
        asked += [json.loads(line)["question"] for line in lines[: QUERIES // 2]]
    return asked


def model_vectors(texts: list[str]) -> Any:
    """The default model's unit vectors (all-MiniLM-L6-v2), cached by text count
    under the system's temp folder: embedding 60k texts takes minutes."""
    import hashlib

    key = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"edge-hnsw-model-{key}.npy"
    if cache.exists():
        return np.load(cache)
    from mdindex.config import DEFAULT_MODEL
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import resolve_model

    made = ModelEmbedder(resolve_model(DEFAULT_MODEL), device="cpu").embed(texts)
    np.save(cache, made)
    return made


def embedder(vectors: str) -> HashEmbedder:
    """The stand-in: ``words`` sums a random 384-d vector per word (texts with
    80 words lie almost equally near a 3-word query: near-ties, a worst case
    for any graph); ``latent`` draws those word vectors from 32 dimensions
    projected to 384, as a model's vectors have a few dominant directions."""
    made = HashEmbedder(words=True)
    if vectors == "latent":
        rng = np.random.default_rng(12345)
        basis = rng.standard_normal((32, 384)).astype(np.float32)
        made._buckets = rng.standard_normal((4096, 32)).astype(np.float32) @ basis
    return made


def quirk(tmp: Path) -> dict[str, Any]:
    """qdrant-edge alone: 1,000 points with a sparse vector, none optimized."""
    from qdrant_edge import (
        Distance,
        EdgeConfig,
        EdgeShard,
        EdgeSparseVectorParams,
        EdgeVectorParams,
        Point,
        SparseVector,
        UpdateOperation,
    )

    config = EdgeConfig(
        vectors=EdgeVectorParams(size=4, distance=Distance.Cosine),
        sparse_vectors={"bm25": EdgeSparseVectorParams()},
    )
    shard = EdgeShard.create(str(tmp / "quirk"), config)
    points = [
        Point(i, {"": [1.0, 0.0, 0.0, i / 1000], "bm25": SparseVector([i % 7], [1.0])}, {})
        for i in range(1, 1001)
    ]
    shard.update(UpdateOperation.upsert_points(points))
    info = shard.info()
    segments = [
        json.loads(p.read_text())["config"]["vector_data"][""]["index"]["type"]
        for p in (tmp / "quirk" / "segments").glob("*/segment.json")
    ]
    shard.close()
    return {
        "points": info.points_count,
        "indexed_vectors_count": info.indexed_vectors_count,
        "dense_index": segments,
    }


def build(path: Path, size: int, quantization: str, vectors: str, hnsw: str) -> dict[str, Any]:
    """Fill a store of ``size`` points, time searches on it unindexed, settle it."""
    from mdindex.embedding.sparse import SparseEncoder
    from mdindex.sinks.base import Point
    from mdindex.sinks.edge import EdgeStore, shard

    shard.HNSW_M, shard.HNSW_EF_CONSTRUCT = (int(x) for x in hnsw.split("x"))

    store = EdgeStore(
        "c", path=path, index_min_points=1000, quantization=quantization,
        on_disk_vectors=quantization != "none",
    )  # fmt: skip
    store.ensure_collection(384, sparse=True)
    encoder = SparseEncoder()
    if vectors == "model":
        every = model_texts(size)
        size = len(every)
        every_dense = model_vectors(every)
    else:
        made = embedder(vectors)
    started = time.perf_counter()
    step = 4096
    for lo in range(0, size, step):
        if vectors == "model":
            batch, dense = every[lo : lo + step], every_dense[lo : lo + step]
        else:
            batch = texts(min(step, size - lo), seed=lo)
            dense = made.embed(batch)
        sparse = encoder.documents(batch, "en")
        store.upsert(
            [
                Point(
                    str(uuid.UUID(int=lo + i + 1)),
                    dense[i].tolist(),
                    {"root": "docs", "doc_path": f"d{(lo + i) // 5}.md", "text": t},
                    sparse[i],
                )
                for i, t in enumerate(batch)
            ]
        )
    row: dict[str, Any] = {"fill_s": time.perf_counter() - started, "points": size}
    info = store.shard.info()
    # what wants_index read before the fix: every point indexed, nothing to build
    row["edge_indexed_count"] = info.indexed_vectors_count
    row["scan"] = searches(store, vectors, with_exact=False)
    started = time.perf_counter()
    assert store.settle() is True
    row["settle_s"] = time.perf_counter() - started
    row["indexed_points"] = store.describe()["indexed_points"]
    store.close()
    return row


def questions(vectors: str) -> list[tuple[list[float], Any]]:
    """Queries of 2 to 4 words of a stored text (the dense vector, the sparse one)."""
    from mdindex.embedding.sparse import SparseEncoder

    rng = np.random.default_rng(1)
    if vectors == "model":
        asked = model_questions()
        dense = model_vectors(asked)
    else:
        picked = [t.split() for t in texts(QUERIES, seed=0)]
        asked = [" ".join(rng.choice(w, size=int(rng.integers(2, 5)))) for w in picked]
        dense = embedder(vectors).embed(asked)
    encoder = SparseEncoder()
    return [(dense[i].tolist(), encoder.query(q, ["en"])) for i, q in enumerate(asked)]


def searches(store: Any, vectors: str, with_exact: bool = True) -> dict[str, Any]:
    """p50 ms of each kind of search, and recall@10 against the exact ones."""
    from mdindex.sinks.base import SearchFilter, StoreQuery

    where = SearchFilter(roots=("docs",))
    out: dict[str, Any] = {}
    found: dict[str, list[list[str]]] = {}
    kinds = ["dense", "sparse", "hybrid"] + (["exact", "exact_hybrid"] if with_exact else [])
    for kind in kinds:
        times, cpu, ids = [], [], []
        for dense, sparse in questions(vectors):
            query = StoreQuery(
                30,
                dense=None if kind == "sparse" else dense,
                sparse=sparse if kind in ("sparse", "hybrid", "exact_hybrid") else None,
                filter=where,
                candidates=100,
                exact=kind.startswith("exact"),
            )
            store.search(query)  # the pages in, as a running daemon has them
            t, c = time.perf_counter(), time.process_time()
            hits = store.search(query)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            ids.append([(h.id, h.score) for h in hits])
        found[kind] = ids
        out[f"{kind}_ms"] = statistics.median(times) * 1000
        # CPU time of the process (edge's search threads included): on a
        # shared machine a search waits for a core, which wall time counts
        out[f"{kind}_cpu_ms"] = statistics.median(cpu) * 1000
    if not with_exact:
        return out
    # the graph's candidate list, hnsw_ef: mdindex asks max(HNSW_EF, candidates, k)
    from mdindex.sinks.edge import query as plan

    default = plan.HNSW_EF
    for ef in EFS:
        plan.HNSW_EF = ef
        for kind in ("dense", "hybrid"):
            times, cpu, ids = [], [], []
            for dense, sparse in questions(vectors):
                query = StoreQuery(
                    30,
                    dense=dense,
                    sparse=sparse if kind == "hybrid" else None,
                    filter=where,
                    candidates=100,
                )
                store.search(query)
                t, c = time.perf_counter(), time.process_time()
                hits = store.search(query)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                ids.append([(h.id, h.score) for h in hits])
            found[f"{kind}{ef}"] = ids
            out[f"{kind}{ef}_ms"] = statistics.median(times) * 1000
            out[f"{kind}{ef}_cpu_ms"] = statistics.median(cpu) * 1000
    plan.HNSW_EF = default
    out["hnsw_ef"] = default
    for kind, base in (
        ("dense", "exact"),
        ("hybrid", "exact_hybrid"),
        *[(f"dense{ef}", "exact") for ef in EFS],
        *[(f"hybrid{ef}", "exact_hybrid") for ef in EFS],
    ):
        pairs = list(zip(found[kind], found[base], strict=True))
        out[f"{kind}_recall10"] = statistics.mean(recall(a, b, ties=False) for a, b in pairs)
        out[f"{kind}_tied10"] = statistics.mean(recall(a, b, ties=True) for a, b in pairs)
    return out


def recall(got: list[tuple[str, float]], exact: list[tuple[str, float]], ties: bool) -> float:
    """The share of the exact top 10 among ``got``'s top 10. With ``ties``, a
    hit also counts when the exact search scores it as high as its own 10th
    (``exact`` holds its top 30): which of several equal scores make the top
    10 is the engine's choice, and hybrid searches have such ties (two runs
    of the same search without an index differ in 0.2% of their hits)."""
    top = {i for i, _ in exact[:10]}
    if not ties:
        return len(top & {i for i, _ in got[:10]}) / 10
    scores, tenth = dict(exact), exact[9][1] if len(exact) >= 10 else float("-inf")
    return sum(scores.get(i, float("-inf")) >= tenth - 1e-6 for i, _ in got[:10]) / 10


def memory() -> dict[str, float]:
    fields = {"VmRSS": "rss_mb", "RssAnon": "anon_mb", "RssFile": "file_mb", "VmHWM": "hwm_mb"}
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in fields:
            out[fields[key]] = int(line.split()[1]) / 1024
    return out


def search_only(path: Path, vectors: str) -> dict[str, Any]:
    from mdindex.sinks.edge import EdgeStore

    started = time.perf_counter()
    store = EdgeStore("c", path=path).open()
    opened = time.perf_counter() - started
    row = searches(store, vectors) | {"open_s": opened}
    row |= memory()
    store.close()
    return row


def child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        sys.exit(f"{args} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="50000,200000")
    ap.add_argument("--quantization", default="none,int8")
    ap.add_argument(
        "--vectors", default="latent", help="latent, words, model (real texts), or a list"
    )
    ap.add_argument("--hnsw", default="16x100,32x256", help="graphs to build, m x ef_construct")
    ap.add_argument("--tmp", help="where the stores go (default: the system's temp folder)")
    ap.add_argument("--build", nargs=5, help=argparse.SUPPRESS)  # PATH SIZE QUANT VECTORS HNSW
    ap.add_argument("--search", nargs=2, help=argparse.SUPPRESS)  # PATH VECTORS
    args = ap.parse_args()
    if args.build:
        path, size, quantization, vectors, hnsw = args.build
        print(json.dumps(build(Path(path), int(size), quantization, vectors, hnsw)))
        return
    if args.search:
        print(json.dumps(search_only(Path(args.search[0]), args.search[1])))
        return
    tmp = Path(tempfile.mkdtemp(prefix="edge-hnsw-", dir=args.tmp))
    rows: list[dict[str, Any]] = []
    try:
        seen = quirk(tmp)
        runs = [
            (v, int(s), q, h)
            for v in args.vectors.split(",")
            for s in args.sizes.split(",")
            for q in args.quantization.split(",")
            for h in args.hnsw.split(",")
        ]
        for vectors, size, quantization, hnsw in runs:
            path = tmp / f"{vectors}-{size}-{quantization}-{hnsw}"
            made = child(["--build", str(path), str(size), quantization, vectors, hnsw])
            scan = {f"scan_{k}": v for k, v in made.pop("scan").items()}
            row = {"vectors": vectors, "points": size, "quantization": quantization, "hnsw": hnsw}
            row |= made | scan | child(["--search", str(path), vectors])
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = cpu_name()
    print(f"qdrant-edge alone, 1,000 points with a sparse vector, never optimized: {seen}")
    print(f"\nmdindex's edge store by size; {cpu}; BM25 sparse")
    cols = ["vectors", "points", "quantization", "hnsw", "fill_s", "settle_s", "edge_indexed_count"]
    cols += ["indexed_points", "scan_dense_ms", "scan_hybrid_ms", "exact_ms", "dense_ms"]
    cols += ["sparse_ms", "hybrid_ms", "dense_recall10", "hybrid_recall10", "hybrid_tied10"]
    cols += ["hnsw_ef"]
    each = ("ms", "cpu_ms", "recall10", "tied10")
    cols += [f"{k}{ef}_{m}" for k in ("dense", "hybrid") for ef in EFS for m in each]
    cols += ["open_s", "rss_mb", "anon_mb", "file_mb"]
    print(table(rows, cols))
    write_json("edge_hnsw", {"cpu": cpu, "quirk": seen, "rows": rows})


if __name__ == "__main__":
    main()
