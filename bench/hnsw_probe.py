"""Does a qdrant-edge search use the HNSW index? Latency and recall@10 by size.

    nice -n 10 python bench/hnsw_probe.py [--sizes 50000,100000,200000] [--kind both]

A reproduction ready to report upstream: qdrant-edge alone (no mdindex code),
the shard made as mdindex makes it (384-d cosine, indexing_threshold 10,000 KB,
keyword indexes on ``root`` and ``doc_path``). For each size and each kind of
vectors it fills a fresh shard, then measures searches before ``optimize()``,
after it, and after closing and loading the shard again:

- ``plain``: no filter; ``filtered``: ``root`` MatchAny (every point matches,
  as mdindex's searches filter on their roots); ``exact``: ``exact=True``;
- p50 latency of --queries queries, recall@10 of each against ``exact``;
- the shard's segments and indexed vectors.

Vectors: ``random`` are isotropic Gaussian (as bench/scale.py's stand-in
embedder makes them: 384 intrinsic dimensions, the worst case for any graph
index); ``structured`` have 32 latent dimensions projected to 384 plus noise,
closer to a real model's. With --quantization int8 the shard keeps int8
copies in RAM beside the originals on disk (``Memory.Cold``), rescored.

Writes bench/results/hnsw_probe.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, vm_hwm_mb, write_json

DIM = 384


def vectors(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "random":
        v = rng.standard_normal((n, DIM), dtype=np.float32)
    else:
        basis = np.random.default_rng(7).standard_normal((32, DIM), dtype=np.float32)
        latent = rng.standard_normal((n, 32), dtype=np.float32)
        v = latent @ basis + 0.5 * rng.standard_normal((n, DIM), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_shard(path: Path, quantization: str) -> Any:
    from qdrant_edge import (
        Distance,
        EdgeConfig,
        EdgeOptimizersConfig,
        EdgeShard,
        EdgeVectorParams,
        Memory,
        PayloadSchemaType,
        ScalarQuantizationConfig,
        ScalarType,
        UpdateOperation,
    )

    quant = (
        ScalarQuantizationConfig(type=ScalarType.Int8, quantile=0.99, memory=Memory.Pinned)
        if quantization == "int8"
        else None
    )
    config = EdgeConfig(
        vectors=EdgeVectorParams(
            size=DIM,
            distance=Distance.Cosine,
            memory=Memory.Cold if quant else None,
        ),
        quantization_config=quant,
        optimizers=EdgeOptimizersConfig(indexing_threshold=10_000),
    )
    shard = EdgeShard.create(str(path), config)
    for key in ("root", "doc_path"):
        shard.update(UpdateOperation.create_field_index(key, PayloadSchemaType.Keyword))
    return shard


def fill(shard: Any, data: np.ndarray) -> None:
    from qdrant_edge import Point, UpdateOperation

    step = 2048
    for lo in range(0, len(data), step):
        batch = [
            Point(i, data[i].tolist(), {"root": "docs", "doc_path": f"d{i // 5}.md"})
            for i in range(lo, min(lo + step, len(data)))
        ]
        shard.update(UpdateOperation.upsert_points(batch))


def ask(shard: Any, q: np.ndarray, how: str, ef: int) -> tuple[float, list[int]]:
    from qdrant_edge import FieldCondition, Filter, MatchAny, Query, QueryRequest, SearchParams

    where = (
        Filter(must=[FieldCondition(key="root", match=MatchAny(["docs"]))])
        if how == "filtered"
        else None
    )
    params = SearchParams(exact=how == "exact", hnsw_ef=ef)
    request = QueryRequest(
        limit=10, query=Query.Nearest(q.tolist()), filter=where, params=params, with_payload=False
    )
    t = time.perf_counter()
    points = shard.query(request)
    return time.perf_counter() - t, [int(p.id) for p in points]


def measure(shard: Any, queries: np.ndarray, ef: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    found: dict[str, list[list[int]]] = {}
    for how in ("exact", "plain", "filtered"):
        ask(shard, queries[0], how, ef)  # warm the pages
        times, ids = [], []
        for q in queries:
            dt, hit = ask(shard, q, how, ef)
            times.append(dt)
            ids.append(hit)
        found[how] = ids
        out[f"{how}_p50_ms"] = statistics.median(times) * 1000
    for how in ("plain", "filtered"):
        pairs = zip(found[how], found["exact"], strict=True)
        out[f"{how}_recall10"] = statistics.mean(len(set(a) & set(b)) / 10 for a, b in pairs)
    info = shard.info()
    out |= {"segments": info.segments_count, "indexed": info.indexed_vectors_count}
    return out


def run(kind: str, size: int, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    from qdrant_edge import EdgeShard

    path = tmp / f"{kind}-{size}"
    data = vectors(kind, size, seed=size)
    queries = vectors(kind, args.queries, seed=1)
    shard = make_shard(path, args.quantization)
    t = time.perf_counter()
    fill(shard, data)
    del data
    fill_s = time.perf_counter() - t
    rows = []
    base = {"kind": kind, "points": size, "quantization": args.quantization}
    rows.append(base | {"stage": "before optimize", "s": fill_s} | measure(shard, queries, args.ef))
    t = time.perf_counter()
    shard.optimize()
    opt_s = time.perf_counter() - t
    rows.append(base | {"stage": "after optimize", "s": opt_s} | measure(shard, queries, args.ef))
    shard.close()
    t = time.perf_counter()
    shard = EdgeShard.load(str(path))
    load_s = time.perf_counter() - t
    rows.append(base | {"stage": "reloaded", "s": load_s} | measure(shard, queries, args.ef))
    shard.close()
    shutil.rmtree(path, ignore_errors=True)
    for row in rows:
        print(row, file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="50000,100000,200000")
    ap.add_argument("--kind", choices=["random", "structured", "both"], default="both")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--ef", type=int, default=128)
    ap.add_argument("--quantization", choices=["none", "int8"], default="none")
    ap.add_argument("--tmp", help="where the shards go (default: the system's temp folder)")
    args = ap.parse_args()
    kinds = ["random", "structured"] if args.kind == "both" else [args.kind]
    tmp = Path(tempfile.mkdtemp(prefix="hnsw-probe-", dir=args.tmp))
    try:
        rows = [r for s in args.sizes.split(",") for k in kinds for r in run(k, int(s), args, tmp)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = cpu_name()
    print(f"qdrant-edge search by size; {cpu}; hnsw_ef {args.ef}; peak RSS {vm_hwm_mb():.0f} MB")
    cols = ["kind", "points", "stage", "s", "segments", "indexed", "exact_p50_ms"]
    cols += ["plain_p50_ms", "plain_recall10", "filtered_p50_ms", "filtered_recall10"]
    print(table(rows, cols))
    name = "hnsw_probe" if args.quantization == "none" else f"hnsw_probe_{args.quantization}"
    write_json(name, {"cpu": cpu, "ef": args.ef, "peak_rss_mb": vm_hwm_mb(), "rows": rows})


if __name__ == "__main__":
    main()
