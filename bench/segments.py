"""Segments of bounded size against one graph, on a store bench/scale.py kept.

    python bench/scale.py --kept RUN ...   (or --large: keeps RUN100000 and RUN200000)
    python bench/segments.py --kept RUN100000 [--bounds 300000,0] [--ef 1024,512] [--queries 100]

Copies the kept store's points (vectors and payloads as stored) into a new
edge store for each of ``--bounds`` through mdindex's own writes
(``EdgeStore.upsert``): with ``segment_points`` set, the writes wait while each
segment is built as it fills (``Store.seal_due``, asked after each batch as
the sync core asks); 0 is without a bound, built once at the end, as a cold
backfill did before. Each copy runs in a process of its own, which reports its index
builds' peak RSS and CPU (its children's). Then, in a fresh process for each
copy, hybrid and dense search p50 (new questions, then the same again; the
query's embedding left out), and recall@10 against exact search
(bench/scale.py's RECALL, in a process of its own), each at every ``--ef``
(the candidates a search looks at in each graph; ``auto``: mdindex's own
share of edge.query.HNSW_EF, ``hnsw_ef``). The
copies are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, write_json
from scale import RECALL, STAND_IN, WORDS

COPY = """
import json, resource, sys, time
from pathlib import Path
from qdrant_edge import ScrollRequest
from mdindex.embedding.sparse import Sparse
from mdindex.sinks import Point
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.edge.optimize import has_graph
from mdindex.sinks.edge.shard import load

src, dst, bound = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
store = EdgeStore("c", path=dst, segment_points=bound, quantization="int8", on_disk_vectors=True)
store.ensure_collection(int(sys.argv[4]), sparse=True)
shard, offset, started, n = load(src), None, time.perf_counter(), 0
while True:
    request = ScrollRequest(offset=offset, limit=2048, with_payload=True, with_vector=True)
    records, offset = shard.scroll(request)
    points = []
    for r in records:
        s = r.vector.get("bm25")
        sparse = Sparse(list(s.indices), list(s.values)) if s is not None else None
        points.append(Point(str(r.id), r.vector[""], r.payload, sparse))
    store.upsert(points)
    if store.seal_due():  # as the sync core asks after each group it writes
        store.settle()
    n += len(points)
    if offset is None:
        break
shard.close()
store.settle()
store.close()
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
segments = []
for f in sorted((dst / "segments").glob("*/segment.json")):
    kind = json.loads(f.read_text())["config"]["vector_data"][""]["index"]["type"]
    size = sum(p.stat().st_size for p in f.parent.rglob("*") if p.is_file())
    segments.append(f"{kind} {size >> 20} MB")
print(json.dumps({"points": n, "copy_s": time.perf_counter() - started,
                  "build_peak_rss_mb": kids.ru_maxrss / 1024,
                  "build_cpu_s": kids.ru_utime + kids.ru_stime, "segments": segments}))
"""

SEARCH = """
import json, statistics, sys, time
from mdindex.config import load_settings
from mdindex.index.search import Query
from mdindex.runtime import make_models, make_store
from mdindex.versions.catalog import reader_settings

settings = reader_settings(load_settings({"state_dir": sys.argv[1]}))
models = make_models(settings)
store = make_store(settings).open()
out = {}
for mode in ("hybrid", "dense"):
    for when in ("new", "again"):
        times = []
        for q in json.loads(sys.argv[2]):
            t0 = time.perf_counter()
            models.search(store, Query(q, k=10, mode=mode))
            times.append(time.perf_counter() - t0)
        out[f"{mode}_{when}_p50_ms"] = statistics.median(times) * 1000
store.close()
print(json.dumps(out))
"""


# --ef's candidates in SEARCH's and RECALL's processes (their arguments: argv 1 and 2)
EF = """
import sys
import mdindex.sinks.edge.query as edge_query
if sys.argv[3] != "auto":
    edge_query.hnsw_ef = lambda graphs: int(sys.argv[3])
"""


def run(code: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"failed:\n{done.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def copy_state(kept: Path, work: Path) -> tuple[Path, Path]:
    """A state folder beside the kept one: its SQLite state and catalog, and the
    path its edge store goes to (returned with the kept store's own)."""
    state = kept / "state"
    shards = [p for p in (state / "edge").iterdir() if (p / "edge_config.json").is_file()]
    if len(shards) != 1:
        sys.exit(f"{state / 'edge'}: expected one edge store, found {len(shards)}")
    work.mkdir(parents=True)
    for f in state.iterdir():
        if f.is_file() and f.suffix in (".sqlite3", ".json"):
            shutil.copy2(f, work / f.name)
    (work / "edge").mkdir()
    return shards[0], work / "edge" / shards[0].name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", type=Path, required=True, help="a run folder scale.py kept")
    ap.add_argument("--bounds", default="300000,0", help="points a segment holds (0: no bound)")
    ap.add_argument(
        "--ef",
        default="auto",
        help="candidates a search looks at in each graph (auto: edge.query.hnsw_ef's share)",
    )
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    queries = [" ".join(random.Random(q).sample(WORDS, 3)) for q in range(args.queries)]
    asked = json.dumps(queries)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.kept.parent, prefix="segments-") as tmp:
        for bound in (int(b) for b in args.bounds.split(",")):
            state = Path(tmp) / f"bound{bound}"
            src, dst = copy_state(args.kept, state)
            src_config = json.loads((src / "edge_config.json").read_text())
            dim = str(src_config["vectors"][""]["size"])
            copied = {"segment_points": bound or "none"}
            copied |= run(COPY, str(src), str(dst), str(bound), dim)
            for ef in args.ef.split(","):
                row = {**copied, "ef": ef if ef == "auto" else int(ef)}
                row |= run(STAND_IN + EF + SEARCH, str(state), asked, ef)
                row |= run(STAND_IN + EF + RECALL, str(state), asked, ef)  # against exact
                print(json.dumps(row), flush=True)
                rows.append(row)
            shutil.rmtree(state)
    columns = list(rows[0])
    print(table(rows, columns))
    path = write_json("segments", {"cpu": cpu_name(), "kept": str(args.kept), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
