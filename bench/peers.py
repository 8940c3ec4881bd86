"""mdindex against LangChain's indexing API and LlamaIndex's IngestionPipeline, in one run.

    python bench/peers.py [--corpus DIR] [--edits 10] [--pipelines mdindex,langchain,llamaindex]

Each pipeline indexes its own copy of the folder into qdrant-client local
mode with the same model (all-MiniLM-L6-v2, batch 16: mdindex's CPU default,
and the fastest of 16, 32 and 64 on a 2-core CPU) and the same chunk token
limit (254, overlap 32), three times: from cold, a no-op re-run, and a
re-run after editing one paragraph in each of --edits files. Each phase is a
fresh process, as a scheduled indexing job would run, so start-up and model
loading count where a pipeline needs them; state (record manager, docstore,
mdindex's state) persists between phases on disk. Prints wall times, chunks
embedded and peak RSS with ratios to mdindex, and writes the table as JSON.
Needs the `bench` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, offline, table, vm_hwm_mb, write_json

LIMIT = 254
OVERLAP = 32
BATCH = 16


def edit_files(root: Path, count: int) -> list[Path]:
    """Change one paragraph in each of ``count`` files, the same ones for every pipeline."""
    edited = []
    for path in sorted(root.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        paras = text.split("\n\n")
        for i in range(len(paras) - 1, 0, -1):
            p = paras[i]
            if len(p) > 80 and not p.lstrip().startswith(("#", "```", "{{", "-", "|", "<")):
                paras[i] = p + " This sentence was added by the peer benchmark."
                path.write_text("\n\n".join(paras), encoding="utf-8")
                edited.append(path)
                break
        if len(edited) == count:
            break
    return edited


# -- the pipelines, each: setup(work) -> run() -> chunks embedded by that run ----------


def setup_mdindex(
    work: Path, root: Path, model_path: str, precision: str = "auto", backend: str = "auto"
) -> Callable[[], int]:
    from mdindex.config import load_settings
    from mdindex.runtime import make_indexer

    settings = load_settings(
        {
            "precision": precision,
            "backend": backend,
            "roots": [str(root)],
            "state_dir": str(work / "state"),
            # a cache of its own: the cold run pays the ONNX export and the backend
            # measurement, as a new user's first run does
            "cache_dir": str(work / "cache"),
            "device": "cpu",
            "batch_size": BATCH,
            "max_tokens": LIMIT,
            "overlap_tokens": OVERLAP,
        }
    )

    def run() -> int:
        # as `mdindex backfill` does it: the model loads only if something needs embedding
        indexer = make_indexer(settings)
        try:
            return indexer.backfill().chunks_embedded
        finally:
            indexer.close()

    return run


def _markdown_files(root: Path) -> list[tuple[str, str]]:
    return [(str(p), p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.md"))]


def setup_langchain(work: Path, root: Path, model_path: str) -> Callable[[], int]:
    from langchain_classic.indexes import SQLRecordManager, index
    from langchain_core.documents import Document
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_qdrant import QdrantVectorStore
    from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter
    from qdrant_client import QdrantClient, models
    from transformers import AutoTokenizer

    counted = {"n": 0}

    class Counting(HuggingFaceEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            counted["n"] += len(texts)
            return super().embed_documents(texts)

    emb = Counting(
        model_name=model_path,
        model_kwargs={"device": "cpu"},
        encode_kwargs={"normalize_embeddings": True, "batch_size": BATCH},
    )
    emb.embed_documents(["warm up"])
    client = QdrantClient(path=str(work / "qdrant"))
    if not client.collection_exists("lc"):
        client.create_collection(
            "lc", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE)
        )
    store = QdrantVectorStore(client=client, collection_name="lc", embedding=emb)
    manager = SQLRecordManager("qdrant/lc", db_url=f"sqlite:///{work / 'records.sqlite'}")
    manager.create_schema()
    headers = MarkdownHeaderTextSplitter([("#" * i, f"h{i}") for i in range(1, 7)])
    tokens = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        AutoTokenizer.from_pretrained(model_path), chunk_size=LIMIT, chunk_overlap=OVERLAP
    )

    def run() -> int:
        counted["n"] = 0
        docs: list[Document] = []
        for source, text in _markdown_files(root):
            parts = headers.split_text(text)
            for part in parts:
                part.metadata["source"] = source
            docs.extend(tokens.split_documents(parts))
        index(
            docs,
            manager,
            store,
            cleanup="incremental",
            source_id_key="source",
            batch_size=BATCH * 4,
        )
        return counted["n"]

    return run


def setup_llamaindex(work: Path, root: Path, model_path: str) -> Callable[[], int]:
    from llama_index.core import Document
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import MarkdownNodeParser, TokenTextSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from transformers import AutoTokenizer

    counted = {"n": 0}

    class Counting(HuggingFaceEmbedding):
        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            counted["n"] += len(texts)
            return super()._get_text_embeddings(texts)

    emb = Counting(
        model_name=model_path, device="cpu", embed_batch_size=BATCH, max_length=256, normalize=True
    )
    emb.get_text_embedding("warm up")
    hf_tok = AutoTokenizer.from_pretrained(model_path)
    store = QdrantVectorStore(client=QdrantClient(path=str(work / "qdrant")), collection_name="li")
    docstore_path = work / "docstore.json"
    docstore = (
        SimpleDocumentStore.from_persist_path(str(docstore_path))
        if docstore_path.exists()
        else SimpleDocumentStore()
    )
    pipeline = IngestionPipeline(
        transformations=[
            MarkdownNodeParser(),
            TokenTextSplitter(
                chunk_size=LIMIT,
                chunk_overlap=OVERLAP,
                tokenizer=lambda t: hf_tok.encode(t, add_special_tokens=False),
            ),
            emb,
        ],
        docstore=docstore,
        vector_store=store,
        docstore_strategy=DocstoreStrategy.UPSERTS,
    )

    def run() -> int:
        counted["n"] = 0
        docs = [
            Document(text=text, id_=source, metadata={"file_path": source})
            for source, text in _markdown_files(root)
        ]
        pipeline.run(documents=docs)
        docstore.persist(str(docstore_path))
        return counted["n"]

    return run


SETUPS: dict[str, Callable[[Path, Path, str], Callable[[], int]]] = {
    # the default: the backend that finishes each run first, load included
    "mdindex": setup_mdindex,
    # torch forced: every run loads it (the choice by speed alone, before issue 28)
    "mdindex-torch": lambda w, r, m: setup_mdindex(w, r, m, backend="torch"),
    "mdindex-fp32": lambda w, r, m: setup_mdindex(w, r, m, "fp32"),
    "langchain": setup_langchain,
    "llamaindex": setup_llamaindex,
}


def worker(name: str, work: Path, corpus: Path, phase: str, edits: int) -> None:
    """One phase of one pipeline, in a fresh process as a scheduled job would run."""
    offline()
    from mdindex.config import DEFAULT_MODEL
    from mdindex.embedding.model import resolve_model

    model_path = str(resolve_model(DEFAULT_MODEL).path)
    root = work / "docs"
    if phase == "cold":
        shutil.copytree(corpus, root, ignore=shutil.ignore_patterns("licenses", "*.txt"))
    elif phase == "edit":
        edit_files(root, edits)
    t = time.perf_counter()
    run = SETUPS[name](work, root, model_path)
    setup_s = time.perf_counter() - t
    t = time.perf_counter()
    embedded = run()
    run_s = time.perf_counter() - t
    out = {"setup_s": setup_s, "run_s": run_s, "embedded": embedded, "peak_rss_mb": vm_hwm_mb()}
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--pipelines", default="mdindex,mdindex-torch,langchain,llamaindex")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    args = ap.parse_args()
    corpus = corpus_dir(args.corpus)
    if args.worker:
        worker(args.worker, Path(args.work), corpus, args.phase, args.edits)
        return
    rows = []
    for name in args.pipelines.split(","):
        print(f"running {name} ...", file=sys.stderr)
        work = Path(tempfile.mkdtemp(prefix=f"peer-{name}-"))
        row: dict[str, Any] = {"pipeline": name, "peak_rss_mb": 0.0}
        for phase in ("cold", "noop", "edit"):
            t = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    name,
                    "--work",
                    str(work),
                    "--phase",
                    phase,
                    "--corpus",
                    str(corpus),
                    "--edits",
                    str(args.edits),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            wall = time.perf_counter() - t
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(f"{name} {phase} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                break
            got = json.loads(lines[-1][len("RESULT ") :])
            row[f"{phase}_s"] = wall
            row[f"{phase}_run_s"] = got["run_s"]
            row[f"{phase}_embedded"] = got["embedded"]
            row["peak_rss_mb"] = max(row["peak_rss_mb"], got["peak_rss_mb"])
        else:
            rows.append(row)
        shutil.rmtree(work, ignore_errors=True)
    base = next((r for r in rows if r["pipeline"] == "mdindex"), None)
    for r in rows:
        for phase in ("cold", "noop", "edit"):
            r[f"{phase}_x"] = r[f"{phase}_s"] / base[f"{phase}_s"] if base else None
    cols = [
        "pipeline",
        "cold_s",
        "cold_x",
        "cold_embedded",
        "noop_s",
        "noop_x",
        "noop_embedded",
        "edit_s",
        "edit_x",
        "edit_embedded",
        "peak_rss_mb",
    ]
    print(table(rows, cols))
    print("(each phase is a whole process, as a scheduled job runs: start-up, model load if the")
    print(" pipeline needs one, the run; _x is the pipeline's time over mdindex's)")
    print(table(rows, ["pipeline", "cold_run_s", "noop_run_s", "edit_run_s"]))
    print("(the same phases timed inside the process, after start-up)")
    print(
        f"written {write_json('peers', {'rows': rows, 'corpus': str(corpus), 'edits': args.edits})}"
    )


if __name__ == "__main__":
    main()
