"""A cold `mdindex search` without a daemon: the whole process, ONNX against torch.

    python bench/cold_search.py [--corpus DIR] [--runs 5] [--queries 200] [--stores edge,client]

1. Indexes the corpus with the real model and the default settings into a
   fresh state and cache folder, on the first store of ``--stores``
   (``mdindex backfill``: the first model load exports the ONNX graph and
   measures the backends), then copies the collection to the other embedded
   engine (``mdindex migrate``, nothing embedded).
2. For each store, ``--runs`` cold processes of ``mdindex search QUERY -k 10
   --json`` each way: with the cached ONNX export (the default) and with
   ``backend = torch`` (the path every search took before: sentence-
   transformers and torch imported, the model loaded). Wall time of the
   whole process, median and best; goal: under 1.5 s with ONNX. Beside it,
   ``python -c pass`` and ``import mdindex.cli`` show where the floor is.
3. Whether the answers are the same: ``--queries`` queries (chunk openings)
   searched in one process with the ONNX query embedder and with torch as
   the daemon runs it (the calibrated choice), through mdindex's own search
   call: the share of queries with the same top-10 IDs in the same order,
   and the mean top-10 overlap (goal: same top-10).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, load_texts, offline, run_process, write_json

QUERY = "how do I define a struct with named fields"


def wall(cmd: list[str], env: dict[str, str]) -> float:
    return run_process(cmd, env)[0]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--stores", default="edge,client")
    ap.add_argument("--work", help="keep the index here; a second run only searches")
    args = ap.parse_args()
    offline()
    corpus = corpus_dir(args.corpus)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mdindex-cold-"))
    built = (work / "state").is_dir()
    env = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "MDINDEX_STATE_DIR": str(work / "state"),
        "MDINDEX_CACHE_DIR": str(work / "cache"),
    }
    mdindex = [sys.executable, "-m", "mdindex"]
    stores = args.stores.split(",")
    if not built:
        # the first store named is built, the others are copies (nothing embedded)
        source = env | {"MDINDEX_STORE": stores[0]}
        start = time.perf_counter()
        wall([*mdindex, "backfill", str(corpus)], source)
        print(
            f"backfill (first load included): {time.perf_counter() - start:.1f} s", file=sys.stderr
        )
        for other in stores[1:]:
            wall([*mdindex, "migrate", "--to", other], source)

    floor = {
        "python -c pass": statistics.median(
            wall([sys.executable, "-c", "pass"], env) for _ in range(args.runs)
        ),
        "import mdindex.cli": statistics.median(
            wall([sys.executable, "-c", "import mdindex.cli"], env) for _ in range(args.runs)
        ),
    }
    rows: list[dict[str, Any]] = []
    for store in stores:
        for backend in ("auto", "torch"):
            run_env = env | {"MDINDEX_STORE": store, "MDINDEX_BACKEND": backend}
            cmd = [*mdindex, "search", QUERY, "-k", "10", "--json"]
            times = [wall(cmd, run_env) for _ in range(args.runs)]
            rows.append(
                {
                    "store": store,
                    "query embedder": "onnx (cached export)" if backend == "auto" else "torch",
                    "median_s": statistics.median(times),
                    "best_s": min(times),
                }
            )
            print(rows[-1], file=sys.stderr)

    same = agreement(corpus, work, args.queries)
    print(f"{'store':8} {'query embedder':22} {'median s':>9} {'best s':>7}")
    for r in rows:
        print(f"{r['store']:8} {r['query embedder']:22} {r['median_s']:9.2f} {r['best_s']:7.2f}")
    for store in stores:
        onnx = next(r for r in rows if r["store"] == store and r["query embedder"] != "torch")
        torch = next(r for r in rows if r["store"] == store and r["query embedder"] == "torch")
        print(
            f"{store}: ONNX {torch['median_s'] / onnx['median_s']:.1f}x faster than torch "
            f"(goal: under 1.5 s: {'yes' if onnx['median_s'] < 1.5 else 'no'})"
        )
    print("floor: " + ", ".join(f"{k} {v:.2f} s" for k, v in floor.items()))
    for name, row in same["against_daemon"].items():
        print(
            f"{same['queries']} queries, {name} against the daemon's torch path "
            f"({same['daemon']}, queries in fp32): same top-10 in the same order "
            f"{row['same_order']:.3f}, same top-10 set {row['same_set']:.3f}, "
            f"mean overlap {row['overlap']:.4f}"
        )
    path = write_json("cold_search", {"rows": rows, "floor": floor, "agreement": same})
    print(f"written {path}")


def _key(hit: dict[str, Any]) -> tuple[Any, ...]:
    return (hit.get("root"), hit.get("doc_path"), hit.get("chunk_index"))


class _DocumentPrecision:
    """Queries embedded as documents are (bf16 where chosen): the path before."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def embed_query(self, text: str) -> Any:
        return self.embedder.embed([text])[0]


def agreement(corpus: Path, work: Path, n: int) -> dict[str, Any]:
    """Top-10 of the cold process's ONNX query vectors, and of queries embedded in
    the documents' precision, against the daemon's torch path."""
    from mdindex.config import load_settings
    from mdindex.index.search import Query, search
    from mdindex.runtime import make_models, make_store

    settings = load_settings(
        {"roots": [str(corpus)], "state_dir": str(work / "state"), "cache_dir": str(work / "cache")}
    )
    onnx = make_models(settings, queries_only=True)
    daemon = make_models(settings)  # the measured choice, as `mdindex watch` runs
    daemon.embedder.load()
    texts = [t for _, t in load_texts(corpus)]
    rng = random.Random(11)
    queries = []
    while len(queries) < n:
        words = rng.choice(texts).split()
        if len(words) > 20:
            at = rng.randrange(0, len(words) - 12)
            queries.append(" ".join(words[at : at + 10]))
    store = make_store(settings).open()
    others = {
        "onnx (cold process)": onnx.embedder,
        "queries in the documents' precision": _DocumentPrecision(daemon.embedder),
    }
    counts = {name: {"same_order": 0, "same_set": 0, "overlap": 0.0} for name in others}
    try:
        for q in queries:
            query = Query(text=q, k=10)
            want = [_key(h) for h in search(daemon.embedder, daemon.planner.sparse, store, query)]
            for name, embedder in others.items():
                got = [_key(h) for h in search(embedder, daemon.planner.sparse, store, query)]  # type: ignore[arg-type]
                c = counts[name]
                c["same_order"] += got == want
                c["same_set"] += set(got) == set(want)
                c["overlap"] += len(set(got) & set(want)) / max(1, len(want))
    finally:
        store.close()
    assert daemon.embedder.choice is not None
    return {
        "queries": len(queries),
        "daemon": daemon.embedder.choice.name,
        "against_daemon": {
            name: {k: v / len(queries) for k, v in c.items()} for name, c in counts.items()
        },
    }


if __name__ == "__main__":
    main()
