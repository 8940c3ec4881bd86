"""What a process that opens the edge store holds, in each layout mdindex makes.

    python bench/store_memory.py [--points 20000] [--work DIR]

The same points (random 384-d vectors, 80-term sparse vectors, the payload keys
mdindex indexes and 300 characters of text) are written into three new edge
shards, each made by mdindex's own ``shard.create`` and ``ensure_indexes`` and
optimized (the HNSW graph built, as ``settle`` builds it):

- default: vectors, the sparse index and the keyword payload indexes in RAM;
- on_disk, keywords in RAM: ``on_disk_vectors`` before the keyword indexes
  went to disk with it (the vectors and the sparse index Cold);
- on_disk: ``on_disk_vectors`` as it is (the keyword indexes Cold too).

Each is then opened by a fresh process that scrolls two payload keys of every
point (what ``verify`` and any status of the store do) and runs 30 dense
searches, sampling its anonymous and file-mapped memory every 20 ms. The
anonymous memory the store adds (after the imports) is the figure that grows
with the store; the file-mapped part is page cache the kernel takes back.
Ratios are against the default layout in the same run.

Writes bench/results/store_memory.json.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, write_json

LAYOUTS = {  # name: (on_disk_vectors, keyword indexes on disk)
    "default": (False, False),
    "on_disk, keywords in RAM": (True, False),
    "on_disk": (True, True),
}

PROBE = r"""
import sys, threading, time
peaks = {"RssAnon": 0, "RssFile": 0}
def now():
    out = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in peaks or key == "VmHWM":
            out[key] = int(line.split()[1])
    return out
def sample():
    while True:
        for key, value in now().items():
            if key in peaks:
                peaks[key] = max(peaks[key], value)
        time.sleep(0.02)
import numpy as np
from qdrant_edge import EdgeShard, Query, QueryRequest, ScrollRequest
before = now()
threading.Thread(target=sample, daemon=True).start()
shard = EdgeShard.load(sys.argv[1])
offset, seen = None, 0
while True:
    page, offset = shard.scroll(
        ScrollRequest(limit=2048, offset=offset, with_payload=["root", "doc_path"], with_vector=False)
    )
    seen += len(page)
    if offset is None:
        break
rng = np.random.default_rng(1)
for _ in range(30):
    v = rng.standard_normal(384)
    shard.query(QueryRequest(query=Query.Nearest((v / np.linalg.norm(v)).tolist()), limit=10))
time.sleep(0.1)
print(seen, now()["VmHWM"] >> 10, peaks["RssAnon"] >> 10, peaks["RssFile"] >> 10,
      (peaks["RssAnon"] - before["RssAnon"]) >> 10)
"""


def build(path: Path, points: int, on_disk: bool, cold_keywords: bool) -> float:
    """The shard as mdindex makes it, filled and optimized; seconds to optimize."""
    import numpy as np
    from qdrant_edge import EdgeShard, SparseVector, UpdateOperation
    from qdrant_edge import Point as EdgePoint

    from mdindex.sinks.edge.shard import create, ensure_indexes

    shard = create(path, 384, True, 1, "none", on_disk)
    ensure_indexes(shard, lambda what, fn: fn(), cold_keywords)
    rng, pick = np.random.default_rng(0), random.Random(0)
    for start in range(0, points, 512):
        batch = []
        for i in range(start, min(points, start + 512)):
            v = rng.standard_normal(384).astype(np.float32)
            terms = sorted(pick.sample(range(50_000), 80))
            payload = {
                "root": "docs",
                "doc_path": f"d{i // 5}.md",
                "content_hash": f"{i:064x}",
                "tags": [f"t{i % 50}"],
                "lang": "en",
                "text": "word " * 60,
            }
            vectors = {
                "": (v / np.linalg.norm(v)).tolist(),
                "bm25": SparseVector(terms, [1.0] * 80),
            }
            batch.append(EdgePoint(str(uuid.UUID(int=i + 1)), vectors, payload))
        shard.update(UpdateOperation.upsert_points(batch))
    shard.close()
    started = time.perf_counter()
    shard = EdgeShard.load(str(path))
    shard.optimize()
    shard.close()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument("--work", help="where the shards go (kept); default a temporary folder")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mdindex-store-memory-"))
    print(f"CPU: {cpu_name()}; {args.points:,} points; shards in {work}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for name, (on_disk, cold) in LAYOUTS.items():
        path = work / name.replace(", ", "-").replace(" ", "_")
        optimize_s = None if path.exists() else build(path, args.points, on_disk, cold)
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=False
        )
        if done.returncode:
            sys.exit(done.stderr[-2000:])
        seen, hwm, anon, mapped, added = map(int, done.stdout.split())
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) >> 20
        rows.append(
            {
                "layout": name,
                "points": seen,
                "optimize_s": round(optimize_s, 1) if optimize_s is not None else None,
                "store_mb": size,
                "peak_rss_mb": hwm,
                "anon_mb": anon,
                "files_mb": mapped,
                "store_anon_mb": added,
            }
        )
        print(f"  {name}: {added} MB anonymous added by the store", file=sys.stderr)
    base = rows[0]["store_anon_mb"] or 1
    for row in rows:
        row["store_anon_ratio"] = round(row["store_anon_mb"] / base, 2)
    columns = list(rows[0])
    print(table(rows, columns))
    print(f"wrote {write_json('store_memory', {'cpu': cpu_name(), 'rows': rows})}")


if __name__ == "__main__":
    main()
