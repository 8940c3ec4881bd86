"""`mdindex backfill --ray` against a local backfill of the same corpus, in one run.

    python bench/ray_backfill.py [--corpus DIR] [--cpus 2] [--actors 1,2]

1. A local backfill of the corpus from cold (real model, default precision):
   the baseline.
2. The same backfill through a local Ray instance limited to --cpus CPUs, once
   per embedding actor count in --actors: chunks/s and the overhead ratio
   (Ray time / local time). Each run starts from an empty store and state;
   Ray's start-up is timed apart.
3. Checks that every Ray run stored the same point IDs as the local run.

Needs the `ray` extra. On a machine with GPUs, each actor takes one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, offline, table, write_json


def point_ids(settings: Any) -> set[str]:
    from mdindex.runtime import make_store

    store = make_store(settings)
    store.open()
    try:
        return {pid for pid, _, _ in store.scroll(payload=False)}
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--actors", default="1,2")
    args = ap.parse_args()
    offline()
    import os

    import ray

    from mdindex import distributed
    from mdindex.config import load_settings
    from mdindex.runtime import make_indexer

    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-ray-"))

    def fresh(name: str) -> Any:
        return load_settings({"roots": [str(corpus)], "state_dir": str(work / name)})

    rows: list[dict[str, Any]] = []
    local = fresh("local")
    indexer = make_indexer(local)
    t = time.perf_counter()
    summary = indexer.backfill()
    local_s = time.perf_counter() - t
    indexer.close()
    want = point_ids(local)
    rows.append(
        {
            "run": "local",
            "seconds": local_s,
            "chunks_embedded": summary.chunks_embedded,
            "chunks_per_s": summary.chunks_embedded / local_s,
            "x_local": 1.0,
            "same_ids": True,
        }
    )
    print(rows[-1], file=sys.stderr)

    for actors in (int(a) for a in args.actors.split(",")):
        t = time.perf_counter()
        ray.init(
            num_cpus=args.cpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}},
        )
        startup_s = time.perf_counter() - t
        settings = fresh(f"ray-{actors}")
        indexer = make_indexer(settings)
        t = time.perf_counter()
        summary = distributed.backfill(indexer, None, embed_actors=actors)
        seconds = time.perf_counter() - t
        indexer.close()
        ray.shutdown()
        rows.append(
            {
                "run": f"ray, {actors} embedding actor{'s' if actors > 1 else ''}",
                "seconds": seconds,
                "ray_startup_s": startup_s,
                "chunks_embedded": summary.chunks_embedded,
                "chunks_per_s": summary.chunks_embedded / seconds,
                "x_local": seconds / local_s,
                "same_ids": point_ids(settings) == want,
            }
        )
        print(rows[-1], file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    cols = ["run", "seconds", "ray_startup_s", "chunks_embedded", "chunks_per_s", "x_local"]
    print(table(rows, [*cols, "same_ids"]))
    print(
        f"corpus {corpus}, Ray limited to {args.cpus} CPUs on {os.cpu_count()} cores; "
        "x_local = seconds / local seconds (the overhead ratio)"
    )
    print(f"written {write_json('ray_backfill', {'rows': rows, 'cpus': args.cpus})}")


if __name__ == "__main__":
    main()
