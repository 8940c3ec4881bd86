"""Backfill cost on a corpus, against the embedding it cannot avoid, in one run.

    python bench/backfill.py [--corpus DIR] [--batch-size 64] [--noop-runs 3]

1. Cold backfill of the corpus (real model, embedded Qdrant) versus embedding
   the very same chunk texts alone with the same model and batch size: the
   overhead ratio is backfill time / embedding time (goal <= 1.10). Also
   against plain sentence-transformers ``encode`` of those texts (same batch
   size and precision): the end-to-end speed-up over the raw library.
2. A no-op re-run, timed as a whole `mdindex backfill` process (goal < 1.5 s).
3. Peak RSS of both.
4. The same cold backfill without sparse vectors (``sparse_vectors = false``),
   in a store of its own: throughput with sparse vectors as a share of
   dense-only (goal >= 0.95). Skip with --no-dense-only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    PEAK_RSS_PROBE,
    corpus_dir,
    offline,
    peak_rss_mb,
    probe_rss_mb,
    raw_encode,
    write_json,
)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--batch-size", type=int, default=None, help="default: 64 on CPU, 512 on CUDA")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (on a GPU: --device cuda)")
    ap.add_argument("--noop-runs", type=int, default=3)
    ap.add_argument("--strategy", default="heading")
    ap.add_argument("--no-dense-only", action="store_true", help="skip the dense-only backfill")
    args = ap.parse_args()
    offline()
    corpus = corpus_dir(args.corpus)

    from mdindex.config import load_settings
    from mdindex.index.summary import Summary
    from mdindex.index.verify import plan_all
    from mdindex.runtime import make_indexer

    work = Path(tempfile.mkdtemp(prefix="mdindex-bench-"))
    settings = load_settings(
        {
            "roots": [str(corpus)],
            "state_dir": str(work / "state"),
            "batch_size": args.batch_size,
            "strategy": args.strategy,
            "device": args.device,
        }
    )
    indexer = make_indexer(settings)
    embedder = indexer.embedder
    embedder.load()  # both sides start with the model loaded
    embedder.embed(["warm up"] * embedder.batch_size)  # type: ignore[attr-defined]
    # The very chunk texts the backfill will embed, without writing anything.
    with make_indexer(settings) as dry:
        texts = sorted({p.embed_input for w in plan_all(dry, Summary())[0] for p in w.points})

    def embed_alone() -> float:
        t = time.perf_counter()
        embedder.embed(texts)
        return time.perf_counter() - t

    def encode_alone() -> float:
        t = time.perf_counter()
        raw_encode(embedder, texts)
        return time.perf_counter() - t

    # Embedding alone is timed before and after the backfill, so drift in the
    # machine's speed during the run weighs on both sides alike.
    raw_before_s = encode_alone()
    before_s = embed_alone()
    t = time.perf_counter()
    summary = indexer.backfill()
    backfill_s = time.perf_counter() - t
    indexer.close()
    rss_backfill = peak_rss_mb()
    embed_s = (before_s + embed_alone()) / 2
    raw_s = (raw_before_s + encode_alone()) / 2

    cmd = [
        sys.executable,
        "-c",
        PEAK_RSS_PROBE,
        "backfill",
        str(corpus),
        "--state-dir",
        str(work / "state"),
        "--json",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    noop = []
    noop_rss = 0.0
    for _ in range(args.noop_runs):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        noop.append(time.perf_counter() - t)
        noop_rss = max(noop_rss, probe_rss_mb(out.stderr) or 0.0)
        assert '"chunks_embedded": 0' in out.stdout and '"points_upserted": 0' in out.stdout, (
            out.stdout
        )
    noop_s = statistics.median(noop)

    dense_only_s = None
    if not args.no_dense_only:
        plain = settings.model_copy(
            update={"sparse_vectors": False, "state_dir": work / "dense-only"}
        )
        # the model already loaded, as above
        with make_indexer(plain, embedder=embedder) as dense_indexer:
            t = time.perf_counter()
            dense_summary = dense_indexer.backfill()
            dense_only_s = time.perf_counter() - t
        assert dense_summary.chunks_embedded == summary.chunks_embedded

    result = {
        "files": summary.files_seen,
        "chunks_embedded": summary.chunks_embedded,
        "points": len(texts),
        "backfill_s": backfill_s,
        "embed_only_s": embed_s,
        "embed_only_before_s": before_s,
        "backfill_chunks_per_s": summary.chunks_embedded / backfill_s,
        "embed_only_chunks_per_s": len(texts) / embed_s,
        "overhead_ratio": backfill_s / embed_s * len(texts) / max(1, summary.chunks_embedded),
        "raw_encode_s": raw_s,
        "raw_encode_chunks_per_s": len(texts) / raw_s,
        "speedup_vs_raw_encode": raw_s / backfill_s * summary.chunks_embedded / max(1, len(texts)),
        "precision": embedder.precision,  # type: ignore[attr-defined]
        "noop_process_s": noop_s,
        "peak_rss_backfill_mb": rss_backfill,
        "peak_rss_noop_mb": noop_rss,
        "batch_size": embedder.batch_size,  # type: ignore[attr-defined]
        "device": args.device,
        "strategy": args.strategy,
        "dense_only_backfill_s": dense_only_s,
        "sparse_throughput_share": dense_only_s / backfill_s if dense_only_s else None,
    }
    print(f"corpus {corpus}: {result['files']} files, {result['chunks_embedded']} chunks embedded")
    print(
        f"backfill end to end: {backfill_s:.1f} s, {result['backfill_chunks_per_s']:.1f} chunks/s"
    )
    print(f"embedding alone:     {embed_s:.1f} s, {result['embed_only_chunks_per_s']:.1f} chunks/s")
    print(f"overhead ratio:      {result['overhead_ratio']:.3f} (goal <= 1.10)")
    print(
        f"raw ST encode:       {raw_s:.1f} s, {result['raw_encode_chunks_per_s']:.1f} chunks/s; "
        f"backfill is {result['speedup_vs_raw_encode']:.2f}x raw encode ({result['precision']})"
    )
    print(
        f"no-op re-run:        {noop_s:.2f} s as a whole process (median of {len(noop)}; goal < 1.5 s)"
    )
    print(
        f"peak RSS:            backfill {rss_backfill:.0f} MB, no-op {result['peak_rss_noop_mb']:.0f} MB"
    )
    if dense_only_s:
        print(
            f"without sparse:      {dense_only_s:.1f} s; with sparse vectors the backfill runs at "
            f"{result['sparse_throughput_share']:.3f} of dense-only throughput (goal >= 0.95)"
        )
    print(f"written {write_json('backfill', result)}")


if __name__ == "__main__":
    main()
