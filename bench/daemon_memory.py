"""What the daemon holds in its own memory: tracemalloc's largest allocations.

    nice -n 10 python bench/daemon_memory.py [--files 10000] [--work DIR]

A tree made as bench/scale.py makes it, backfilled with its stand-in embedder,
then `mdindex watch` on it under tracemalloc. Once it watches and has answered
--queries hybrid searches, a SIGUSR1 makes it write its allocations, grouped
by the line that made them (and the three callers above), with its RSS, its
anonymous memory, the Python heap tracemalloc sees (now and at its peak), and
malloc's heap (in use, free but held), before and after a malloc_trim(0).
--work reuses a tree bench/verify_memory.py left (its docs and state).

Writes bench/results/daemon_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, cpu_name, write_json
from scale import WORDS, Daemon, Env, corpus_files, found, generate, proc_mem_mb

# Installed before the CLI runs: SIGUSR1 writes the allocations to $TM_OUT.
TRACE = """
import ctypes, json, os, signal, tracemalloc
tracemalloc.start(4)

class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks',
        'fordblks', 'keepcost')]

def _anon_mb():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) / 1024

def _dump(*_):
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    now, peak = tracemalloc.get_traced_memory()
    out = {'traced_mb': now / 2**20, 'traced_peak_mb': peak / 2**20,
           'tracemalloc_own_mb': tracemalloc.get_tracemalloc_memory() / 2**20,
           'lines': [], 'stacks': []}
    libc = ctypes.CDLL('libc.so.6')
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    # malloc's heap: in use (native allocations, Python's large objects), free
    # but held (what a malloc_trim could give back), and its mmapped blocks
    out['malloc_in_use_mb'] = info.uordblks / 2**20
    out['malloc_free_held_mb'] = info.fordblks / 2**20
    out['malloc_mmapped_mb'] = info.hblkhd / 2**20
    out['anon_before_trim_mb'] = _anon_mb()
    libc.malloc_trim(0)
    out['anon_after_trim_mb'] = _anon_mb()
    for stat in snap.statistics('lineno')[:30]:
        f = stat.traceback[0]
        out['lines'].append([f'{f.filename}:{f.lineno}', stat.size / 2**20, stat.count])
    for stat in snap.statistics('traceback')[:15]:
        where = ' <- '.join(f'{f.filename.rsplit("/", 2)[-1]}:{f.lineno}' for f in stat.traceback)
        out['stacks'].append([where, stat.size / 2**20, stat.count])
    with open(os.environ['TM_OUT'], 'w') as fh:
        json.dump(out, fh)

signal.signal(signal.SIGUSR1, _dump)
"""


class TracedEnv(Env):
    def argv(self, *args: str) -> list[str]:
        argv = super().argv(*args)
        if args and args[0] == "watch":
            argv[2] = TRACE + argv[2]
        return argv


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--corpus")
    ap.add_argument("--tmp")
    ap.add_argument("--work", help="a tree bench/verify_memory.py left (docs, state); kept")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mdindex-daemon-memory-", dir=args.tmp))
    env = TracedEnv(work, stand_in=True)
    env.env.pop("GIT_DIR", None)
    env.env.pop("GIT_WORK_TREE", None)
    out = work / "trace.json"
    out.unlink(missing_ok=True)
    env.env["TM_OUT"] = str(out)
    try:
        if not args.work:
            generate(corpus_files(corpus_dir(args.corpus)), env.root, args.files)
        env.run("backfill", str(env.root), "--json")
        status = json.loads(env.run("status", str(env.root), "--json")["stdout"] or "{}")
        points = found(status, "points")
        args.files = sum(1 for _ in env.root.rglob("*.md"))
        print(f"backfilled {args.files} files, {points} points", file=sys.stderr)
        daemon = Daemon(env)
        try:
            daemon.wait_watching()
            for q in range(args.queries):
                words = " ".join(WORDS[(q * 7 + i) % len(WORDS)] for i in range(3))
                daemon.ask("/search?" + urllib.parse.urlencode({"q": words, "k": 10}))
            time.sleep(2)
            pid = daemon.proc.pid
            row: dict[str, Any] = {
                "files": args.files,
                "points": points,
                "rss_mb": proc_mem_mb(pid, "VmRSS"),
                "anon_mb": proc_mem_mb(pid, "RssAnon"),
                "file_mb": proc_mem_mb(pid, "RssFile"),
            }
            os.kill(pid, signal.SIGUSR1)
            deadline = time.monotonic() + 300
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(1)
            row |= json.loads(out.read_text())
        finally:
            daemon.stop()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    cpu = cpu_name()
    print(f"daemon memory at {args.files} files ({row['points']} points); {cpu}")
    print(f"RSS {row['rss_mb']:.0f} MB, anonymous {row['anon_mb']:.0f} MB, ", end="")
    print(f"files mapped {row['file_mb']:.0f} MB, Python heap {row['traced_mb']:.0f} MB", end="")
    print(f" (peak {row['traced_peak_mb']:.0f}, tracemalloc's own {row['tracemalloc_own_mb']:.0f})")
    print(
        f"malloc: in use {row['malloc_in_use_mb']:.0f} MB, free but held "
        f"{row['malloc_free_held_mb']:.0f} MB, mmapped {row['malloc_mmapped_mb']:.0f} MB; "
        f"anonymous {row['anon_before_trim_mb']:.0f} MB, {row['anon_after_trim_mb']:.0f} MB "
        "after malloc_trim(0)"
    )
    for where, mb, count in row["lines"][:15]:
        print(f"  {mb:8.1f} MB {count:9d}  {where}")
    print("largest stacks:")
    for where, mb, count in row["stacks"][:8]:
        print(f"  {mb:8.1f} MB {count:9d}  {where}")
    write_json("daemon_memory", {"cpu": cpu, **row})


if __name__ == "__main__":
    main()
