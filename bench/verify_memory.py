"""`verify`'s peak RSS and time at two sizes of one tree: flat memory, linear time.

    nice -n 10 python bench/verify_memory.py --files 5000 [--old-src DIR] [--work DIR]

A tree made as bench/scale.py makes it (its stand-in embedder), backfilled;
`mdindex verify` runs on it as a whole process (peak RSS as VmHWM), then half
its files are deleted, a backfill prunes their points, and verify runs again.
With --old-src (a ``src`` folder of an older mdindex) the same verifies run
with that code too, for the comparison. --work reuses a tree bench/scale.py
left (its ``docs`` and ``state``).

Writes bench/results/verify_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, cpu_name, table, write_json
from scale import Env, corpus_files, found, generate


def verify(env: Env, code: str, src: str | None) -> dict[str, Any]:
    if src:
        env.env["PYTHONPATH"] = src
    out = env.run("verify", str(env.root), "--json")
    env.env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    report = json.loads(out["stdout"])
    return {
        "code": code,
        "verify_s": out["wall_s"],
        "cpu_s": out["cpu_s"],
        "peak_rss_mb": out["peak_rss_mb"],
        "in_sync": report["in_sync"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--old-src")
    ap.add_argument("--work")
    ap.add_argument("--corpus")
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mdindex-verify-"))
    env = Env(work, stand_in=True)
    env.env.pop("GIT_DIR", None)
    env.env.pop("GIT_WORK_TREE", None)
    rows = []
    try:
        if not args.work:
            generate(corpus_files(corpus_dir(args.corpus)), env.root, args.files)
        for half in (False, True):
            files = sorted(env.root.rglob("*.md"))
            if half:
                for path in files[len(files) // 2 :]:
                    path.unlink()
                files = files[: len(files) // 2]
            env.run("backfill", str(env.root), "--json")
            status = json.loads(env.run("status", str(env.root), "--json")["stdout"] or "{}")
            base = {"files": len(files), "points": found(status, "points")}
            for code, src in (("new", None), ("old", args.old_src)):
                if code == "old" and not src:
                    continue
                rows.append(base | verify(env, code, src))
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    cpu = cpu_name()
    print(f"mdindex verify at two sizes; {cpu}; stand-in embedder")
    print(table(rows, ["files", "points", "code", "verify_s", "cpu_s", "peak_rss_mb", "in_sync"]))
    write_json("verify_memory", {"cpu": cpu, "rows": rows})


if __name__ == "__main__":
    main()
