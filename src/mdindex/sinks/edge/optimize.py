"""Building a shard's HNSW index, out of the way.

Edge has no background optimizer, and ``optimize()`` holds the GIL for its
whole run (about 0.5 ms a point here with Qdrant's default graph: 54 s for
100k; mdindex's denser one, shard.HNSW_M, takes 2.3x as long), which would freeze the
daemon's threads and its systemd watchdog pings. So:

- Below ``index_min_points`` points the store is never optimized and every
  search is exact (recall 1.0). Exact search measured 1.7 ms at 20k points,
  6 ms at 50k and 15 ms at 100k on 2 cores; an index answers in about 1 ms,
  and building one costs about as much CPU as 4,000 to 6,000 exact searches,
  so it pays off only for a large store that is searched a lot.
- Above it, once at least a tenth of the points are not in the index yet,
  ``settle`` closes the shard and optimizes it in a child process, while the
  caller's threads go on. ``settle`` is called only when there is nothing
  else to do, and it gives way: the child is killed as soon as ``idle()``
  says an event arrived or a search is waiting (a killed run leaves the shard
  as it was; tested), and it is tried again at the next quiet moment.
- A segment holds at most ``SEGMENT_POINTS`` points: once that many are
  outside the index, the sync core's writes wait while they are built
  (``seal_due``; the build gives way to a search or a stop), so no build
  handles more. A cold backfill writes every point before its first quiet
  moment, and one build of 1.09M points held 13.3 GB and 949 s of CPU (395 s
  for 545k; bench/scale.py, AMD EPYC). Without a bound, each build also
  merged every segment and built its graph again.

How many points are outside the index is mdindex's own count, not the
shard's: edge's ``indexed_vectors_count`` adds up every vector index of a
segment, and a sparse vector's inverted index counts as one from the first
write (qdrant lib/segment/src/types.rs, ``SparseVectorDataConfig::is_indexed``
is always true, so segment/read_view/info.rs counts the sparse vectors of a
plain appendable segment as indexed). A hybrid store of 60k points reported
60k indexed before any index was built, so it was never optimized and every
search scanned all vectors (issue 37; bench/edge_hnsw.py). So the points
written since the last build are counted in ``WRITTEN_FILE`` in the shard.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdindex.embedding.engines import give_back_heap
from mdindex.jsonfile import load_json

log = logging.getLogger(__name__)

# The build dies with the process that started it (PR_SET_PDEATHSIG; Linux,
# where the daemon runs). An orphaned build held the shard's lock: a daemon
# SIGKILLed outside systemd (whose unit kills its whole cgroup) came back to
# "open in another process" until the build ended, minutes at 400k points.
# The signal follows the parent's thread, which waits for the build in
# ``optimize``; its pid is checked after, in case it died before the prctl.
_ORPHAN_GUARD = (
    "import ctypes, os, signal, sys\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "    if os.getppid() != int(sys.argv[2]):\n"
    "        os._exit(1)\n"
)
_OPTIMIZE = (
    "import sys\n"
    "from qdrant_edge import EdgeShard\n"
    "shard = EdgeShard.load(sys.argv[1])\n"
    "shard.optimize()\n"
    "shard.close()\n"
)


# One graph up to this many points (the settings' edge_segment_points). A build
# holds about 12.4 KB a point (the segment it reads and the one it writes, both
# mapped, and its heap): at 545,526 points (100k files) in graphs of at most
# 400k its peak was 4.95 GB against 6.71 in one graph, for 470 s of CPU against
# 530, and with each graph searched with its share of the candidates
# (query.hnsw_ef) hybrid p50 11.1 ms for new questions and 8.1 again, against
# 15.5 and 12.2, recall@10 against exact 0.999 both (bench/segments.py, Intel
# Xeon with AMX). 600k held 7.35 GB in a 200k-file cold run; the goal is 6.
SEGMENT_POINTS = 400_000

# Points written since the index was last built (an upper bound of those
# outside it: an update of an indexed point counts too).
WRITTEN_FILE = "mdindex_written.json"


def written(path: Path) -> int | None:
    """The count in the shard's ``WRITTEN_FILE``; None when there is none (a
    shard made before it was kept) or it cannot be read."""
    try:
        value = load_json(path / WRITTEN_FILE, 4096).get("points")
    except (OSError, ValueError, AttributeError):
        return None
    return value if type(value) is int and value >= 0 else None


def record_written(path: Path, points: int) -> None:
    """Set the count; a count that cannot be written is only logged (it decides
    when to build an index, nothing of the points)."""
    tmp = path / (WRITTEN_FILE + ".tmp")
    try:
        tmp.unlink(missing_ok=True)  # a FIFO there held the write; a link led out
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps({"points": points}))
        tmp.replace(path / WRITTEN_FILE)
    except OSError as exc:
        log.debug("cannot record the points written to %s: %s", path, exc)


def add_written(path: Path, points: int) -> None:
    """Count ``points`` more written (each lands in a plain segment)."""
    if points:
        record_written(path, (written(path) or 0) + points)


def graphs(path: Path) -> int:
    """How many segments of the shard at ``path`` have an HNSW index on their
    dense vector (each segment's ``segment.json`` records its vectors' index)."""
    count = 0
    for record in (path / "segments").glob("*/segment.json"):
        try:
            # the bounded reader: a FIFO there held status and every sync for
            # ever, and '[' * 100000 raised RecursionError out of json
            index = load_json(record)["config"]["vector_data"][""]["index"]["type"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        count += index == "hnsw"
    return count


def has_graph(path: Path) -> bool:
    return graphs(path) > 0


def unindexed(path: Path, points: int) -> int:
    """How many of the shard's ``points`` may be outside its dense index: all of
    them before one is built, then those written since (``WRITTEN_FILE``; a
    shard with a graph but no count is taken as indexed)."""
    if not has_graph(path):
        return points
    count = written(path)
    return min(count if count is not None else 0, points)


def wants_index(path: Path, points: int, config: dict[str, Any], index_min_points: int) -> bool:
    """At least ``index_min_points`` points, and enough of them outside the
    index (``unindexed``): a tenth of the store, and no less than a segment the
    optimizer would index; or a whole bounded segment (``segment_points``:
    beyond 10 segments, a tenth is more). ``config``: the shard's creation record."""
    if points < index_min_points:
        return False
    outside = unindexed(path, points)
    least = _points(config, (config.get("optimizers") or {}).get("indexing_threshold") or 10_000)
    bound = segment_points(config) or points
    return outside >= max(min(points // 10, bound), least)


def segment_points(config: dict[str, Any]) -> int:
    """The most points the optimizer puts in one segment (its ``max_segment_size``
    is in KB of dense vectors); 0 when it has no bound (a store made before,
    or a record that is not ours)."""
    try:
        return _points(config, (config.get("optimizers") or {}).get("max_segment_size") or 0)
    except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0


def _points(config: dict[str, Any], kb: Any) -> int:
    """The points whose dense vectors take ``kb`` KB (Qdrant's unit for segment
    sizes: 1 KB is 256 floats)."""
    return max(int(kb), 0) * 1024 // (4 * int(config["vectors"][""]["size"]))


def seal_due(path: Path, bound: int, after: int = 0) -> bool:
    """Whether the points outside the index fill a segment of ``bound`` points
    (``segment_points``), to be built now while writes wait; ``after``: not
    before this many (a build that gave way is not tried again at every batch)."""
    return bound > 0 and (written(path) or 0) >= max(bound, after)


def optimize(path: Path, give_way: Callable[[], bool]) -> bool:
    """Optimize the (closed) shard at ``path`` in a child process; it is killed
    as soon as ``give_way()`` says so. True when it finished."""
    log.info("building the search index of %s in a child process", path)
    give_back_heap()  # what the closed shard held, given back while the child runs
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_GUARD + _OPTIMIZE, str(path), str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    gave_way = False
    try:
        while child.poll() is None:
            if give_way():
                child.kill()
                gave_way = True
                log.info("index build gave way after %.1fs", time.monotonic() - started)
                break
            time.sleep(0.1)
    finally:
        if child.poll() is None:
            child.kill()
        _, err = child.communicate()
    if child.returncode == 0:
        log.info("search index built in %.1fs", time.monotonic() - started)
        record_written(path, 0)
    elif child.returncode > 0:
        log.warning("index build failed: %s", err.decode(errors="replace")[-300:].strip())
    elif not gave_way:  # the kernel's OOM killer, or a person: said, not taken for a give-way
        log.warning("index build killed by signal %d (out of memory?)", -child.returncode)
    finished: bool = child.returncode == 0
    return finished
