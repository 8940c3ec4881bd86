"""`verify`'s peak memory and time as one tree grows: flat memory, linear time.

    nice -n 5 python bench/verify_memory.py --sizes 5000,10000,20000 [--base REV] [--work DIR]

One tree made as bench/scale.py makes it (its stand-in embedder) grows to each
size in turn (the files up to the size, an incremental backfill); at each size
`mdindex verify` runs as a whole process with this checkout's code and, with
--base, with the code of another revision (a worktree of it), on the same
tree, state and store. Each verify's peak RSS (VmHWM), and the peaks of its
anonymous memory and of its mapped files (sampled every 20 ms): the mapped
files are the store's and the libraries', which the kernel takes back under
pressure like any page cache; the anonymous memory is what verify holds.
Beside them, "store alone": a process that only opens the store and scrolls
two payload keys of every point, what any command that opens it holds; verify's
own share is the difference. Growth for each 2x of files is printed beside
the figures.

Writes bench/results/verify_memory.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, corpus_dir, cpu_name, table, write_json
from scale import STAND_IN, Env, corpus_files, found, generate

# Put before a command run as `python -c CODE ARGS...`: a thread keeps the peaks
# of RssAnon and RssFile, printed with VmHWM and CPU seconds at exit.
SAMPLER = """
import atexit, os, resource, sys, threading, time
peaks = {'RssAnon': 0, 'RssFile': 0}
def _sample():
    while True:
        for line in open('/proc/self/status'):
            key = line.split(':')[0]
            if key in peaks:
                peaks[key] = max(peaks[key], int(line.split()[1]))
        time.sleep(0.02)
threading.Thread(target=_sample, daemon=True).start()
def _probe():
    hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print('probe', hwm[0], ru.ru_utime + ru.ru_stime, peaks['RssAnon'],
          peaks['RssFile'], file=sys.stderr)
atexit.register(_probe)
"""
CLI = "from mdindex.cli import main\nsys.exit(main(sys.argv[1:]))\n"
# The store alone, as verify opens it, and one scroll of two payload keys of
# every point: what any command that opens the store holds.
OPEN = """
from mdindex.config import load_settings
from mdindex.runtime import make_store
from mdindex.versions.catalog import reader_settings
store = make_store(reader_settings(load_settings({'state_dir': sys.argv[1]}))).open()
print(sum(1 for _ in store.scroll(payload=['root', 'doc_path'])))
store.close()
"""


def measure(env: Env, code: str, src: str) -> dict[str, Any]:
    """One whole process: verify with ``src`` on PYTHONPATH, or the store alone."""
    env.env["PYTHONPATH"] = src
    if code == "store alone":
        argv = [sys.executable, "-c", SAMPLER + OPEN, str(env.state)]
    else:
        argv = env.argv("verify", str(env.root), "--json")
        argv[2] = STAND_IN + SAMPLER + CLI
    proc = subprocess.run(argv, capture_output=True, text=True, env=env.env)
    probe = [line.split() for line in proc.stderr.splitlines() if line.startswith("probe ")]
    if proc.returncode not in (0, 1) or not probe:
        sys.exit(f"{code} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    _, hwm, cpu, anon, mapped = probe[-1]
    return {
        "code": code,
        "cpu_s": round(float(cpu), 1),
        "peak_rss_mb": round(int(hwm) / 1024),
        "peak_anon_mb": round(int(anon) / 1024),
        "peak_file_mb": round(int(mapped) / 1024),
        "in_sync": json.loads(proc.stdout)["in_sync"] if code != "store alone" else None,
    }


def growth(rows: list[dict[str, Any]]) -> None:
    """Each figure over the one at the last size with the same code, beside it."""
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        before = last.get(row["code"])
        if before:
            x = row["files"] / before["files"]
            row["files_x"] = round(x, 2)
            for key in ("cpu_s", "peak_rss_mb", "peak_anon_mb"):
                row[key.split("_")[-2] + "_x"] = round(row[key] / before[key], 2)
        last[row["code"]] = row


def base_tree(rev: str, work: Path) -> str:
    """The ``src`` of a worktree of ``rev``, made under ``work``."""
    dest = work / "base"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(dest), rev],
        check=True,
        capture_output=True,
    )
    return str(dest / "src")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="5000,10000,20000")
    ap.add_argument("--base", help="a git revision to measure beside this checkout")
    ap.add_argument("--work", help="where the tree goes (kept); default a temporary folder")
    ap.add_argument("--corpus")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mdindex-verify-"))
    env = Env(work, stand_in=True)
    env.env.pop("GIT_DIR", None)
    env.env.pop("GIT_WORK_TREE", None)
    codes = [("this", str(REPO / "src"))]
    rows: list[dict[str, Any]] = []
    files = corpus_files(corpus_dir(args.corpus))
    try:
        if args.base:
            codes.append((f"base {args.base}", base_tree(args.base, work)))
        for size in (int(s) for s in args.sizes.split(",")):
            generate(files, env.root, size)
            env.env["PYTHONPATH"] = codes[0][1]
            backfill = env.run("backfill", str(env.root), "--json")
            status = json.loads(env.run("status", str(env.root), "--json")["stdout"] or "{}")
            base = {"files": size, "points": found(status, "points")}
            print(f"{size} files: backfill {backfill['wall_s']:.0f} s", file=sys.stderr)
            for code, src in [*codes, ("store alone", codes[0][1])]:
                rows.append(base | measure(env, code, src))
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        if args.base:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "base")],
                capture_output=True,
            )
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    growth(rows)
    cpu = cpu_name()
    print(f"mdindex verify as one tree grows; {cpu}; stand-in embedder; each a whole process")
    columns = ["files", "points", "code", "cpu_s", "peak_rss_mb", "peak_anon_mb", "peak_file_mb"]
    print(table(rows, [*columns, "files_x", "cpu_x", "rss_x", "anon_x", "in_sync"]))
    write_json("verify_memory", {"cpu": cpu, "rows": rows})


if __name__ == "__main__":
    main()
