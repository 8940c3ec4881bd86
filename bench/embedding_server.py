"""Embedding through a server against embedding in the process, on one machine.

    python bench/embedding_server.py [--corpus DIR] [--chunks 2000] [--infinity PATH]

Starts infinity-emb (``.venv-infinity/bin/infinity_emb``, as .ci/run makes it,
or ``--infinity``) on loopback as the tests do (``tests/embedding/server.py``) serving the packaged model, then embeds the
same corpus chunks (heading strategy) three ways, each after a warm-up:

- in the process, with the backend the calibration chose on this machine;
- through the server with mdindex's defaults (128 texts per request, 4 in flight);
- through the server one request at a time.

Each row: chunks/s, the ratio to in-process, and the mean cosine of its vectors
to in-process's (the quality gate asks >= 0.995). Both sides share this
machine's cores, so the figure is the cost of the HTTP path, not what a
separate GPU server would give; the note under the table says that.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, corpus_dir, load_texts, offline, table, write_json


def timed(embed: Any, texts: list[str]) -> tuple[float, np.ndarray]:
    embed(texts[:64])  # warm-up
    start = time.perf_counter()
    vectors = embed(texts)
    return time.perf_counter() - start, np.asarray(vectors)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--infinity", default=str(REPO / ".venv-infinity" / "bin" / "infinity_emb"))
    args = ap.parse_args()
    offline()
    exe = Path(args.infinity)
    if not exe.exists():
        sys.exit(f"{exe} not found: make it as .ci/run does, or pass --infinity")
    # the tests' server, started the same way (tests/embedding/server.py)
    os.environ["MDINDEX_TEST_INFINITY"] = str(exe)
    sys.path.insert(0, str(REPO))
    from backends import cpu_line
    from mdindex.chunking import Chunker
    from mdindex.config import DEFAULT_MODEL
    from mdindex.documents.parsing import parse_document
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import load_counter, resolve_model
    from mdindex.embedding.remote import RemoteEmbedder
    from tests.embedding.server import infinity

    cpu = cpu_line()
    print(cpu)
    info = resolve_model(DEFAULT_MODEL)
    chunker = Chunker(load_counter(info), "heading")
    texts = [
        c.text
        for p, t in load_texts(corpus_dir(args.corpus))
        for c in chunker.chunk(parse_document(t, p))
    ]
    random.Random(7).shuffle(texts)
    texts = texts[: args.chunks]
    cache = Path(tempfile.mkdtemp(prefix="mdindex-embedding-server-"))

    local = ModelEmbedder(info, device="cpu", cache_dir=cache)
    local.load()
    assert local.choice is not None
    local_s, reference = timed(local.embed, texts)
    rows: list[dict[str, Any]] = [
        {
            "how": f"in process ({local.choice.name})",
            "chunks_per_s": len(texts) / local_s,
            "ratio": 1.0,
            "mean_cosine": 1.0,
        }
    ]
    log = Path(tempfile.mkdtemp(prefix="mdindex-infinity-")) / "infinity.log"
    with infinity({"all-MiniLM-L6-v2": info.path}, log, key=None) as url:
        for how, batch, concurrency in (
            ("server, 128 per request, 4 in flight", 128, 4),
            ("server, 128 per request, 1 in flight", 128, 1),
        ):
            remote = RemoteEmbedder(
                url,
                "all-MiniLM-L6-v2",
                local=info,
                batch=batch,
                concurrency=concurrency,
                cache_dir=cache,
                key="",
            )
            remote.load()
            secs, vectors = timed(remote.embed, texts)
            remote.close()
            rows.append(
                {
                    "how": how,
                    "chunks_per_s": len(texts) / secs,
                    "ratio": local_s / secs,
                    "mean_cosine": float(np.mean(np.sum(vectors * reference, axis=1))),
                }
            )
    print(f"{len(texts)} corpus chunks; infinity-emb (torch engine, fp32) on this machine")
    print(table(rows, ["how", "chunks_per_s", "ratio", "mean_cosine"]))
    print(
        "The server shares this machine's cores: what is measured is the HTTP path's cost. "
        "A GPU server embeds thousands of chunks/s, so the indexer's own work (planning, "
        "the store) becomes the limit."
    )
    write_json("embedding_server", {"cpu": cpu, "chunks": len(texts), "rows": rows})


if __name__ == "__main__":
    main()
