"""How mdindex's costs grow with the tree: 10,000 files to 100,000, up to a million points.

    python bench/scale.py                      # 10,000 files, the real model
    python bench/scale.py --large              # 25,000 to 200,000 files in 2x steps, stand-in embedder
    python bench/scale.py --sizes 2000 --embedder fixed --edits 5   # a quick look
    python bench/scale.py --large --layout on_disk_int8   # the store's other layout
    python bench/scale.py --kept DIR,DIR       # the daemon's stages again on --keep runs
    python bench/scale.py --kept DIR,DIR --batch-again   # and no-op, status, verify again
    python bench/scale.py --kept DIR,DIR --batch-again --keep-verify   # no-op and status again

The tree is generated from the corpus (../shared/corpus, and examples/docs):
file i is corpus file i mod n under ``setNNN/`` (its folders kept, as a docs
site nests them), with a generated sentence at the start and the end of every
section and a generated title, so no two files share a chunk text and vector
reuse hides no work. The generator is deterministic (``generate``).

Everything runs on the default store (qdrant-edge), each figure a whole
process or the running daemon (`mdindex watch`, its search and status over
its socket). With ``--embedder fixed`` every mdindex process embeds with a
deterministic stand-in (word-hash vectors at the model's size, a fixed cost per
batch), named as such in the table: what is measured is everything but the
model; the real model's cost is its chunks embedded over its chunks/s
(measured here by the model run, or given with ``--model-chunks-per-s``).

The daemon's stages (``daemon_stages``) start each size's daemon in turn, make
its edits and its burst, and then measure every size's rescans and searches
side by side, each rescan and each block of 10 questions asked of one size
and then the other: the machine's speed moves 2x from one second to the next, and a
figure's growth is a ratio of two sizes measured in the same moments.

``--layout`` picks the store's layout for every process, as a user's
``MDINDEX_*`` settings would: ``default``, ``on_disk`` (``on_disk_vectors``)
or ``on_disk_int8`` (and ``quantization = "int8"``).

Prints one table (every figure against size), writes bench/results/scale.json
and draws bench/results/scale.png (cost against files, log axes); a layout
other than the default is named in the file's name.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    REPO,
    RESULTS,
    corpus_dir,
    cpu_name,
    drop_cached,
    reclaim,
    speed_probe,
    table,
    write_json,
)

# The stand-in embedder, put in place of the model in every mdindex process the
# bench starts (the one place the model is made: mdindex.runtime).
#
# Its vectors were a numpy product that OpenBLAS split over both cores, and
# OpenBLAS's worker then spun, waiting for more, for long after: it took a core
# from the engine's search threads. On the 100k-file store through the daemon
# (Intel Xeon with AMX, 2 cores), hybrid p50 was 20.4 ms and 36 CPU ms a search
# with it, 13.5 ms and 21 CPU ms with one BLAS thread; in process 14.9 and 9.4.
# So the stand-in takes one (before numpy loads), and its query vector is now
# summed from rows with no product at all (common.HashEmbedder: 0.06 ms, from
# 1.1 ms at p50 in the daemon), as a model's query costs nothing here: the
# searches are timed without the query's embedding. The real model's thread
# pool does the same: see docs/benchmarks.md.
STAND_IN = f"""
import os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from common import HashEmbedder
import mdindex.runtime as runtime

class FixedCost(HashEmbedder):
    '''common.HashEmbedder at a fixed cost per batch of 64. SCALE_VECTORS=words
    (the default) or random, as HashEmbedder's words=True or False.'''
    batch = 64
    cost_s = float(os.environ.get('SCALE_BATCH_COST_S', '0.002'))

    def __init__(self):
        super().__init__(words=os.environ.get('SCALE_VECTORS', 'words') == 'words')

    def describe(self):
        return {{'name': 'stand-in', 'reason': 'bench/scale.py: everything but the model'}}

    def embed(self, texts, token_ids=None):
        out = super().embed(texts)
        time.sleep(self.cost_s * -(-len(texts) // self.batch))
        return out

    def embed_query(self, text):
        # the query's embedding is the model's cost: left out of search times
        return super().embed([text])[0]

runtime.ModelEmbedder = lambda *a, **k: FixedCost()
"""

# Run as `python -c PROBE ARGS...`: mdindex's CLI, then its peak RSS (VmHWM, which
# starts afresh at exec) and its CPU seconds on stderr.
PROBE = """
import os, resource, sys
from mdindex.cli import main
rc = main(sys.argv[1:])
hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]
ru = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the index build's: KB, CPU s
kids_cpu = kids.ru_utime + kids.ru_stime
print('probe', hwm[0], ru.ru_utime + ru.ru_stime, kids.ru_maxrss, kids_cpu, file=sys.stderr)
sys.exit(rc)
"""

# Run as `python -c STAND_IN + RECALL STATE QUERIES`: recall@10 of the store's
# searches against exact ones (every vector scanned), dense and hybrid. A hit
# counts when the exact search has it in its top 10, or scores it as its 10th
# (ann-benchmarks counts ties the same way): the generated tree repeats each
# corpus file about 90 times, so a heading's chunk has copies of equal text,
# vector and score, and which of them fill the last places of a top 10 is the
# engine's choice, not an error. On the 100,000-file store, of the 50 headings
# asked, 0.952 of dense hits were among the exact top 10's ids and 0.986 were
# those or tied with its 10th; both are recorded (``_ids``: ids alone).
RECALL = """
import json, statistics, sys
from mdindex.config import load_settings
from mdindex.runtime import make_models, make_store
from mdindex.sinks.base import StoreQuery
from mdindex.versions.catalog import reader_settings

settings = reader_settings(load_settings({'state_dir': sys.argv[1]}))
models = make_models(settings)
store = make_store(settings)
before = store.signature()  # recorded after, as a search without the daemon does
store.open()
out = {}
for mode in ('dense', 'hybrid'):
    ids, tied = [], []
    for q in json.loads(sys.argv[2]):
        dense = models.embedder.embed_query(q).tolist()
        sparse = models.planner.sparse.query(q, ['en']) if mode == 'hybrid' else None
        # the same 100 candidates of each half, so the same fused scores
        ask = lambda k, exact: store.search(StoreQuery(k, dense=dense, sparse=sparse, exact=exact))
        got, exact = ask(10, False), ask(100, True)
        want = {h.id for h in exact[:10]}
        tenth = exact[min(9, len(exact) - 1)].score if exact else 0.0
        scores = {h.id: h.score for h in exact}
        ids.append(len({h.id for h in got} & want) / max(len(want), 1))
        ties = [h for h in got if h.id in want or scores.get(h.id, tenth - 1) >= tenth - 1e-6]
        tied.append(len(ties) / max(len(want), 1))
    out[f'recall10_{mode}'] = statistics.mean(tied)
    out[f'recall10_{mode}_ids'] = statistics.mean(ids)
store.close()
from mdindex.index.state import store_reopened
from mdindex.runtime import state_path
store_reopened(state_path(settings), before, store.signature())
print(json.dumps(out))
"""

VOCABULARY = """amber basin cedar delta ember falcon glacier harbor iris juniper kestrel
lagoon meadow nickel orchid pepper quartz raven saffron tundra umber valley willow yarrow
zephyr anchor bramble cobalt dune fjord garnet heron indigo jasper kelp lichen marble
nectar onyx prairie quill ridge spruce thistle upland vapor wren"""
WORDS = VOCABULARY.split()

# --layout: the settings each mdindex process of the run gets
LAYOUTS = {
    "default": {},
    "on_disk": {"MDINDEX_ON_DISK_VECTORS": "true"},
    "on_disk_int8": {"MDINDEX_ON_DISK_VECTORS": "true", "MDINDEX_QUANTIZATION": "int8"},
}

HEADING = re.compile(r"^#{1,6}\s")
FENCE = re.compile(r"^\s*(```|~~~)")


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "."


def unique_text(text: str, i: int) -> str:
    """The corpus text with a generated title and a generated sentence at the start
    and the end of every section: every chunk of file i is its own."""
    rng = random.Random(i)
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":  # frontmatter stays as it is
        end = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), None)
        start = end + 1 if end is not None else 0
    out = lines[:start]
    fenced = False
    for line in lines[start:]:
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and HEADING.match(line):
            out += ["", sentence(rng), "", line, "", sentence(rng), ""]
        else:
            out.append(line)
    out += ["", sentence(rng), ""]
    title = f"# Page {i}: {sentence(rng)[:-1]}"
    return "\n".join([*out[:start], title, "", *out[start:]]) + "\n"


def corpus_files(corpus: Path) -> list[tuple[str, str]]:
    files = []
    for folder in (corpus, REPO / "examples" / "docs"):
        for path in sorted(folder.rglob("*.md")):
            rel = path.relative_to(folder.parent).as_posix()
            files.append((rel, path.read_text(encoding="utf-8", errors="replace")))
    return files


def generate(files: list[tuple[str, str]], dest: Path, count: int) -> None:
    """File i: corpus file i mod n in folder ``set{i // n}``, made unique."""
    n = len(files)
    for i in range(count):
        rel, text = files[i % n]
        out = dest / f"set{i // n:03d}" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(unique_text(text, i), encoding="utf-8")


# -- processes ---------------------------------------------------------------


class Env:
    """The commands of one size: its tree, state, embedder and environment."""

    def __init__(self, work: Path, stand_in: bool, layout: str) -> None:
        self.work = work
        self.root = work / "docs"
        self.state = work / "state"
        self.stand_in = stand_in
        self.env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "MDINDEX_LOG_LEVEL": "WARNING",
            # the rescans are asked for (``timed``): a periodic one (every 600 s by
            # default) in an idle daemon would take a core from the other size's
            "MDINDEX_RESCAN_INTERVAL_S": "86400",
            # git outside the tree: its objects are not part of the docs
            "GIT_DIR": str(work / "git"),
            "GIT_WORK_TREE": str(self.root),
            **LAYOUTS[layout],
        }

    def argv(self, *args: str) -> list[str]:
        code = (STAND_IN if self.stand_in else "") + PROBE
        return [sys.executable, "-c", code, *args, "--state-dir", str(self.state)]

    def run(self, *args: str) -> dict[str, Any]:
        """One mdindex command as a whole process: wall, peak RSS, CPU, stdout."""
        t = time.perf_counter()
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env)
        wall = time.perf_counter() - t
        if proc.returncode not in (0, 1):
            sys.exit(f"mdindex {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        probe = [line.split() for line in proc.stderr.splitlines() if line.startswith("probe ")]
        return {
            "wall_s": wall,
            "peak_rss_mb": int(probe[-1][1]) / 1024 if probe else None,
            # its children's (edge's index build, sinks/edge/optimize.py), not part of
            # the above; Linux carries the parent's peak at the fork into it, so it is
            # the child's own only where larger (6.8 GB at 545k points, against 2.2)
            "child_peak_rss_mb": int(probe[-1][3]) / 1024 or None if probe else None,
            "cpu_s": float(probe[-1][2]) if probe else None,
            # CPU seconds, unlike wall time, barely move when other work shares the cores
            "child_cpu_s": float(probe[-1][4]) if probe else None,
            "stdout": proc.stdout,
            "rc": proc.returncode,
        }

    def git(self, *args: str) -> None:
        subprocess.run(
            ["git", "-c", "core.quotepath=off", *args],
            env=self.env,
            check=True,
            capture_output=True,
        )


def found(data: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a JSON document."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            value = found(item, key)
            if value is not None:
                return value
    return None


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class Daemon:
    """`mdindex watch` on the tree, reached as the CLI reaches it."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.started = time.perf_counter()
        with open(env.work / "daemon.log", "w") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                env.argv("watch", str(env.root)), env=env.env, stdout=subprocess.DEVNULL, stderr=log
            )
        self.client: Any = None

    def wait_watching(self, timeout: float = 1800) -> float:
        from mdindex.config import load_settings
        from mdindex.query.daemon import find_daemon

        deadline = time.monotonic() + timeout
        settings = load_settings({"state_dir": str(self.env.state)})
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(
                    f"the daemon exited {self.proc.returncode}; see {self.env.work}/daemon.log"
                )
            try:
                self.client = self.client or find_daemon(settings)
                status = self.client.ask("/status") if self.client else {}
            except Exception:
                status = {}
            if isinstance(status, dict) and status.get("phase") == "watching":
                return time.perf_counter() - self.started
            time.sleep(0.05)
        sys.exit("the daemon never reached watching")

    def ask(self, path: str, post: bool = False) -> Any:
        return self.client.ask(path, post=post, timeout=600)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def owed_build(env: Env, points: int, timeout: float = 1800) -> float:
    """Wait while the daemon builds the index it owes from earlier runs (a kept
    store's bench runs leave it no quiet moment, and their changes piled up
    outside the graphs, a tenth of the store before a build is due): the seconds
    waited, 0 when none is owed. The daemon is asked nothing meanwhile, as a
    request makes a build give way; its shard's count of points written since
    the last build is read instead, which a finished build sets to 0. Every
    figure after it then starts from a store whose daemon had its quiet moment."""
    from mdindex.sinks.edge.optimize import wants_index, written
    from mdindex.sinks.edge.shard import read_config

    shards = list((env.state / "edge").glob("*/segments"))
    if len(shards) != 1:
        return 0.0
    shard = shards[0].parent
    if not wants_index(shard, points, read_config(shard), 50_000):  # the default least
        return 0.0
    t0 = time.perf_counter()
    while written(shard) and time.perf_counter() - t0 < timeout:
        time.sleep(1)
    print(
        f"[{points} points] the daemon's owed build: {time.perf_counter() - t0:.0f}s",
        file=sys.stderr,
    )
    return time.perf_counter() - t0


def status_wait(env: Env) -> float:
    # 900: a 1,000-file checkout at 200,000 files took longer than 120 s
    out = env.run("status", "--wait", "--timeout", "900", "--json")
    if out["rc"] != 0:
        sys.exit(f"status --wait failed: {out['stdout'][-2000:]}")
    return float(out["wall_s"])


def searchable(daemon: Daemon, word: str, path: str) -> bool:
    import urllib.parse

    q = urllib.parse.urlencode({"q": word, "k": 10, "mode": "sparse", "path": path})
    hits = daemon.ask(f"/search?{q}")
    return any(word in h["text"] for h in hits)


def keep_so_far(work: Path, row: dict[str, Any]) -> None:
    """The figures measured so far, in the run's folder: a run at 200,000 files
    takes hours, and one stopped part way keeps what it measured."""
    (work / "row.json").write_text(json.dumps(row, indent=1))


def measure(size: int, files: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"mdindex-scale-{size}-", dir=args.tmp))
    env = Env(work, stand_in=args.embedder == "fixed", layout=args.layout)
    row: dict[str, Any] = {"files": size, "embedder": args.embedder, "layout": args.layout}
    t = time.perf_counter()
    generate(files, env.root, size)
    env.git("init", "-q", "-b", "main")
    env.git("add", "-A")
    env.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "tree")
    print(
        f"[{size}] tree generated and committed in {time.perf_counter() - t:.0f}s", file=sys.stderr
    )

    cold = env.run("backfill", str(env.root), "--json")
    summary = json.loads(cold["stdout"])
    row |= {
        "points": summary["points_upserted"],
        "chunks_embedded": summary["chunks_embedded"],
        "cold_s": cold["wall_s"],
        "cold_chunks_per_s": summary["chunks_embedded"] / cold["wall_s"],
        "cold_embed_share": summary.get("embed_seconds", 0.0) / cold["wall_s"],
        "cold_peak_rss_mb": cold["peak_rss_mb"],
        "cold_build_peak_rss_mb": cold["child_peak_rss_mb"],
        "cold_cpu_s": (cold["cpu_s"] or 0) + (cold["child_cpu_s"] or 0) or None,
        "cold_build_cpu_s": cold["child_cpu_s"],
    }
    print(f"[{size}] cold backfill {cold['wall_s']:.0f}s, {row['points']} points", file=sys.stderr)
    keep_so_far(work, row)
    batch_stages(env, row, work)
    if not args.batch_only:
        daemon_stages([(env, row)], files, args)
    return sizes(env, work, row, args.keep)


def batch_stages(env: Env, row: dict[str, Any], work: Path, verify: bool = True) -> None:
    """The one-shot commands on the indexed tree: no-op, status, verify (unless
    not ``verify``: the row's own verify figures stay)."""
    noop = env.run("backfill", str(env.root), "--json")
    status = env.run("status", str(env.root), "--json")
    one_shot_figures(row, [noop], [status])
    verify_stage(env, row, work, verify)


def one_shot_figures(
    row: dict[str, Any], noops: list[dict[str, Any]], statuses: list[dict[str, Any]]
) -> None:
    """The no-op's and status's figures of one size into ``row``: the median
    wall time of its runs, the highest peak RSS."""
    for name, runs in (("noop", noops), ("status", statuses)):
        row[f"{name}_s"] = statistics.median(r["wall_s"] for r in runs)
        row[f"{name}_peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    row["indexed_points"] = found(json.loads(statuses[-1]["stdout"] or "{}"), "indexed_points")


def verify_stage(env: Env, row: dict[str, Any], work: Path, verify: bool) -> None:
    """``verify`` on the tree (unless not ``verify``: the row's own figures stay)."""
    if verify:
        out = env.run("verify", str(env.root), "--json")
        row["verify_s"] = out["wall_s"]
        row["verify_peak_rss_mb"] = out["peak_rss_mb"]
        row["verify_cpu_s"] = out["cpu_s"]
        row["verify_in_sync"] = bool(json.loads(out["stdout"]).get("in_sync"))
    print(
        f"[{row['files']}] no-op {row['noop_s']:.1f}s, status {row['status_s']:.1f}s, "
        f"verify {row['verify_s']:.1f}s",
        file=sys.stderr,
    )
    keep_so_far(work, row)


# Kept runs' no-op and status, ONE_SHOTS of each size in turns, the median: one
# after the other, minutes apart, the no-op at 100,000 files read 3.2 s in one
# run and 5.0 to 5.9 s in three before, against 9.0 to 10.8 s at 200,000 (1.80x
# to 2.87x for the same code), as the machine's speed moved.
ONE_SHOTS = 3


def kept(work: Path) -> tuple[Env, dict[str, Any]]:
    """The tree, git and state an earlier run kept in ``work`` (``--keep``),
    with its one-shot figures from its row.json, for the daemon's stages again:
    the searches of the code checked out now, without a cold run."""
    row = json.loads((work / "row.json").read_text())
    for key in [k for k in row if k.startswith(DAEMON_FIGURES)]:
        del row[key]
    return Env(work, stand_in=row["embedder"] == "fixed", layout=row["layout"]), row


def kept_one_shots(sized: list[tuple[Env, dict[str, Any]]], args: argparse.Namespace) -> None:
    """The one-shot commands of kept runs, with the code checked out now, for
    every run with ``--batch-again`` and any run stopped after its cold stage:
    the no-op and status of each size in turns (ONE_SHOTS), then verify, unless
    ``--keep-verify`` keeps a run's own."""
    again = [n for n, (_, row) in enumerate(sized) if "verify_s" not in row or args.batch_again]
    noops: dict[int, list[dict[str, Any]]] = {n: [] for n in again}
    statuses: dict[int, list[dict[str, Any]]] = {n: [] for n in again}
    for i in range(ONE_SHOTS):
        for k in turns(len(again), i):
            env = sized[again[k]][0]
            noops[again[k]].append(env.run("backfill", str(env.root), "--json"))
            statuses[again[k]].append(env.run("status", str(env.root), "--json"))
    for n in again:
        env, row = sized[n]
        one_shot_figures(row, noops[n], statuses[n])
        verify_stage(env, row, env.work, "verify_s" not in row or not args.keep_verify)


# the figures daemon_stages measures, cleared before it runs again on a kept tree
DAEMON_FIGURES = ("daemon_", "rescan_", "edit_", "burst_", "search_", "recall10_", "probe_")

# rounds of warm searches over every set (SEARCH_ROUNDS x --queries each)
SEARCH_ROUNDS = 5
RESCANS = 5
# Side by side, the questions go to each size in blocks of this many (0.15 to
# 0.25 s): asked one question each in turn, the 100,000-file daemon's hybrid
# p50 was 14.6 and 15.1 ms, against 13.6 and 13.9 in blocks of 10 and 13.2 to
# 14.7 alone (the other's search in between took its caches)
BLOCK = 10


def daemon_stages(
    sized: list[tuple[Env, dict[str, Any]]], files: list[tuple[str, str]], args: argparse.Namespace
) -> None:
    """`mdindex watch` on each indexed tree: its start timed alone, in turns
    with the other sizes' (``starts``); then edits and a burst, one size after
    another; then the rescans and searches of every size side by side.

    Side by side: every size's daemon runs, and each rescan and each block of
    ``BLOCK`` questions goes to one size and then the other (the order turned
    each time), so the machine's slow and fast moments fall on both. Asked
    one size after the other, minutes apart, the same code's growth from
    100,000 to 200,000 files read 1.33x to 2.99x for hybrid p95 and 1.33x to
    2.70x for the rescan over seven runs (bench/results/scale_kept_400k_*.json):
    the machine's speed moves 2x from one second to the next
    (common.speed_probe)."""
    starts(sized)
    running: list[tuple[Env, dict[str, Any], Daemon]] = []
    try:
        for env, row in sized:
            running.append((env, row, started(env, row, args)))
        asked = timed(running, files, args)
    finally:
        for _, _, daemon in running:
            daemon.stop()
    for env, row, _ in running:
        keep_so_far(env.work, row)
        recall(env, row, asked)


# Each size's daemon is started STARTS times in turns, alone, the median: started
# one after the other for the stages, the 200,000-file start read 9.4 to 12.9 s
# in three runs and 17.6 s in a fourth, the smaller daemon beside it building
# its burst's points into its graph.
STARTS = 3


def starts(sized: list[tuple[Env, dict[str, Any]]]) -> None:
    """The daemon's start on each tree (nothing of its store cached), with no
    other daemon running: STARTS of each size in turns, the median."""
    walls: list[list[float]] = [[] for _ in sized]
    for i in range(STARTS):
        for n in turns(len(sized), i):
            env = sized[n][0]
            drop_cached(env.state)
            daemon = Daemon(env)
            try:
                walls[n].append(daemon.wait_watching())
            finally:
                daemon.stop()
    for n, (_, row) in enumerate(sized):
        row["daemon_start_s"] = statistics.median(walls[n])


def started(env: Env, row: dict[str, Any], args: argparse.Namespace) -> Daemon:
    """The daemon on one tree: started, its owed build made, then edits and a
    burst, each waited for as a script would (`status --wait`)."""
    size = row["files"]
    # Whatever ran before (verify, a probe of the kept store) left more or less
    # of the store's pages cached; each size starts from none.
    drop_cached(env.state)
    daemon = Daemon(env)
    try:
        daemon.wait_watching()  # its start is timed alone (``starts``)
        row["daemon_owed_build_s"] = owed_build(env, row["points"])
        time.sleep(2)
        row["daemon_idle_rss_mb"] = proc_mem_mb(daemon.proc.pid, "VmRSS")

        # one edit to searchable, as a script sees it: write, then `status --wait`
        rng = random.Random(size)
        paths = sorted(p for p in env.root.rglob("*.md"))
        latencies = []
        for k in range(args.edits):
            path = rng.choice(paths)
            word = f"zqedit{k}x{size}"
            t0 = time.perf_counter()
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"\n\nEdited with the word {word}.\n")
            status_wait(env)
            latencies.append(time.perf_counter() - t0)
            rel = path.relative_to(env.root).as_posix()
            if not searchable(daemon, word, rel):
                sys.exit(f"edit {k}: {word} not searchable after status --wait returned")
        row["edit_p50_s"] = statistics.median(latencies)
        row["edit_p95_s"] = pct(latencies, 0.95)

        # a burst: `git checkout` of a branch with 1,000 files changed
        branch = f"burst{time.time_ns()}"  # a kept tree has the runs' before it
        env.git("checkout", "-q", "-b", branch)
        changed = rng.sample(paths, min(1000, len(paths)))
        for n, path in enumerate(changed):
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"\n\nBurst change {n} zqburst{n}x.\n")
        env.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-am", "burst")
        env.git("checkout", "-q", "main")
        status_wait(env)
        t0 = time.perf_counter()
        env.git("checkout", "-q", branch)
        checkout_s = time.perf_counter() - t0
        status_wait(env)
        row["burst_s"] = time.perf_counter() - t0
        row["burst_checkout_s"] = checkout_s
        last = changed[-1].relative_to(env.root).as_posix()
        if not searchable(daemon, f"zqburst{len(changed) - 1}x", last):
            sys.exit("the burst's last file is not searchable after status --wait returned")
    except BaseException:
        daemon.stop()
        raise
    return daemon


def turns(count: int, i: int) -> list[int]:
    """Which size goes first in turn ``i``: each in turn, so neither is always
    asked right after the other's work."""
    return [(i + k) % count for k in range(count)]


def questions(files: list[tuple[str, str]], count: int) -> tuple[list[str], list[str]]:
    """The questions the searches ask: ``count`` triples of the generated
    words, and ``count`` of the corpus's headings (three words or more). Every
    word of a triple is in about 38 % of the chunks (the generated sentences
    draw on 50 words): a worst case for the sparse half. The headings ask as
    people do."""
    words = [" ".join(random.Random(q).sample(WORDS, 3)) for q in range(count)]
    headings = [
        line.lstrip("#").strip()
        for _, text in files
        for line in text.splitlines()
        if HEADING.match(line) and len(line.split()) >= 3
    ]
    return words, random.Random(0).sample(headings, min(count, len(headings)))


def timed(
    running: list[tuple[Env, dict[str, Any], Daemon]],
    files: list[tuple[str, str]],
    args: argparse.Namespace,
) -> list[str]:
    """Rescans and searches, every size's in turn (``daemon_stages``); then the
    daemons' memory after them. The questions asked, for ``recall``."""
    import urllib.parse

    count = len(running)

    # the periodic rescan: the daemon's reconcile, asked for over its socket;
    # the median of five, the machine's speed probed before each
    walls: list[list[float]] = [[] for _ in running]
    cpus: list[list[float]] = [[] for _ in running]
    probes: list[float] = []
    for i in range(RESCANS):
        probes.append(speed_probe())
        for n in turns(count, i):
            pid = running[n][2].proc.pid
            cpu0, t0 = proc_cpu_s(pid), time.perf_counter()
            running[n][2].ask("/reconcile", post=True)
            walls[n].append(time.perf_counter() - t0)
            cpus[n].append(proc_cpu_s(pid) - cpu0)
    for n, (_, row, _) in enumerate(running):
        row["rescan_s"], row["rescan_cpu_s"] = (
            statistics.median(walls[n]),
            statistics.median(cpus[n]),
        )
        row["probe_rescan_ms"] = statistics.median(probes)

    # search with the model loaded, through the daemon as the CLI asks it
    queries, headings = questions(files, args.queries)
    sets = {
        f"search_{mode}{'_path' if filtered else ''}": (mode, filtered)
        for mode in ("hybrid", "dense")
        for filtered in (False, True)
    }

    def ask_all(asked: list[str], mode: str, filtered: bool) -> list[list[float]]:
        times: list[list[float]] = [[] for _ in running]
        for i in range(0, len(asked), BLOCK):
            for n in turns(count, i // BLOCK):
                for q in asked[i : i + BLOCK]:
                    params: dict[str, Any] = {"q": q, "k": 10, "mode": mode}
                    if filtered:
                        params["path"] = "set000/"
                    t0 = time.perf_counter()
                    running[n][2].ask("/search?" + urllib.parse.urlencode(params))
                    times[n].append(time.perf_counter() - t0)
        return times

    # Each question first as it comes, after the burst, then warm, in
    # SEARCH_ROUNDS rounds over every set in turn, the machine's speed probed
    # before each: 50 searches take under a second, and one second's p50 moved
    # from 10.5 to 14.2 ms with the machine's speed (see common.speed_probe).
    first_probe = speed_probe()
    for name, (mode, filtered) in sets.items():
        for n, times in enumerate(ask_all(queries, mode, filtered)):
            running[n][1][f"{name}_p50_ms"] = statistics.median(times) * 1000
            running[n][1][f"{name}_p95_ms"] = pct(times, 0.95) * 1000
    warm: dict[str, list[list[float]]] = {name: [[] for _ in running] for name in sets}
    probes = []
    # The daemon's memory after each warm round and once more at the end: its
    # mapped pages rise and fall between let-gos (edge.pages.LET_GO_BYTES), so
    # one sample's growth from 100,000 to 200,000 files read 0.67x in one run
    # and 2.36x in the next (the total RSS 1.11x and 1.83x); the median of the
    # samples is the figure
    memory: list[dict[str, list[float]]] = [{"anon": [], "file": []} for _ in running]
    for _ in range(SEARCH_ROUNDS):
        probes.append(speed_probe())
        for name, (mode, filtered) in sets.items():
            for n, times in enumerate(ask_all(queries, mode, filtered)):
                warm[name][n] += times
        for n, (_, _, daemon) in enumerate(running):
            memory[n]["anon"].append(proc_mem_mb(daemon.proc.pid, "RssAnon"))
            memory[n]["file"].append(proc_mem_mb(daemon.proc.pid, "RssFile"))
    for mode in ("hybrid", "dense"):
        for n, times in enumerate(ask_all(headings, mode, False)):
            running[n][1][f"search_{mode}_headings_p50_ms"] = statistics.median(times) * 1000
    time.sleep(2)
    for n, (_, row, daemon) in enumerate(running):
        for name in sets:
            row[f"{name}_warm_p50_ms"] = statistics.median(warm[name][n]) * 1000
            row[f"{name}_warm_p95_ms"] = pct(warm[name][n], 0.95) * 1000
        row["probe_search_first_ms"] = first_probe
        row["probe_search_ms"] = statistics.median(probes)
        pid = daemon.proc.pid
        row["daemon_idle_rss_after_mb"] = proc_mem_mb(pid, "VmRSS")
        # the store's files mapped in count in RSS but are the page cache's to reclaim
        memory[n]["anon"].append(proc_mem_mb(pid, "RssAnon"))
        memory[n]["file"].append(proc_mem_mb(pid, "RssFile"))
        row["daemon_idle_anon_mb"] = statistics.median(memory[n]["anon"])
        row["daemon_idle_file_mb"] = statistics.median(memory[n]["file"])
        row["daemon_peak_rss_mb"] = proc_mem_mb(pid, "VmHWM")
    return queries + headings


def recall(env: Env, row: dict[str, Any], asked: list[str]) -> None:
    """Recall of the searches ``timed`` asked against exact ones, in a process
    of its own, once the daemon is gone."""
    code = (STAND_IN if env.stand_in else "") + RECALL
    proc = subprocess.run(
        [sys.executable, "-c", code, str(env.state), json.dumps(asked)],
        capture_output=True,
        text=True,
        env=env.env,
    )
    if proc.returncode != 0:
        sys.exit(f"recall failed:\n{proc.stderr[-3000:]}")
    row |= json.loads(proc.stdout.strip().splitlines()[-1])


def sizes(env: Env, work: Path, row: dict[str, Any], keep: bool) -> dict[str, Any]:
    """The state's and store's size on disk into ``row``; the run folder goes
    unless kept."""
    row["state_mb"] = sum(p.stat().st_size for p in env.state.glob("*.sqlite3*")) / 2**20
    row["store_mb"] = size_mb(env.state) - row["state_mb"]
    keep_so_far(work, row)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


COLUMNS = [
    "files",
    "points",
    "indexed_points",
    "chunks_embedded",
    "cold_s",
    "cold_chunks_per_s",
    "cold_embed_share",
    "cold_peak_rss_mb",
    "cold_build_peak_rss_mb",
    "cold_cpu_s",
    "cold_build_cpu_s",
    "model_would_add_s",
    "noop_s",
    "noop_peak_rss_mb",
    "status_s",
    "status_peak_rss_mb",
    "verify_s",
    "verify_peak_rss_mb",
    "verify_cpu_s",
    "daemon_start_s",
    "daemon_owed_build_s",
    "rescan_s",
    "rescan_cpu_s",
    "probe_rescan_ms",
    "edit_p50_s",
    "edit_p95_s",
    "burst_s",
    "probe_search_first_ms",
    "search_hybrid_p50_ms",
    "search_hybrid_p95_ms",
    "search_hybrid_warm_p50_ms",
    "search_hybrid_warm_p95_ms",
    "search_hybrid_path_p50_ms",
    "search_dense_p50_ms",
    "search_dense_warm_p50_ms",
    "search_dense_path_p50_ms",
    "search_hybrid_headings_p50_ms",
    "search_dense_headings_p50_ms",
    "probe_search_ms",
    "recall10_dense",
    "recall10_hybrid",
    "recall10_dense_ids",
    "recall10_hybrid_ids",
    "daemon_idle_rss_mb",
    "daemon_idle_anon_mb",
    "daemon_idle_file_mb",
    "daemon_peak_rss_mb",
    "state_mb",
    "store_mb",
]

PLOTTED = {
    "cold_s": "cold backfill (s)",
    "noop_s": "no-op re-run (s)",
    "daemon_start_s": "daemon start to watching (s)",
    "rescan_cpu_s": "rescan CPU (s)",
    "edit_p50_s": "edit to searchable p50 (s)",
    "burst_s": "1,000-file checkout (s)",
    "status_s": "status (s)",
    "verify_s": "verify (s)",
}


def picture(rows: list[dict[str, Any]], cpu: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    xs = [r["files"] for r in rows]
    for key, label in PLOTTED.items():
        left.plot(xs, [r.get(key) or float("nan") for r in rows], marker="o", label=label)
    left.set(xscale="log", yscale="log", xlabel="files", ylabel="seconds", title="time")
    left.legend(fontsize=7)
    for key, label in (
        ("verify_peak_rss_mb", "verify peak RSS"),
        ("daemon_idle_rss_mb", "daemon idle RSS"),
        ("daemon_peak_rss_mb", "daemon peak RSS"),
        ("cold_peak_rss_mb", "backfill peak RSS"),
        ("cold_build_peak_rss_mb", "its index build's peak RSS"),
        ("store_mb", "store on disk"),
        ("state_mb", "state on disk"),
    ):
        right.plot(xs, [r.get(key) or float("nan") for r in rows], marker="o", label=label)
    right.set(xscale="log", yscale="log", xlabel="files", ylabel="MB", title="memory and disk")
    right.legend(fontsize=7)
    fig.suptitle(
        f"mdindex against tree size ({rows[0]['embedder']} embedder; {rows[0]['layout']} layout; {cpu})",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def growth(rows: list[dict[str, Any]]) -> list[str]:
    """Each step's growth of every figure; flagged where it grows faster than
    the tree by more than 5 % (2.1x for 2x files), as the issue asks. A flagged
    time says how much slower the machine's speed probe found the machine
    beside it. Never flagged: the ``probe_`` figures (the machine's) and the
    owed build (what earlier runs left)."""
    flagged = []
    for a, b in itertools.pairwise(rows):
        ratio = b["files"] / a["files"]
        print(f"growth {a['files']} -> {b['files']} files ({ratio:.1f}x):")
        for key in COLUMNS[1:]:
            if a.get(key) and b.get(key):
                grew = b[key] / a[key]
                if key.startswith("probe_"):
                    print(f"  {key}: {grew:.2f}x  (the machine, not mdindex)")
                    continue
                if key == "daemon_owed_build_s":
                    print(f"  {key}: {grew:.2f}x  (what earlier runs left, not the tree)")
                    continue
                flag = grew > 1.05 * ratio
                note = ""
                probe = probe_of(key)
                if flag and probe and a.get(probe) and b.get(probe):
                    note = f" (the speed probe beside it: {b[probe] / a[probe]:.2f}x)"
                print(f"  {key}: {grew:.2f}x{'  FASTER THAN THE TREE' + note if flag else ''}")
                if flag:
                    flagged.append(f"{key} {a['files']}->{b['files']}: {grew:.2f}x{note}")
    return flagged


def probe_of(key: str) -> str | None:
    """The speed probe measured beside a figure, if one was."""
    if key.startswith("rescan_"):
        return "probe_rescan_ms"
    if key.startswith("search_"):
        warm = "_warm" in key or "_headings" in key  # the headings are asked after the warm rounds
        return "probe_search_ms" if warm else "probe_search_first_ms"
    return None


def model_rate() -> float | None:
    """The real model's cold chunks/s from this machine's model run, if one was made."""
    try:
        rows = json.loads((RESULTS / "scale.json").read_text())["rows"]
        return float(rows[0]["cold_chunks_per_s"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--embedder", choices=["model", "fixed"], default="model")
    ap.add_argument(
        "--large",
        action="store_true",
        help="25,000 to 200,000 files in 2x steps, stand-in embedder",
    )
    ap.add_argument("--layout", choices=list(LAYOUTS), default="default")
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument(
        "--model-chunks-per-s", type=float, help="the real model's rate, for what it would add"
    )
    ap.add_argument("--tmp", help="where the trees go (default: the system's temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the trees, states and stores")
    ap.add_argument(
        "--batch-only",
        action="store_true",
        help="the one-shot commands only (cold backfill, no-op, status, verify): no daemon",
    )
    ap.add_argument(
        "--kept",
        help="run folders kept by an earlier --keep run, comma-separated: the daemon's "
        "stages again on each (the code checked out now), its one-shot figures kept",
    )
    ap.add_argument(
        "--batch-again",
        action="store_true",
        help="with --kept: the one-shot commands (no-op, status, verify) again too, "
        "with the code checked out now (only the cold run's figures kept)",
    )
    ap.add_argument(
        "--keep-verify",
        action="store_true",
        help="with --batch-again: the kept run's verify figures kept (verify takes "
        "34 minutes at 200,000 files)",
    )
    args = ap.parse_args()
    if args.large:
        args.sizes, args.embedder = "25000,50000,100000,200000", "fixed"
    files = corpus_files(corpus_dir(args.corpus))
    paging = reclaim()
    cpu = cpu_name() + (f"; {paging}" if paging else "")
    if args.kept:
        sized = [kept(Path(w)) for w in args.kept.split(",")]
        kept_one_shots(sized, args)
        daemon_stages(sized, files, args)
        rows = [sizes(env, env.work, row, keep=True) for env, row in sized]
        args.embedder, args.layout = rows[0]["embedder"], rows[0]["layout"]
    else:
        rows = [measure(int(s), files, args) for s in args.sizes.split(",")]
    rate = args.model_chunks_per_s or (
        rows[0]["cold_chunks_per_s"] if args.embedder == "model" else model_rate()
    )
    for row in rows:
        if args.embedder == "fixed" and rate:
            row["model_would_add_s"] = row["chunks_embedded"] / rate
    print(
        f"mdindex at scale; {cpu}; layout: {args.layout}; embedder: {args.embedder}"
        + (
            " (a stand-in: word-hash vectors, fixed cost per batch)"
            if args.embedder == "fixed"
            else ""
        )
    )
    for chunk in range(0, len(COLUMNS), 9):
        cols = COLUMNS[chunk : chunk + 9]
        print(table(rows, ["files", *[c for c in cols if c != "files"]]))
        print()
    flagged = growth(rows)
    name = "scale" if args.embedder == "model" else "scale_large"
    name += "" if args.layout == "default" else f"_{args.layout}"
    name += "_batch" if args.batch_only else "_kept" if args.kept else ""
    write_json(
        name,
        {
            "cpu": cpu,
            "embedder": args.embedder,
            "layout": args.layout,
            "rows": rows,
            "flagged": flagged,
        },
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    picture(rows, cpu, RESULTS / f"{name}.png")
    print(f"written bench/results/{name}.json and .png")


if __name__ == "__main__":
    main()
