"""What the check before every local write costs as the store grows.

    python bench/store_walk.py [--points 10000,50000]

``sinks.folder.check_writable`` walks the store's folder (os.walk, os.access
per file) before each upsert and delete. For each size: an edge store of that
many points (random 384-d vectors, a small payload, written in batches of
512 as a backfill writes), its file count, the median time of the check, and
of a one-point upsert (the baseline: the write the check guards, the check
included), as a ratio.

Measured (Intel Xeon with AMX, 2 cores, edge): 61 files at 1k and 10k points,
65 at 50k, 71 at 100k; the check 0.26-0.29 ms at every size, the upsert
0.32-0.35 ms. The walk does not grow with the store (edge keeps a few
segments, not a file per point), so its result is not kept between writes.
qdrant-client local mode (--store client): 5 files, the check 0.02 ms at 1k,
10k and 50k points, the upsert 0.15-0.17 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name
from mdindex.config import load_settings
from mdindex.runtime import make_store
from mdindex.sinks.base import Point
from mdindex.sinks.folder import check_writable

DIM = 384


def point(rng: random.Random, i: int) -> Point:
    vector = [rng.random() - 0.5 for _ in range(DIM)]
    return Point(str(uuid.UUID(int=i + 1)), vector, {"root": "r", "doc_path": f"d{i}.md"})


def median_s(fn: object, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="10000,50000")
    ap.add_argument("--store", default="edge", choices=["edge", "client"])
    args = ap.parse_args()
    rng = random.Random(1)
    print(f"CPU: {cpu_name()}; store: {args.store}")
    for n in (int(x) for x in args.points.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            state = str(Path(tmp) / "state")
            s = load_settings({"roots": [tmp], "state_dir": state, "store": args.store})
            store = make_store(s)
            store.open()
            store.ensure_collection(DIM, sparse=False)
            for start in range(0, n, 512):
                store.upsert([point(rng, i) for i in range(start, min(n, start + 512))])
            folder = Path(store.path)  # type: ignore[attr-defined]
            files = sum(1 for p in folder.rglob("*") if p.is_file())
            one = [point(rng, n + 7)]
            check = median_s(partial(check_writable, folder), 50)
            upsert = median_s(partial(store.upsert, one), 50)
            store.close()
        print(
            f"{n:>6} points, {files:>5} files: check {check * 1e3:.2f} ms, "
            f"one-point upsert (check included) {upsert * 1e3:.2f} ms, check/upsert {check / upsert:.2f}"
        )


if __name__ == "__main__":
    main()
