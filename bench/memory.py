"""Peak RSS of a cold backfill as the tree grows: 1,000 files against 7,000.

    python bench/memory.py [--corpus DIR] [--sizes 1000,7000]

The trees are made from the corpus: file i is corpus file i mod n in folder
i // n, with its number appended, so every file is distinct and copies share
most chunk texts (those reuse vectors, as they would in a real tree with
duplicated pages). Each size runs `mdindex backfill` in a fresh process with a
fresh state and store; the child reports its own peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PEAK_RSS_PROBE, corpus_dir, probe_rss_mb, table, write_json


def build(corpus: Path, dest: Path, count: int) -> None:
    files = sorted(corpus.rglob("*.md"))
    for i in range(count):
        src = files[i % len(files)]
        out = dest / f"copy{i // len(files)}" / src.relative_to(corpus)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(src.read_text(encoding="utf-8") + f"\n\nCopy {i}.\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--sizes", default="1000,7000")
    args = ap.parse_args()
    corpus = corpus_dir(args.corpus)
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"mdindex-mem-{size}-"))
        build(corpus, work / "docs", size)
        cmd = [
            sys.executable,
            "-c",
            PEAK_RSS_PROBE,
            "backfill",
            str(work / "docs"),
            "--state-dir",
            str(work / "state"),
            "--json",
        ]
        t = time.perf_counter()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        seconds = time.perf_counter() - t
        summary = json.loads(proc.stdout)
        rows.append(
            {
                "files": size,
                "points": summary["points_upserted"],
                "chunks_embedded": summary["chunks_embedded"],
                "seconds": seconds,
                "peak_rss_mb": probe_rss_mb(proc.stderr),
            }
        )
        print(rows[-1], file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    print(table(rows, ["files", "points", "chunks_embedded", "seconds", "peak_rss_mb"]))
    if len(rows) >= 2 and rows[0]["peak_rss_mb"]:
        print(
            f"peak RSS ratio {rows[-1]['files']} / {rows[0]['files']} files: "
            f"{rows[-1]['peak_rss_mb'] / rows[0]['peak_rss_mb']:.2f}x for "
            f"{rows[-1]['points'] / rows[0]['points']:.1f}x the points"
        )
    print(f"written {write_json('memory', rows)}")


if __name__ == "__main__":
    main()
