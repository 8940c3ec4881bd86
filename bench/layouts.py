"""The edge store's two layouts on a large store: the default (vectors in RAM,
mapped) against int8 copies in RAM with the originals on disk, the layout
``quantization = "auto"`` turns to at versions.quantization.AUTO_INT8_POINTS.

    python bench/layouts.py --kept RUN [--points 200000,0] [--work DIR] [--turns 2]

RUN is a run folder bench/scale.py kept (``--keep``: its stand-in vectors and
BM25, laid out ``on_disk_int8``). For each size, the first N points of its
live store are copied, vectors and sparse vectors as stored, into a new edge
store of each layout, made and optimized by mdindex's own code (``settle``:
the graphs a daemon builds). N = 0 is every point: only the default layout
is copied, and the int8 store is the run's own, which has lived (a daemon's
edits and checkouts, their old points deleted in place in its graphs). The
copies stay in DIR for later runs.

Each store is then opened by a fresh process, the two layouts in turns
(``--turns``): 100 questions (the 50 word triples and 50 headings
bench/scale.py times) asked as mdindex's search asks them (hybrid, 30 hits
for 10 passages), new and then warm (3 more rounds), the stand-in's query
vectors; the process's RSS at open, after the searches and at its peak
(VmHWM; anonymous and file-mapped); and, in the first turn, recall@10 of
dense and hybrid against the exact search of the same store, a hit the exact
search scores as its 10th counted (as ann-benchmarks does).

Writes bench/results/layouts.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, cpu_name, table, write_json

LAYOUTS = {"default": ("none", False), "on_disk_int8": ("int8", True)}
PAGE = 512
ROUNDS = 4  # of the 100 questions: the first new, the rest warm


def live_store(state: Path) -> tuple[Any, Any]:
    """The kept run's settings and its live version's store (not opened)."""
    from mdindex.config import load_settings
    from mdindex.runtime import make_store
    from mdindex.versions.catalog import reader_settings

    settings = reader_settings(load_settings({"state_dir": str(state)}))
    return settings, make_store(settings)


def layout_store(path: Path, layout: str) -> Any:
    from mdindex.sinks.edge import EdgeStore

    quantization, on_disk = LAYOUTS[layout]
    return EdgeStore("c", path=path, quantization=quantization, on_disk_vectors=on_disk)


def copy(state: Path, path: Path, layout: str, points: int) -> None:
    """The first ``points`` points of the run's store into a new store at ``path``,
    optimized as settle builds it (a sealed segment built as the writes go on)."""
    from mdindex.index.state import store_reopened
    from mdindex.runtime import state_path

    settings, source = live_store(state)
    before = source.signature()
    source.open()
    target = layout_store(path, layout)
    done, batch = 0, list[tuple[str, dict[str, Any], Any]]()
    t0 = time.perf_counter()
    for pid, payload, vector in source.scroll(payload=True, with_vectors=True, page=PAGE):
        if points and done + len(batch) >= points:
            break
        if not done and not batch:
            target.ensure_collection(len(vector), sparse=True)
        batch.append((pid, payload, vector))
        if len(batch) == PAGE:
            done += write(source, target, batch)
            batch = []
    if batch:
        done += write(source, target, batch)
    while not target.settle():
        pass
    print(f"[{layout}] {done} points copied and built in {time.perf_counter() - t0:.0f}s")
    target.close()
    source.close()
    store_reopened(state_path(settings), before, source.signature())


def write(source: Any, target: Any, batch: list[tuple[str, dict[str, Any], Any]]) -> int:
    from mdindex.sinks import Point

    sparse = source.sparse_vectors([pid for pid, _, _ in batch])
    written = target.upsert([Point(pid, v, p, sparse.get(pid)) for pid, p, v in batch])
    if target.seal_due():
        target.settle()
    return int(written)


def memory() -> dict[str, int]:
    keys = ("VmRSS", "RssAnon", "RssFile", "VmHWM")
    lines = Path("/proc/self/status").read_text().splitlines()
    return {
        k: int(v.split()[0]) // 1024 for k, v in (ln.split(":", 1) for ln in lines) if k in keys
    }


def questions(corpus: str | None = None) -> list[str]:
    """The questions bench/scale.py times: 50 word triples, 50 of the corpus's headings."""
    import scale

    words, headings = scale.questions(scale.corpus_files(corpus_dir(corpus)), 50)
    return words + headings


def recall10(
    store: Any, vectors: list[tuple[Any, Any]], exact: list[Any], mode: str
) -> tuple[float, float]:
    """Recall@10 of ``store``'s searches against ``exact`` (the exact top 100 of
    each question): a hit the exact search scores as its 10th counted, as
    ann-benchmarks does; and by ids alone."""
    from mdindex.sinks.base import StoreQuery

    tied, ids = [], []
    for (dense, sparse), ex in zip(vectors, exact, strict=True):
        hits = store.search(
            StoreQuery(10, dense=dense, sparse=sparse if mode == "hybrid" else None)
        )
        scores, tenth = {h.id: h.score for h in ex}, ex[9].score
        tied.append(sum(scores.get(h.id, -1.0) >= tenth - 1e-6 for h in hits) / 10)
        ids.append(len({h.id for h in hits} & {h.id for h in ex[:10]}) / 10)
    return statistics.mean(tied), statistics.mean(ids)


def exact_top(store: Any, vectors: list[tuple[Any, Any]], mode: str) -> list[Any]:
    """Each question's exact top 100 (every vector scanned)."""
    from mdindex.sinks.base import StoreQuery

    return [
        store.search(StoreQuery(100, dense=d, sparse=s if mode == "hybrid" else None, exact=True))
        for d, s in vectors
    ]


def measure(state: Path, path: Path | None, recall: bool, corpus: str) -> dict[str, Any]:
    """One store in this process: latency, memory, and recall when asked."""
    from mdindex.index.state import store_reopened
    from mdindex.runtime import make_models, state_path
    from mdindex.sinks.base import StoreQuery

    settings, own = live_store(state)
    before = own.signature()
    store = own if path is None else layout_store(path, "default")  # its files say
    models = make_models(settings)
    store.open()
    opened = memory()
    encoder = models.planner.sparse
    assert encoder is not None  # the run's store has sparse vectors
    vectors = [
        (models.embedder.embed_query(q).tolist(), encoder.query(q, ["en"]))
        for q in questions(corpus or None)
    ]
    times = []
    for _ in range(ROUNDS):
        for dense, sparse in vectors:
            t0 = time.perf_counter()
            store.search(StoreQuery(30, dense=dense, sparse=sparse))
            times.append(time.perf_counter() - t0)
    after = memory()
    out: dict[str, Any] = {
        "hybrid_p50_new_ms": statistics.median(times[: len(vectors)]) * 1000,
        "hybrid_p50_warm_ms": statistics.median(times[len(vectors) :]) * 1000,
        "rss_open_mb": opened["VmRSS"],
        "rss_after_mb": after["VmRSS"],
        "anon_after_mb": after["RssAnon"],
        "file_after_mb": after["RssFile"],
        "peak_rss_mb": after["VmHWM"],
    }
    for mode in ("dense", "hybrid") if recall else ():
        out[f"recall10_{mode}"] = recall10(store, vectors, exact_top(store, vectors, mode), mode)[0]
    store.close()
    if path is None:
        store_reopened(state_path(settings), before, own.signature())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kept", required=True, help="a run folder bench/scale.py kept")
    ap.add_argument("--points", default="200000,0", help="sizes, comma-separated; 0: all")
    ap.add_argument("--work", default="", help="where the copies go (default: RUN/layouts)")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--corpus", default="", help="the corpus bench/scale.py generated from")
    ap.add_argument("--copy", nargs=4, help=argparse.SUPPRESS)  # STATE PATH LAYOUT POINTS
    ap.add_argument("--measure", nargs=3, help=argparse.SUPPRESS)  # STATE PATH RECALL
    args = ap.parse_args()
    sizes = args.points.split(",")
    if not all(p.isdigit() for p in sizes):
        ap.error(f"--points takes sizes of 0 or more, comma-separated, not {args.points!r}")
    if args.turns < 1:
        ap.error("--turns must be at least 1")
    run = Path(args.kept)
    if not (args.copy or args.measure) and not (run / "row.json").is_file():
        ap.error(f"--kept {args.kept}: no run bench/scale.py kept there (no row.json)")
    import scale

    exec(scale.STAND_IN, {})  # the stand-in embedder the run was built with
    if args.copy:
        state, path, layout, points = args.copy
        return copy(Path(state), Path(path), layout, int(points))
    if args.measure:
        state, path, recall = args.measure
        found = measure(Path(state), Path(path) if path else None, recall == "1", args.corpus)
        print(json.dumps(found))
        return None
    state, work = run / "state", Path(args.work or run / "layouts")
    rows = []
    for points in (int(p) for p in sizes):
        paths: dict[str, Path | None] = {}
        for layout in LAYOUTS:
            if points == 0 and layout == "on_disk_int8":
                paths[layout] = None  # the run's own store
                continue
            path = work / f"{layout}_{points or 'all'}"
            if not (path / "edge_config.json").is_file():
                child(["--copy", str(state), str(path), layout, str(points)])
            paths[layout] = path
        got: dict[str, list[dict[str, Any]]] = {layout: [] for layout in LAYOUTS}
        for turn in range(args.turns):
            for layout in list(LAYOUTS)[:: 1 if turn % 2 == 0 else -1]:
                where = str(paths[layout] or "")
                asked = ["--measure", str(state), where, "1" if turn == 0 else "0"]
                out = child([*asked, "--corpus", args.corpus])
                got[layout].append(json.loads(out.strip().splitlines()[-1]))
        for layout, runs in got.items():
            row: dict[str, Any] = {"points": points or "all", "layout": layout}
            for key in runs[0]:
                values = [r[key] for r in runs if key in r]
                row[key] = max(values) if "peak" in key else statistics.median(values)
            rows.append(row)
            print(json.dumps(row), flush=True)
    columns = ["points", "layout", *[k for k in rows[0] if k not in ("points", "layout")]]
    print(f"edge layouts; {cpu_name()}; stand-in vectors of {run.name}")
    print(table(rows, columns))
    print(f"written {write_json('layouts', {'cpu': cpu_name(), 'run': run.name, 'rows': rows})}")


def child(argv: list[str]) -> str:
    """This script in a fresh process (its memory is the figure)."""
    done = subprocess.run(
        [sys.executable, __file__, "--kept", "-", *argv], capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(done.stderr[-3000:])
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "", flush=True)
    return done.stdout


if __name__ == "__main__":
    main()
