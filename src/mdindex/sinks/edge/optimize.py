"""Building a shard's HNSW index, out of the way.

Edge has no background optimizer, and ``optimize()`` holds the GIL for its
whole run (about 0.5 ms a point here: 54 s for 100k), which would freeze the
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
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_OPTIMIZE = (
    "import sys\n"
    "from qdrant_edge import EdgeShard\n"
    "shard = EdgeShard.load(sys.argv[1])\n"
    "shard.optimize()\n"
    "shard.close()\n"
)


def wants_index(info: Any, config: dict[str, Any], index_min_points: int) -> bool:
    """At least ``index_min_points`` points, and enough of them unindexed: a
    tenth of the store, and no less than a segment the optimizer would index.
    ``info``: the shard's; ``config``: its creation record."""
    points, indexed = int(info.points_count), int(info.indexed_vectors_count)
    if points < index_min_points:
        return False
    threshold_kb = (config.get("optimizers") or {}).get("indexing_threshold") or 10_000
    segment_points = int(threshold_kb) * 1024 // (4 * int(config["vectors"][""]["size"]))
    return points - indexed >= max(points // 10, segment_points)


def optimize(path: Path, give_way: Callable[[], bool]) -> bool:
    """Optimize the (closed) shard at ``path`` in a child process; it is killed
    as soon as ``give_way()`` says so. True when it finished."""
    log.info("building the search index of %s in a child process", path)
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _OPTIMIZE, str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while child.poll() is None:
            if give_way():
                child.kill()
                log.info("index build gave way after %.1fs", time.monotonic() - started)
                break
            time.sleep(0.1)
    finally:
        if child.poll() is None:
            child.kill()
        _, err = child.communicate()
    if child.returncode == 0:
        log.info("search index built in %.1fs", time.monotonic() - started)
    elif child.returncode > 0:
        log.warning("index build failed: %s", err.decode(errors="replace")[-300:].strip())
    finished: bool = child.returncode == 0
    return finished
