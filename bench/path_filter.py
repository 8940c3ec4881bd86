"""A path filter as a prefix against the documents under it named: search p50.

    python bench/path_filter.py --run /tmp/mdindex-scale-200000-xxxx [--prefixes set000/,set00,set0]

Runs on a tree, state and store that ``bench/scale.py --keep`` left (its
stand-in embedder asks the questions, as in that run). For each prefix it
reads the documents under it from the state (``index.state.points_under``,
with no limit) and asks the same generated questions of the store through
mdindex's own filter (``SearchFilter``), once with the prefix alone
(``MatchPrefix`` on ``doc_path``, tested on each point the engine's graph
visits) and once with the documents named (``MatchAny`` on the keyword
index): dense and hybrid p50, and whether both return the same hits. The
rule in ``index.search.name_paths`` names them while they hold fewer points
than the engine scans instead of walking its graph.

Writes bench/results/path_filter.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, write_json
from scale import STAND_IN, WORDS


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", required=True, help="a run folder bench/scale.py --keep left")
    ap.add_argument("--prefixes", default="set000/,set00,set0")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args()
    run = Path(args.run)
    if json.loads((run / "row.json").read_text()).get("embedder") == "fixed":
        exec(STAND_IN, {})  # the run's stand-in embedder, as every process of it had
    from mdindex.config import load_settings
    from mdindex.index.state import points_under
    from mdindex.runtime import make_models, make_store, state_path
    from mdindex.sinks.base import SearchFilter, StoreQuery
    from mdindex.versions.catalog import reader_settings

    settings = reader_settings(load_settings({"state_dir": str(run / "state")}))
    models = make_models(settings, queries_only=True)
    store = make_store(settings).open()
    questions = [" ".join(random.Random(q).sample(WORDS, 3)) for q in range(args.queries)]
    asked = [
        (models.embedder.embed_query(q).tolist(), models.planner.sparse.query(q, ["en"]))
        for q in questions
    ]
    rows: list[dict[str, Any]] = []
    for prefix in args.prefixes.split(","):
        t0 = time.perf_counter()
        named = points_under(state_path(settings), (), prefix, 10**9) or []
        row: dict[str, Any] = {
            "prefix": prefix,
            "documents": len(named),
            "state_ms": (time.perf_counter() - t0) * 1000,
        }
        hits: dict[str, list[list[str]]] = {}
        for how, where in (
            ("prefix", SearchFilter(path_prefix=prefix)),
            ("named", SearchFilter(path_prefix=prefix, doc_paths=tuple(named))),
        ):
            for mode in ("dense", "hybrid"):
                times, found = [], []
                for dense, sparse in asked:
                    query = StoreQuery(
                        30, dense=dense, sparse=sparse if mode == "hybrid" else None, filter=where
                    )
                    t = time.perf_counter()
                    found.append([h.id for h in store.search(query)])
                    times.append(time.perf_counter() - t)
                row[f"{mode}_{how}_p50_ms"] = statistics.median(times) * 1000
                hits[f"{mode}_{how}"] = found
        row["same_hits"] = all(
            hits[f"{m}_prefix"] == hits[f"{m}_named"] for m in ("dense", "hybrid")
        )
        print(row, file=sys.stderr)
        rows.append(row)
    store.close()
    columns = list(rows[0])
    print(f"path filter, prefix against named; {cpu_name()}; {run.name}")
    print(table(rows, columns))
    write_json("path_filter", {"cpu": cpu_name(), "run": run.name, "rows": rows})


if __name__ == "__main__":
    main()
