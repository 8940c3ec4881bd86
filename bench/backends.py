"""Embedding backends on CPU: speed and quality against torch fp32, in one process.

    python bench/backends.py [--corpus DIR] [--chunks 1500] [--queries 200]

Embeds the corpus's chunks (heading strategy) with plain
sentence-transformers ``encode`` in fp32 (the reference), then with
mdindex's embedder in each precision, and reports chunks/s, the speed-up
over the reference, the mean cosine between each chunk's reference and
candidate vectors, and top-10 neighbour agreement for --queries queries. A backend may become the default only if mean cosine is
at least 0.995 and agreement at least 0.97.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, load_texts, offline, raw_encode, table, write_json

GATE_COSINE = 0.995
GATE_AGREEMENT = 0.97


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--chunks", type=int, default=1500)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    offline()
    from mdindex.chunking import Chunker
    from mdindex.config import DEFAULT_MODEL
    from mdindex.document import parse_document
    from mdindex.embedding import ModelEmbedder, load_counter, resolve_model

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

    results: dict[str, dict[str, float]] = {}
    vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    reference = "st-encode fp32"
    for name in (reference, "fp32", "bf16"):
        precision = name.split()[-1]
        emb = ModelEmbedder(info, device="cpu", batch_size=args.batch_size, precision=precision)
        encode = partial(raw_encode, emb) if name == reference else emb.embed
        encode(texts[: args.batch_size])  # load and warm up
        t = time.perf_counter()
        v = encode(texts)
        secs = time.perf_counter() - t
        q = encode(queries)
        vectors[name] = (v, q)
        results[name] = {"chunks_per_s": len(texts) / secs}
        print(f"{name}: {len(texts) / secs:.1f} chunks/s", file=sys.stderr)

    base_v, base_q = vectors[reference]
    base_top = np.argsort(-(base_q @ base_v.T), axis=1)[:, :10]
    rows = []
    for name, (v, q) in vectors.items():
        cos = float(np.mean(np.sum(v * base_v, axis=1)))
        top = np.argsort(-(q @ v.T), axis=1)[:, :10]
        agree = float(
            np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top, base_top, strict=True)])
        )
        r = results[name]
        r |= {
            "speedup": r["chunks_per_s"] / results[reference]["chunks_per_s"],
            "mean_cosine": cos,
            "top10_agreement": agree,
            "passes_gate": cos >= GATE_COSINE and agree >= GATE_AGREEMENT,
        }
        rows.append({"embedder": name, **r})
    print(
        table(
            rows,
            [
                "embedder",
                "chunks_per_s",
                "speedup",
                "mean_cosine",
                "top10_agreement",
                "passes_gate",
            ],
        )
    )
    print(
        f"{len(texts)} chunks, {len(queries)} queries; gate: cosine >= {GATE_COSINE}, agreement >= {GATE_AGREEMENT}"
    )
    print(
        f"written {write_json('backends', {'rows': rows, 'chunks': len(texts), 'queries': len(queries)})}"
    )


if __name__ == "__main__":
    main()
