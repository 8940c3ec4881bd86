"""Save-to-searchable latency of `mdindex watch`, and its idle CPU and memory.

    python bench/watch_latency.py [--edits 50] [--idle 30]

Runs the real daemon (real model, embedded Qdrant) as a subprocess on a
20-chunk file, makes one-paragraph edits, and times each from the moment the
save returns until /search finds the new paragraph. Then measures the
daemon's CPU use and RSS while idle. Goals: p50 <= quiet period + 300 ms,
idle CPU < 1 %, RSS < 600 MB.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import offline, write_json

WORDS = [
    "river",
    "stone",
    "lantern",
    "orchard",
    "copper",
    "meadow",
    "harbor",
    "violet",
    "engine",
    "canyon",
]


def section(i: int, marker: str = "") -> str:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40))
    return f"## Part {i}\n\nParagraph {i} {marker} talks about {words}.\n"


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--edits", type=int, default=50)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle measurement")
    ap.add_argument("--quiet-ms", type=int, default=300)
    args = ap.parse_args()
    offline()
    from mdindex.config import load_settings
    from mdindex.index.lock import lock_path, read_holder
    from mdindex.query.daemon import find_daemon

    work = Path(tempfile.mkdtemp(prefix="mdindex-watch-bench-"))
    root = work / "docs"
    root.mkdir()
    target = root / "notes.md"
    parts = [section(i) for i in range(20)]
    target.write_text("# Notes\n\n" + "\n".join(parts))
    state = work / "state"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "MDINDEX_QUIET_PERIOD_MS": str(args.quiet_ms),
        "MDINDEX_LOG_LEVEL": "WARNING",
    }
    daemon = subprocess.Popen(
        [sys.executable, "-m", "mdindex", "watch", str(root), "--state-dir", str(state)], env=env
    )
    try:
        client = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            holder = read_holder(lock_path(state, "mdindex"))
            if holder and holder.get("socket"):
                client = find_daemon(load_settings({"state_dir": str(state)}))
                status = client.ask("/status") if client is not None else {}
                if isinstance(status, dict) and status.get("points", 0) >= 21:
                    break
            time.sleep(0.2)
        else:
            raise SystemExit("daemon did not come up")

        latencies = []
        for i in range(args.edits):
            marker = f"zq{i}x"
            k = i % 20
            parts[k] = section(k, marker)
            tmp = root / ".notes.md.tmp"
            tmp.write_text("# Notes\n\n" + "\n".join(parts))
            os.replace(tmp, target)  # an editor's atomic save
            saved = time.perf_counter()
            # All sections read alike, so look at every hit, not just the first.
            query = urllib.parse.urlencode({"q": f"Paragraph {k} {marker}", "k": 25})
            while True:
                hits = client.ask(f"/search?{query}")
                if isinstance(hits, list) and any(marker in h["text"] for h in hits):
                    break
                if time.perf_counter() - saved > 30:
                    raise SystemExit(f"edit {i} never became searchable")
                time.sleep(0.02)
            latencies.append(time.perf_counter() - saved)
            time.sleep(0.2)

        time.sleep(3)  # let the last batch settle
        cpu0, t0 = proc_cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(args.idle)
        idle_cpu = (proc_cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - t0) * 100
        rss = proc_rss_mb(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        t = time.monotonic()
        code = daemon.wait(timeout=30)
        stop_s = time.monotonic() - t

    lat = sorted(latencies)
    p50 = statistics.median(lat)
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    result = {
        "edits": len(lat),
        "quiet_period_ms": args.quiet_ms,
        "p50_ms": p50 * 1000,
        "p95_ms": p95 * 1000,
        "max_ms": lat[-1] * 1000,
        "goal_p50_ms": args.quiet_ms + 300,
        "idle_cpu_percent": idle_cpu,
        "idle_rss_mb": rss,
        "sigterm_exit_code": code,
        "sigterm_stop_s": stop_s,
    }
    print(
        f"save-to-searchable over {len(lat)} edits of a 20-chunk file (quiet period {args.quiet_ms} ms):"
    )
    print(
        f"  p50 {result['p50_ms']:.0f} ms, p95 {result['p95_ms']:.0f} ms, max {result['max_ms']:.0f} ms "
        f"(goal p50 <= {result['goal_p50_ms']} ms)"
    )
    print(
        f"idle: CPU {idle_cpu:.2f} % over {args.idle:.0f} s, RSS {rss:.0f} MB (goals < 1 %, < 600 MB)"
    )
    print(f"SIGTERM: exit {code} after {stop_s:.2f} s")
    print(f"written {write_json('watch_latency', result)}")


if __name__ == "__main__":
    main()
