"""How many candidates a graph a search looks at (``edge.query.HNSW_EF_LEAST``):
recall@10 against the exact search, and hybrid search time, on a kept store.

    python bench/candidates.py --kept RUN [--ef 384,448,512,768] [--rounds 6]

RUN is a run folder bench/scale.py kept (``--keep``). Its live store is opened
in this process with the stand-in embedder it was built with, and asked the
questions bench/scale.py times (50 word triples, 50 sampled headings): for
each count, dense and hybrid recall@10 against the exact search of the same
store (a hit the exact search scores as its 10th counted, as ann-benchmarks
does; by ids alone beside it), then hybrid searches as mdindex asks them (30
hits for 10 passages) of the first 50, ROUNDS rounds over every count in
turns, the order turned each round; the median time.

Writes bench/results/candidates_FILES.json (FILES: the run's tree size).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, write_json
from layouts import exact_top, live_store, questions, recall10


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kept", required=True, help="a run folder bench/scale.py kept")
    ap.add_argument("--ef", default="384,448,512,768", help="candidates a graph, comma-separated")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--corpus", default="", help="the corpus bench/scale.py generated from")
    args = ap.parse_args()
    if not all(e.isdigit() and int(e) > 0 for e in args.ef.split(",")) or args.rounds < 1:
        ap.error("--ef takes counts above 0, comma-separated, and --rounds at least 1")
    if not (Path(args.kept) / "row.json").is_file():
        ap.error(f"--kept {args.kept}: no run bench/scale.py kept there (no row.json)")
    import scale

    exec(scale.STAND_IN, {})  # the stand-in embedder the run was built with
    import mdindex.sinks.edge.query as edge_query
    from mdindex.index.state import store_reopened
    from mdindex.runtime import make_models, state_path
    from mdindex.sinks.base import StoreQuery

    run = Path(args.kept)
    settings, store = live_store(run / "state")
    before = store.signature()
    models = make_models(settings)
    encoder = models.planner.sparse
    assert encoder is not None  # the run's store has sparse vectors
    store.open()
    vectors = [
        (models.embedder.embed_query(q).tolist(), encoder.query(q, ["en"]))
        for q in questions(args.corpus or None)
    ]
    exact = {mode: exact_top(store, vectors, mode) for mode in ("dense", "hybrid")}
    counts = [int(e) for e in args.ef.split(",")]
    rows: dict[int, dict[str, Any]] = {}
    for ef in counts:
        edge_query.HNSW_EF_LEAST, edge_query.HNSW_EF = ef, 2 * ef  # each graph's share: ef
        row: dict[str, Any] = {"ef": ef, "graphs": store._graphs}
        for mode in ("dense", "hybrid"):
            row[f"recall10_{mode}"], row[f"recall10_{mode}_ids"] = recall10(
                store, vectors, exact[mode], mode
            )
        row["times"] = []
        rows[ef] = row
    for r in range(args.rounds):
        for ef in counts if r % 2 == 0 else counts[::-1]:
            edge_query.HNSW_EF_LEAST, edge_query.HNSW_EF = ef, 2 * ef
            for dense, sparse in vectors[:50]:
                t0 = time.perf_counter()
                store.search(StoreQuery(30, dense=dense, sparse=sparse))
                rows[ef]["times"].append(time.perf_counter() - t0)
    store.close()
    store_reopened(state_path(settings), before, store.signature())
    out = []
    for row in rows.values():
        row["hybrid_p50_ms"] = statistics.median(row.pop("times")) * 1000
        out.append(row)
    print(f"candidates a graph; {cpu_name()}; {run.name}")
    print(table(out, list(out[0])))
    files = json.loads((run / "row.json").read_text())["files"]
    data = {"cpu": cpu_name(), "run": run.name, "files": files, "rows": out}
    print(f"written {write_json(f'candidates_{files}', data)}")


if __name__ == "__main__":
    main()
