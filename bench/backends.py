"""Embedding backends on this CPU: speed and quality against torch fp32, in one process.

    python bench/backends.py [--corpus DIR] [--chunks 1000] [--queries 200] [--rounds 2]

Prints the CPU (model, the flags that decide bf16 and int8 speed, threads),
then embeds the corpus's chunks (heading strategy) with plain
sentence-transformers ``encode`` in fp32 (the reference) and with each
candidate: torch fp32 and bf16 through mdindex's direct forward, the ONNX
export on onnxruntime in fp32, and its int8 dynamic quantisation. Backends
run in turns, ``--rounds`` times, and the faster round counts. For each:
chunks/s, the speed-up over the reference, mean cosine to the reference's
vectors and top-10 neighbour agreement for ``--queries`` queries. A backend
passes the gate with mean cosine >= 0.995 and agreement >= 0.97.

Then the default: a fresh cache folder and ``precision = backend = auto``,
as a new user gets, so the calibration of ``mdindex.embedding.calibration`` runs; the
row says what it chose, how long the measurement took, and the chosen
backend's speed here as a share of the fastest backend that passes the gate
(goal >= 0.95).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, load_texts, offline, raw_encode, table, write_json

GATE_COSINE = 0.995
GATE_AGREEMENT = 0.97


def cpu_line() -> str:
    from mdindex.embedding.machine import cpu_identity

    ident = cpu_identity()
    return f"CPU: {ident['cpu']}, {ident['threads']} threads, flags: {ident['flags'] or 'none of amx/avx512_bf16/avx2'}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    offline()
    from mdindex.chunking import Chunker
    from mdindex.config import DEFAULT_MODEL
    from mdindex.documents.parsing import parse_document
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.engines import OnnxRunner
    from mdindex.embedding.model import load_counter, resolve_model
    from mdindex.embedding.onnx_export import find_export

    print(cpu_line())
    info = resolve_model(DEFAULT_MODEL)
    counter = load_counter(info)
    chunker = Chunker(counter, "heading")
    texts = [
        c.text
        for p, t in load_texts(corpus_dir(args.corpus))
        for c in chunker.chunk(parse_document(t, p))
    ]
    rng = random.Random(7)
    rng.shuffle(texts)
    texts = texts[: args.chunks]
    queries = [" ".join(t.split()[:12]) for t in rng.sample(texts, min(args.queries, len(texts)))]

    work = Path(tempfile.mkdtemp(prefix="mdindex-backends-"))
    # The default first, as a new user's first load: calibration in a fresh cache.
    start = time.perf_counter()
    default = ModelEmbedder(info, device="cpu", batch_size=args.batch_size, cache_dir=work)
    default.load()
    first_load_s = time.perf_counter() - start
    assert default.choice is not None
    print(f"default: {default.choice.name} ({default.choice.reason})", file=sys.stderr)

    bs = args.batch_size
    embedders: dict[str, Callable[[list[str]], Any]] = {}
    reference = "st-encode fp32"
    fp32 = ModelEmbedder(info, device="cpu", batch_size=bs, precision="fp32", backend="torch")
    embedders[reference] = partial(raw_encode, fp32)
    embedders["torch-fp32"] = fp32.embed
    bf16 = ModelEmbedder(info, device="cpu", batch_size=bs, precision="bf16", backend="torch")
    embedders["torch-bf16"] = bf16.embed
    onnx = ModelEmbedder(info, device="cpu", batch_size=bs, backend="onnx", cache_dir=work)
    embedders["onnx-fp32"] = onnx.embed
    export = find_export(info, work)
    if export is not None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        int8_path = work / "int8.onnx"
        quantize_dynamic(str(export.path), str(int8_path), weight_type=QuantType.QInt8)
        int8 = ModelEmbedder(info, device="cpu", batch_size=bs, backend="onnx", cache_dir=work)
        int8.load()
        assert int8.loaded is not None  # the same path, int8 weights
        int8.loaded.engine = OnnxRunner(int8_path, export.inputs)
        embedders["onnx-int8"] = int8.embed

    for encode in embedders.values():
        encode(texts[:bs])  # load and warm up
    secs: dict[str, float] = dict.fromkeys(embedders, float("inf"))
    vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for _ in range(args.rounds):
        for name, encode in embedders.items():
            t = time.perf_counter()
            v = encode(texts)
            secs[name] = min(secs[name], time.perf_counter() - t)
            vectors[name] = (np.asarray(v, dtype=np.float32), np.asarray(encode(queries)))
            print(f"{name}: {len(texts) / secs[name]:.1f} chunks/s", file=sys.stderr)

    base_v, base_q = vectors[reference]
    base_top = np.argsort(-(base_q @ base_v.T), axis=1)[:, :10]
    rows: list[dict[str, Any]] = []
    for name, (v, q) in vectors.items():
        cos = float(np.mean(np.sum(v * base_v, axis=1)))
        top = np.argsort(-(q @ v.T), axis=1)[:, :10]
        agree = float(
            np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, base_top, strict=True)])
        )
        speed = len(texts) / secs[name]
        rows.append(
            {
                "embedder": name,
                "chunks_per_s": speed,
                "speedup": speed / (len(texts) / secs[reference]),
                "mean_cosine": cos,
                "top10_agreement": agree,
                "passes_gate": cos >= GATE_COSINE and agree >= GATE_AGREEMENT,
            }
        )
    passing = [r for r in rows if r["passes_gate"] and r["embedder"] != reference]
    fastest = max(passing, key=lambda r: r["chunks_per_s"])
    chosen = next(r for r in rows if r["embedder"] == default.choice.name)
    share = chosen["chunks_per_s"] / fastest["chunks_per_s"]
    columns = [
        "embedder",
        "chunks_per_s",
        "speedup",
        "mean_cosine",
        "top10_agreement",
        "passes_gate",
    ]
    print(table(rows, columns))
    print(
        f"{len(texts)} chunks, {len(queries)} queries, batch {bs}, best of {args.rounds} rounds; "
        f"gate: cosine >= {GATE_COSINE}, agreement >= {GATE_AGREEMENT}"
    )
    print(
        f"default (auto): {default.choice.name}, chosen in a first load of {first_load_s:.1f} s "
        f"(export and measurement included); {share:.3f} of the fastest passing "
        f"({fastest['embedder']}, {fastest['chunks_per_s']:.1f} chunks/s) (goal >= 0.95)"
    )
    print(f"calibration measured: {default.choice.chunks_per_s}")
    result = {
        "cpu": cpu_line(),
        "rows": rows,
        "chunks": len(texts),
        "queries": len(queries),
        "default": default.choice.as_dict(),
        "default_first_load_s": first_load_s,
        "default_share_of_fastest": share,
        "fastest": fastest["embedder"],
    }
    print(f"written {write_json('backends', result)}")


if __name__ == "__main__":
    main()
