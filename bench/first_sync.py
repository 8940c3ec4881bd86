"""Where the first sync of a small folder goes: model load, embedding, the rest.

    python bench/first_sync.py [--corpus DIR] [--files 31]

Copies the first ``--files`` markdown files of the corpus into a temporary
folder and runs ``mdindex backfill`` on it as whole processes, each with a
fresh state folder:

1. a new user's first run: a fresh cache folder too, so the first model load
   exports the ONNX graph and measures the backends;
2. a first sync with that cache warm: the backend chosen for this run's
   texts, load included (the ONNX export for a small folder);
3. the same with ``MDINDEX_BACKEND=torch``, as every run was before the
   choice weighed load time (the baseline of issue 28: run 2 at most half).

Then one more fresh process takes run 2 apart, each step timed on its own:
interpreter start, ``import mdindex.cli``, scanning, reading and chunking
the folder (planning), loading the model for those texts
(``ModelEmbedder.load``: the choice from the cache), embedding the very
texts the backfill embeds (batch size and order as the backfill), and
opening the store (``import qdrant_client`` included). What run 2 spent
beyond these is the rest: the state, the sparse vectors and the writes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, offline, run_process, write_json

SPLIT = r"""
import json, sys, time
t0 = time.perf_counter()
import mdindex.cli  # noqa: F401
t_cli = time.perf_counter() - t0
from mdindex.config import load_settings
from mdindex.index.summary import Summary
from mdindex.index.verify import plan_all
from mdindex.index.lookahead import tokens
from mdindex.runtime import make_indexer, make_store
settings = load_settings({"roots": [sys.argv[1]], "state_dir": sys.argv[2], "cache_dir": sys.argv[3]})
with make_indexer(settings) as dry:
    t = time.perf_counter()
    points = [p for w in plan_all(dry, Summary())[0] for p in w.points]
    texts = [p.embed_input for p in points]
    t_plan = time.perf_counter() - t
    embedder = dry.embedder
    run = (len(texts), sum(tokens(p) for p in points))
    t = time.perf_counter(); embedder.load(run); t_load = time.perf_counter() - t
    t = time.perf_counter(); embedder.embed(texts); t_embed = time.perf_counter() - t
store = make_store(load_settings({"roots": [sys.argv[1]], "state_dir": sys.argv[4]}))
t = time.perf_counter(); store.open(); store.ensure_collection(embedder.dimension); store.close()
t_store = time.perf_counter() - t
print(json.dumps({"import mdindex.cli": t_cli, "scan, read and chunk": t_plan,
                  "model load": t_load, "embedding": t_embed,
                  "store open and create": t_store, "chunks": len(texts),
                  "choice": embedder.choice.name}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--files", type=int, default=31)
    args = ap.parse_args()
    offline()
    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-first-"))
    folder = work / "docs"
    for path in sorted(corpus.rglob("*.md"))[: args.files]:
        dest = folder / path.relative_to(corpus)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "MDINDEX_CACHE_DIR": str(work / "cache")}
    backfill = [sys.executable, "-m", "mdindex", "backfill", str(folder), "--json"]
    first_s, out = run_process([*backfill, "--state-dir", str(work / "s1")], env)
    chunks = json.loads(out)["chunks_embedded"]
    warm_s, _ = run_process([*backfill, "--state-dir", str(work / "s2")], env)
    torch_env = env | {"MDINDEX_BACKEND": "torch"}
    # its own candidates, so its own measurement first, then the timed run
    run_process([*backfill, "--state-dir", str(work / "s5")], torch_env)
    torch_s, _ = run_process([*backfill, "--state-dir", str(work / "s6")], torch_env)
    start_s, _ = run_process([sys.executable, "-c", "pass"], env)
    _, out = run_process(
        [
            sys.executable,
            "-c",
            SPLIT,
            str(folder),
            str(work / "s3"),
            str(work / "cache"),
            str(work / "s4"),
        ],
        env,
    )
    split = {"interpreter start": start_s} | json.loads(out)
    parts = (
        "interpreter start",
        "import mdindex.cli",
        "model load",
        "embedding",
        "store open and create",
    )
    rest = warm_s - sum(split[k] for k in parts)
    print(f"{args.files} files, {chunks} chunks; embedding with {split['choice']}")
    print(f"first run ever (export and measurement included): {first_s:6.2f} s")
    print(f"first sync, backend = torch (before issue 28):   {torch_s:6.2f} s")
    print(
        f"first sync, backend choice cached:               {warm_s:6.2f} s "
        f"({warm_s / torch_s:.2f}x torch's), of which"
    )
    for k in parts:
        print(f"  {k:24} {split[k]:6.2f} s")
    print(f"  {'the rest':24} {rest:6.2f} s (the state, sparse vectors, writes)")
    print(
        f"model load + embedding = {split['model load'] + split['embedding']:.2f} s, "
        f"{(split['model load'] + split['embedding']) / warm_s:.0%} of the run; "
        f"first-ever run costs {first_s - warm_s:.2f} s more (export and measurement, once)"
    )
    path = write_json(
        "first_sync",
        {
            "files": args.files,
            "chunks": chunks,
            "first_ever_s": first_s,
            "warm_s": warm_s,
            "torch_s": torch_s,
        }
        | split
        | {"rest_s": rest},
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
