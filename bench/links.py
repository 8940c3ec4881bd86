"""What the link graph costs: a cold backfill's time outside embedding, and a
no-op run, with links and tags against the code before them.

    python bench/links.py                    # the shared corpus (or --corpus DIR)
    python bench/links.py --baseline REV --runs 5

Each figure is a whole `mdindex backfill` process on the default store, run
on this checkout and on a git worktree of ``--baseline`` (default: the
commit before links and tags), alternately, ``--runs`` times each; the
median is kept. Both trees are byte-compiled first, as an install leaves
them (where PYTHONDONTWRITEBYTECODE is set, each process would otherwise
compile every module, and the new ones would count against a no-op run). Every process embeds with bench/scale.py's stand-in (hash
vectors, a fixed cost per batch), so what differs is everything but the
model: the figure is ``seconds - embed_seconds`` of `backfill --json`.
Also, in this process: ``graph_of`` (finding links and tags) over every file,
against parsing the same files.

Prints a table and writes bench/results/links.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, corpus_dir, cpu_name, load_texts, table, write_json
from scale import PROBE, STAND_IN

BASELINE = "d75068f"  # main before links and tags (issue 27)


def run(src: Path, corpus: Path, state: Path) -> dict[str, Any]:
    """One `mdindex backfill --json` with the stand-in embedder, the code from ``src``."""
    env = {
        **os.environ,
        "PYTHONPATH": str(src),  # ahead of the editable install's path entry
        "HF_HUB_OFFLINE": "1",
        "MDINDEX_LOG_LEVEL": "ERROR",
    }
    argv = [sys.executable, "-c", STAND_IN + PROBE, "backfill", *roots(corpus)]
    argv += ["--state-dir", str(state), "--json"]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        sys.exit(f"backfill exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    return {
        "wall_s": wall,
        "outside_embedding_s": summary["seconds"] - summary["embed_seconds"],
        "chunks": summary["points_upserted"],
    }


def roots(corpus: Path) -> list[str]:
    folders = [p for p in sorted(corpus.iterdir()) if p.is_dir() and p.name != "licenses"]
    return [str(p) for p in folders] if any(folders) else [str(corpus)]


def in_process(corpus: Path) -> dict[str, float]:
    """Seconds to parse every file, and to find its links and tags after."""
    from mdindex.documents.links import graph_of
    from mdindex.documents.parsing import parse_document

    texts = []
    for folder in roots(corpus):
        texts += load_texts(Path(folder))
    started = time.perf_counter()
    docs = [(rel, parse_document(text, rel)) for rel, text in texts]
    parse_s = time.perf_counter() - started
    started = time.perf_counter()
    links = sum(len(graph_of(doc, rel).links) for rel, doc in docs)
    return {
        "files": len(texts),
        "links": links,
        "parse_s": parse_s,
        "graph_s": time.perf_counter() - started,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", help="folder of markdown (default ../shared/corpus)")
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-links-"))
    base = work / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.baseline],
        check=True,
        capture_output=True,
    )
    trees = {"baseline": base / "src", "links": REPO / "src"}
    for src in trees.values():  # as an install leaves them: without, every process compiles all
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)
    cold: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    noop: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    try:
        for i in range(args.runs):
            for name, src in trees.items():
                state = work / f"{name}-{i}"
                cold[name].append(run(src, corpus, state))
                noop[name].append(run(src, corpus, state))
                print(f"run {i + 1}/{args.runs} {name}: cold {cold[name][-1]}", file=sys.stderr)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
            capture_output=True,
        )

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    figures = {
        name: {
            "cold_wall_s": median(cold[name], "wall_s"),
            "cold_outside_embedding_s": median(cold[name], "outside_embedding_s"),
            "noop_wall_s": median(noop[name], "wall_s"),
            "chunks": cold[name][0]["chunks"],
        }
        for name in trees
    }
    b, n = figures["baseline"], figures["links"]
    ratios = {
        "cold_outside_embedding": n["cold_outside_embedding_s"] / b["cold_outside_embedding_s"],
        "cold_wall": n["cold_wall_s"] / b["cold_wall_s"],
        "noop_wall": n["noop_wall_s"] / b["noop_wall_s"],
    }
    inner = in_process(corpus)
    cpu = cpu_name()
    cols = ["figure", "before", "with links", "ratio"]
    labels = {
        "cold_outside_embedding": "cold backfill, outside embedding (s)",
        "cold_wall": "cold backfill, wall (s)",
        "noop_wall": "no-op run, wall (s)",
    }
    rows = [
        {"figure": label, "before": b[f"{key}_s"], "with links": n[f"{key}_s"]}
        | {"ratio": ratios[key]}
        for key, label in labels.items()
    ]
    print(
        f"link graph cost; {cpu}; {inner['files']} files, {n['chunks']} chunks, "
        f"stand-in embedder; median of {args.runs}"
    )
    print(f"before: {args.baseline}")
    print(table(rows, cols))
    print(
        f"in process: parsing {inner['parse_s']:.2f} s, finding {inner['links']} links and "
        f"the tags after it {inner['graph_s']:.2f} s "
        f"({inner['graph_s'] / inner['parse_s']:.2f} of parsing)"
    )
    write_json(
        "links",
        {"cpu": cpu, "baseline": args.baseline, "runs": args.runs}
        | {"figures": figures, "ratios": ratios, "in_process": inner},
    )


if __name__ == "__main__":
    main()
