"""Settings changes under a running daemon: no search fails, little is re-embedded.

    python bench/versions.py [--corpus ../shared/corpus] [--keep 2]

Builds the corpus once (heading chunks, context prefix on: the cold build),
starts `mdindex watch` on it, and while a client searches through the daemon
without pause, changes the config and reloads the daemon (SIGHUP, what
`systemctl reload` sends) three times: the strategy (heading to token), then
the context prefix (off), then back to the first settings. For each switch:
searches answered, failed and empty, the time from the reload to the switch,
and chunks embedded against a cold build of that version (a cold build embeds
each distinct embedded text once). Goals: 0 failed and 0 empty; the prefix
change embeds only chunks whose embedded text changed; the switch back 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, offline, table, write_json

QUERIES = [
    "how do I install it",
    "ownership and borrowing rules",
    "configure the site menu",
    "error handling with Result",
    "templates and partials",
    "lifetimes of references",
    "taxonomies and tags",
    "cargo build release profile",
]

PHASES = [
    ("heading -> token", {"strategy": "token", "prepend_context": True}),
    ("context prefix off", {"strategy": "token", "prepend_context": False}),
    ("back to the first", {"strategy": "heading", "prepend_context": True}),
]


def write_config(path: Path, corpus: Path, state: Path, keep: int, **index: Any) -> None:
    lines = [
        f'roots = ["{corpus}"]',
        f'state_dir = "{state}"',
        f"keep_versions = {keep}",
        'log_level = "WARNING"',
    ]
    lines += [f"{k} = {json.dumps(v)}" for k, v in index.items()]
    path.write_text("\n".join(lines) + "\n")


def vector_keys(state: Path) -> set[str]:
    db = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        return {k for (k,) in db.execute("SELECT DISTINCT vector_key FROM points")}
    finally:
        db.close()


class Searcher(threading.Thread):
    """Searches through the daemon without pause; records every answer."""

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.log: list[tuple[float, str, str, float]] = []  # (time, outcome, strategy, s)
        self.running = True

    def run(self) -> None:
        i = 0
        while self.running:
            q = urllib.parse.urlencode({"q": QUERIES[i % len(QUERIES)], "k": 5})
            i += 1
            t = time.monotonic()
            try:
                hits = self.client.ask(f"/search?{q}")
                took = time.monotonic() - t
                if hits:
                    self.log.append((t, "answered", str(hits[0]["strategy"]), took))
                else:
                    self.log.append((t, "empty", "", took))
            except Exception as exc:
                self.log.append((t, "failed", repr(exc)[:80], time.monotonic() - t))
            time.sleep(0.05)

    def between(self, t0: float, t1: float) -> dict[str, Any]:
        out: dict[str, Any] = {"answered": 0, "failed": 0, "empty": 0}
        took = sorted(s for t, _, _, s in self.log if t0 <= t <= t1)
        for t, outcome, _, _ in self.log:
            if t0 <= t <= t1:
                out[outcome] += 1
        out["p50_ms"] = round(1000 * took[len(took) // 2]) if took else None
        out["p95_ms"] = round(1000 * took[int(0.95 * (len(took) - 1))]) if took else None
        return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--keep", type=int, default=2, help="keep_versions (2: the first is kept)")
    args = ap.parse_args()
    offline()
    from mdindex.config import load_settings
    from mdindex.embedding.machine import cpu_identity
    from mdindex.errors import StoreUnavailable
    from mdindex.query.daemon import find_daemon
    from mdindex.runtime import state_path, version_of
    from mdindex.versions.catalog import Catalog

    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-versions-bench-"))
    state, config = work / "state", work / "config.toml"
    first = {"strategy": "heading", "prepend_context": True}
    write_config(config, corpus, state, args.keep, **first)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MDINDEX_CONFIG": str(config)}

    def settings() -> Any:
        return load_settings(config=config)

    t = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "mdindex", "backfill", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    cold = json.loads(out.stdout)
    cold_s = time.monotonic() - t
    print(f"cold build: {cold['chunks_embedded']} chunks embedded in {cold_s:.1f}s")

    daemon = subprocess.Popen([sys.executable, "-m", "mdindex", "watch"], env=env)
    rows: list[dict[str, Any]] = []
    idle: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 300
        client = None
        while time.monotonic() < deadline:
            try:
                client = find_daemon(settings())
                if client is not None and client.ask("/status").get("phase") == "watching":
                    break
            except StoreUnavailable:
                pass  # still starting
            time.sleep(0.5)
        else:
            raise SystemExit("the daemon did not come up")
        searcher = Searcher(client)
        searcher.start()
        time.sleep(10)
        idle = searcher.between(0, time.monotonic())
        print(f"idle searches: p50 {idle['p50_ms']} ms, p95 {idle['p95_ms']} ms")
        for name, index in PHASES:
            held = set().union(
                *(
                    vector_keys(state_path(Catalog.load(settings()).settings_for(settings(), fp)))
                    for fp in Catalog.load(settings()).versions
                )
            )
            write_config(config, corpus, state, args.keep, **index)
            target = version_of(settings())
            known = Catalog.load(settings()).versions.get(target)
            before = known.embedded if known is not None else 0
            t0 = time.monotonic()
            daemon.send_signal(signal.SIGHUP)
            while Catalog.load(settings()).live != target:
                if daemon.poll() is not None:
                    raise SystemExit("the daemon died")
                time.sleep(0.1)
            switched = time.monotonic()
            time.sleep(2)  # searches right after the switch count too
            version = Catalog.load(settings()).versions[target]
            keys = vector_keys(state_path(settings()))
            counts = searcher.between(t0, time.monotonic())
            strategies = {s for t, o, s, _ in searcher.log if t >= switched + 1 and o == "answered"}
            rows.append(
                {
                    "switch": name,
                    "answered": counts["answered"],
                    "failed": counts["failed"],
                    "empty": counts["empty"],
                    "p50_ms": counts["p50_ms"],
                    "p95_ms": counts["p95_ms"],
                    "switch_s": round(switched - t0, 1),
                    "embedded": version.embedded - before,
                    "cold_build": len(keys),
                    "changed_texts": len(keys - held),
                    "answers_from": ",".join(sorted(strategies)),
                }
            )
            print(rows[-1])
        searcher.running = False
        searcher.join(10)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)

    print(f"\nCPU: {cpu_identity().get('cpu')}; corpus {corpus} ({cold['files_seen']} files)")
    print(f"cold build of the first version: {cold_s:.1f}s, {cold['chunks_embedded']} chunks")
    print(f"searches with nothing else running: p50 {idle['p50_ms']} ms, p95 {idle['p95_ms']} ms\n")
    print(
        table(
            rows,
            [
                "switch",
                "answered",
                "failed",
                "empty",
                "p50_ms",
                "p95_ms",
                "switch_s",
                "embedded",
                "cold_build",
                "changed_texts",
                "answers_from",
            ],
        )
    )
    print(
        "\nembedded: chunks the daemon embedded to build the version; cold_build: what a "
        "cold build embeds (its distinct embedded texts); changed_texts: those no kept "
        "version held (the least any build must embed)"
    )
    write_json(
        "versions",
        {"cpu": cpu_identity(), "cold_s": cold_s, "cold": cold, "idle": idle, "switches": rows},
    )


if __name__ == "__main__":
    main()
