"""How long `mdindex eval` takes on 100 questions, with a daemon holding the store
and without one, against 100 `mdindex search` processes in the same run.

    python bench/eval_speed.py [--corpus ../shared/corpus] [--questions 100]

The corpus is indexed with the real model (embedded qdrant-edge); the questions
are its sections' heading paths (`mdindex eval --headings N`, seeded), asked
as one whole process each way. The baseline is what a script without `eval`
would do: one `mdindex search` process per question, through the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, cpu_name, offline, table, write_json


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--questions", type=int, default=100)
    args = ap.parse_args()
    offline()
    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-eval-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MDINDEX_STATE_DIR": str(work)}
    mdindex = [sys.executable, "-m", "mdindex"]

    def run(*argv: str) -> tuple[float, str]:
        t = time.perf_counter()
        done = subprocess.run([*mdindex, *argv], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"mdindex {' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
        return time.perf_counter() - t, done.stdout

    print(f"indexing {corpus} ...", file=sys.stderr)
    run("backfill", str(corpus))
    heading = ["eval", "--headings", str(args.questions), "--root", str(corpus), "--json"]
    alone_s, out = run(*heading)
    [alone] = json.loads(out)
    daemon = subprocess.Popen([*mdindex, "watch", str(corpus)], env=env, stderr=subprocess.DEVNULL)
    try:
        run("status", "--wait", "--timeout", "600", str(corpus))
        with_s, out = run(*heading)
        [through] = json.loads(out)
        # the baseline: the same questions, one search process each
        from mdindex.config import load_settings
        from mdindex.query.questions import heading_questions

        settings = load_settings({"roots": [str(corpus)], "state_dir": str(work)})
        texts = [q.text for q in heading_questions(settings, args.questions, 0)]
        t = time.perf_counter()
        for text in texts:
            run("search", text, "-k", "10", "--json")
        searches_s = time.perf_counter() - t
    finally:
        daemon.terminate()
        daemon.wait(60)
    assert alone["recall@10"] == through["recall@10"], (alone, through)
    rows = [
        {"how": f"{len(texts)} mdindex search processes (daemon)", "wall_s": searches_s},
        {"how": "mdindex eval, daemon holds the store", "wall_s": with_s},
        {"how": "mdindex eval, no daemon (store opened here)", "wall_s": alone_s},
    ]
    for row in rows:
        row["vs_searches"] = row["wall_s"] / searches_s
    cpu = cpu_name()
    print(f"corpus {corpus}; {len(texts)} heading-path questions; {cpu}")
    print(table(rows, ["how", "wall_s", "vs_searches"]))
    print(
        f"recall@10 {through['recall@10']:.3f}, mrr@10 {through['mrr@10']:.3f} "
        "(the same through the daemon and without it)"
    )
    print(f"written {write_json('eval_speed', {'cpu': cpu, 'rows': rows, 'scores': through})}")


if __name__ == "__main__":
    main()
