"""What MCP adds to a search: round trips over stdio and HTTP against the daemon's own /search.

    python bench/mcp_latency.py [--corpus DIR] [--queries 60]

Indexes the corpus with `mdindex backfill`, starts `mdindex watch` on it (the
model loaded once, in the daemon), then asks the same queries, each a fresh
round trip, three ways: the daemon's `/search` as `mdindex search` asks it
(its Unix socket, its token), `search` through MCP's streamable HTTP at the
daemon's `/mcp`, and `search` through `mdindex mcp` over stdio (which, with a
daemon holding the store, asks the daemon). Prints p50/p95 of each and the
MCP layer's cost at p50; writes bench/results/mcp.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, offline, table, write_json


def queries(corpus: Path, n: int) -> list[str]:
    """Headings of the corpus's files: questions a reader might type."""
    out: list[str] = []
    for path in sorted(corpus.rglob("*.md")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = re.match(r"^#{1,3} (.{8,80})$", line.strip())
            if m:
                out.append(m.group(1))
                break
        if len(out) == n:
            break
    return out


def stats(times: list[float]) -> dict[str, float]:
    rest = sorted(times[1:])
    return {
        "p50_ms": 1000 * statistics.median(rest),
        "p95_ms": 1000 * rest[min(len(rest) - 1, int(len(rest) * 0.95))],
    }


async def interleaved(direct: Any, http: Any, stdio: Any, qs: list[str]) -> dict[str, list[float]]:
    """Each query asked the three ways in turn, so drift in the machine's speed
    weighs on all three alike."""
    times: dict[str, list[float]] = {"direct": [], "http": [], "stdio": []}
    async with http() as h, stdio() as s:
        for q in qs:
            t = time.perf_counter()
            await asyncio.to_thread(direct, q)
            times["direct"].append(time.perf_counter() - t)
            for name, client in (("http", h), ("stdio", s)):
                t = time.perf_counter()
                result = await client.call_tool("search", {"query": q, "k": 5})
                times[name].append(time.perf_counter() - t)
                assert not result.is_error, result
    return times


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--store", default="edge", help="the daemon's embedded engine (edge: steadier)")
    args = ap.parse_args()
    offline()
    corpus = corpus_dir(args.corpus)
    work = Path(tempfile.mkdtemp(prefix="mdindex-mcp-"))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "MDINDEX_STATE_DIR": str(work),
        "MDINDEX_HTTP_PORT": "0",
        "MDINDEX_STORE": args.store,
    }
    mdindex = [sys.executable, "-m", "mdindex"]
    subprocess.run(
        [*mdindex, "backfill", str(corpus), "--json"], env=env, check=True, capture_output=True
    )
    daemon = subprocess.Popen([*mdindex, "watch", str(corpus)], env=env, stderr=subprocess.DEVNULL)
    try:
        from mdindex.config import load_settings
        from mdindex.query.daemon import find_daemon

        settings = load_settings(
            {"state_dir": str(work), "roots": [str(corpus)], "store": args.store}
        )
        deadline = time.monotonic() + 600
        client = None
        while client is None or not client.url:
            assert time.monotonic() < deadline, "daemon did not start"
            time.sleep(0.5)
            try:
                client = find_daemon(settings, required=False)
                if client is not None:
                    client.ask("/status?wait=1&timeout=600", timeout=630)
            except Exception:
                client = None
        qs = queries(corpus, args.queries)

        daemon_client = client

        def direct(q: str) -> None:
            daemon_client.ask("/search?" + urllib.parse.urlencode({"q": q, "k": 5}))

        import httpx2
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        token = client.token
        url = client.url + "/mcp"

        class HttpClient:
            async def __aenter__(self) -> Any:
                self.http = httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {token}"}, timeout=60
                )
                await self.http.__aenter__()
                self.client = Client(streamable_http_client(url, http_client=self.http))
                return await self.client.__aenter__()

            async def __aexit__(self, *exc: Any) -> None:
                await self.client.__aexit__(*exc)
                await self.http.__aexit__(*exc)

        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mdindex", "mcp", str(corpus)], env=env
        )
        times = asyncio.run(interleaved(direct, HttpClient, lambda: Client(params), qs))
    finally:
        daemon.terminate()
        daemon.wait(60)
    rows = [
        {"path": "daemon /search (as mdindex search)", **stats(times["direct"])},
        {"path": "MCP over HTTP (/mcp)", **stats(times["http"])},
        {"path": "MCP over stdio (mdindex mcp -> daemon)", **stats(times["stdio"])},
    ]
    base = rows[0]["p50_ms"]
    for row in rows:
        row["added_p50_ms"] = row["p50_ms"] - base
    print(f"corpus {corpus}, {len(qs)} queries, k=5, store {args.store}")
    print(table(rows, ["path", "p50_ms", "p95_ms", "added_p50_ms"]))
    print(f"written {write_json('mcp', rows)}")


if __name__ == "__main__":
    main()
