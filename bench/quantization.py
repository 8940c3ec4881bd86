"""int8 quantization on qdrant-edge against fp32: the same questions, the same points.

    nice -n 10 python bench/quantization.py [--evalsets ../shared/evalsets] [--modes dense,hybrid]

Each set is indexed once with the real model (`mdindex backfill`, heading
chunks, context on: the defaults). Its points, vectors and sparse vectors
included, are then copied into two edge stores that differ only in
``quantization``: ``none``, and ``int8`` with the originals on disk
(``on_disk_vectors``). Both are optimized whatever their size (an index
threshold of 1 KB), so that every segment of the int8 store keeps int8
copies, which searches score with and then rescore with the originals.
Every question is asked through mdindex's own search call of both. Reports,
per set and mode, recall@3 and recall@10 against the gold spans (as
bench/retrieval.py scores them) and the share of the fp32 top 10 the int8
search returns.

Writes bench/results/quantization.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, table, write_json
from retrieval import CORPUS_FOLDER, Mdindex, index_with_cli, score


def copied(source: Any, path: Path, quantization: str) -> Any:
    """An edge store with every point of ``source``, optimized."""
    from mdindex.sinks import Point
    from mdindex.sinks.edge import EdgeStore

    store = EdgeStore(
        "c",
        path=path,
        index_min_points=0,
        indexing_threshold_kb=1,
        quantization=quantization,
        on_disk_vectors=quantization == "int8",
    )
    rows = list(source.scroll(payload=True, with_vectors=True))
    sparse = source.sparse_vectors([pid for pid, _, _ in rows])
    store.ensure_collection(len(rows[0][2]), sparse=bool(sparse))
    store.upsert([Point(pid, vec, payload, sparse.get(pid)) for pid, payload, vec in rows])
    store.close()
    # settle indexes only what is far behind; here every point is, once
    store.open()
    store.settle()
    return store


def ask(models: Any, store: Any, questions: list[dict[str, Any]], mode: str) -> list[list[Any]]:
    from mdindex.index.search import Query, search

    answers = []
    for q in questions:
        hits = search(
            models.embedder,
            models.planner.sparse,
            store,
            Query(q["question"], k=10, mode=mode),
            models.planner.query_prompt,
            models.planner.model_languages,
        )
        answers.append([(h["doc_path"], h["char_start"], h["char_end"]) for h in hits])
    return answers


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--evalsets", default=str(Path(__file__).resolve().parents[2] / "shared" / "evalsets")
    )
    ap.add_argument("--sets", default="anthropic-docs,chroma-chunking")
    ap.add_argument("--modes", default="dense,hybrid")
    args = ap.parse_args()
    from mdindex.config import load_settings
    from mdindex.runtime import make_store

    mdindex = Mdindex()
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="mdindex-quantization-"))
    try:
        for name in args.sets.split(","):
            folder = Path(args.evalsets) / name
            corpus = folder / CORPUS_FOLDER[name]
            questions = [json.loads(line) for line in (folder / "questions.jsonl").open()]
            work = tmp / name
            built = index_with_cli(corpus, work, "heading", True, "edge")
            source = make_store(load_settings({"state_dir": str(work), "roots": [str(corpus)]}))
            source.open()
            stores = {q: copied(source, tmp / f"{name}-{q}", q) for q in ("none", "int8")}
            source.close()
            for mode in args.modes.split(","):
                answers = {q: ask(mdindex.models, s, questions, mode) for q, s in stores.items()}
                same = statistics.fmean(
                    len(set(a) & set(b)) / max(len(b), 1)
                    for a, b in zip(answers["int8"], answers["none"], strict=True)
                )
                for q, found in answers.items():
                    scores = score(questions, found, chroma=False)
                    rows.append(
                        {
                            "set": name,
                            "points": built["points"],
                            "mode": mode,
                            "quantization": q,
                            "recall@3": scores["recall@3"],
                            "recall@10": scores["recall@10"],
                            "top10_as_fp32": same if q == "int8" else 1.0,
                            "indexed": stores[q].describe().get("indexed_points"),
                        }
                    )
                    print(rows[-1], file=sys.stderr, flush=True)
            for s in stores.values():
                s.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = cpu_name()
    print(f"int8 against fp32 on qdrant-edge; {cpu}")
    cols = ["set", "points", "mode", "quantization", "recall@3", "recall@10", "top10_as_fp32"]
    cols += ["indexed"]
    print(table(rows, cols))
    write_json("quantization", {"cpu": cpu, "rows": rows})


if __name__ == "__main__":
    main()
