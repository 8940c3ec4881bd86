"""Helpers shared by the benchmark scripts: corpus loading, timing, memory."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
RESULTS = REPO / "bench" / "results"


def corpus_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else DEFAULT_CORPUS
    if not path.is_dir():
        sys.exit(f"corpus folder {path} not found; pass one with --corpus")
    return path


def load_texts(folder: Path) -> list[tuple[str, str]]:
    from mdindex.documents.reading import decode

    out = []
    for path in sorted(folder.rglob("*.md")):
        out.append((path.relative_to(folder).as_posix(), decode(path.read_bytes())))
    return out


def median_time(fn: Callable[[], Any], runs: int = 3) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def speed_probe(samples: int = 7) -> float:
    """Milliseconds for a fixed piece of pure-Python work, the median of
    ``samples``: this machine's speed at the moment, for a figure measured beside it.

    These machines are virtual, and their speed moves under a bench: on an idle
    one (Intel Xeon with AMX, 2 cores) this work took 6.4 to 14.4 ms from one
    second to the next, in two bands near 7 and 10.5, and rounds of 50 hybrid
    searches through the daemon took 10.5 to 14.2 ms at p50 in the same minute,
    slower in the rounds the probe found slow. A figure with its probe beside it
    says whether it moved or the machine did."""
    import hashlib

    times = []
    for _ in range(samples):
        t, h = time.perf_counter(), b"x"
        for _ in range(20_000):
            h = hashlib.blake2b(h).digest()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def vm_hwm_mb() -> float:
    """This process's peak RSS since its exec (VmHWM), unlike ru_maxrss after a fork."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


# Run as `python -c PEAK_RSS_PROBE ARGS...`: mdindex's CLI, then its own peak RSS
# on stderr as VmHWM, which starts afresh at exec (ru_maxrss would still count
# the parent's pages from before the exec).
PEAK_RSS_PROBE = (
    "import sys\n"
    "from mdindex.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
    "print('peak_rss_kb', hwm[0], file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def probe_rss_mb(stderr: str) -> float | None:
    kb = [line.split()[1] for line in stderr.splitlines() if line.startswith("peak_rss_kb")]
    return int(kb[-1]) / 1024 if kb else None


def run_process(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """A whole process's wall time and stdout; a failure ends the benchmark."""
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    secs = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return secs, out.stdout


def write_json(name: str, data: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns)]
    lines.append("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        lines.append("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns))
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return "" if value is None else str(value)


def offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def raw_encode(embedder: Any, texts: list[str]) -> Any:
    """Plain ``SentenceTransformer.encode`` with the embedder's model, batch size and
    precision: the baseline that mdindex's own embedding path is measured against."""
    from mdindex.embedding.engines import encode

    return encode(embedder.model(), embedder.precision, texts, embedder.batch_size)


class HashEmbedder:
    """Deterministic unit vectors from a hash of the text, at the real model's size.

    For benchmarks of the store and the sync core: the model's cost is the same
    whichever store is measured, and here it would hide the difference.

    ``words=False``: isotropic Gaussian vectors, nothing nearer than anything
    else, where no index finds neighbours (recall@10 0.2 to 0.26 against exact
    search at 50k to 100k points, bench/hnsw_probe.py). ``words=True``: the sum
    of a fixed random vector per word (4,096 hashed buckets) plus 0.3 of the
    text's own, so texts sharing words lie near each other as a model's do
    (bench/scale.py's stand-in).
    """

    dimension = 384

    def __init__(self, words: bool = False) -> None:
        self.texts_embedded = 0
        self.words = words
        self._buckets: Any = None

    def embed(self, texts: Any, token_ids: Any = None) -> Any:
        import hashlib
        import zlib

        import numpy as np

        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            v = np.random.default_rng(seed).standard_normal(self.dimension)
            out[i] = v / np.linalg.norm(v)
        if self.words:
            if self._buckets is None:
                rng = np.random.default_rng(12345)
                self._buckets = rng.standard_normal((4096, self.dimension)).astype(np.float32)
            # each text's words' rows summed (a text of no words: zeros), as a
            # matrix of word counts times the buckets would, without the product
            # that cost a query 1.1 ms at p50 in the daemon (4,096 x 384 a query)
            summed = np.zeros((len(texts), self.dimension), dtype=np.float32)
            for i, text in enumerate(texts):
                rows = [zlib.crc32(w.encode()) & 4095 for w in text.lower().split()]
                if rows:
                    summed[i] = self._buckets[rows].sum(axis=0)
            summed /= np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-6)
            out = summed + 0.3 * out
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        self.texts_embedded += len(texts)
        return out

    def load(self, run: tuple[int, int] | None = None) -> None:
        return None

    def lookahead(self) -> int:
        return 0

    def embed_query(self, text: str) -> Any:
        return self.embed([text])[0]

    def describe(self) -> dict[str, Any]:
        return {"name": "hash", "reason": "a benchmark's stand-in for the model"}

    def __call__(self, texts: Any) -> Any:
        return self.embed(texts)


def cpu_name() -> str:
    """The CPU's model name and core count, for every figure a bench prints."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return "unknown CPU"


def drop_cached(folder: Path) -> None:
    """The page cache of every file under ``folder`` dropped (what no process
    maps), as a machine that paged it out, or a reboot, leaves it: each size
    of a run then starts equally cold, whatever touched its files before."""
    for path in folder.rglob("*"):
        try:
            if not path.is_file() or path.is_symlink():
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def reclaim() -> str:
    """Whether the kernel pages out idle memory on its own, as DAMON does on
    some of these machines: page cache that no process maps, idle 60 s, is paged
    out, so an on-disk store's searches read from disk: at 545k points a hybrid
    search through the daemon waited on the disk 28 to 60 times (major faults)."""
    for scheme in Path("/sys/kernel/mm/damon/admin/kdamonds").glob("*/contexts/*/schemes/*"):
        context, kdamond = scheme.parents[1], scheme.parents[3]
        try:
            on = (kdamond / "state").read_text().strip() == "on"
            action = (scheme / "action").read_text().strip()
            age = int((scheme / "access_pattern/age/min").read_text())
            aggr_us = int((context / "monitoring_attrs/intervals/aggr_us").read_text())
        except (OSError, ValueError):
            continue
        if on and action == "pageout":
            return f"DAMON pages out memory idle {age * aggr_us / 1e6:.0f} s"
    return ""
