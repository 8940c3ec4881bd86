"""Chunking throughput of the three strategies against chonkie and LangChain, in one process.

    python bench/chunking.py [--corpus DIR] [--runs 3] [--semantic-files 120]

Everyone uses the model's own tokenizer and the same limit (254 tokens, 32 of
overlap). Figures are MB/s of markdown (median of --runs) and ratios against
the peers measured in the same run. Needs the `bench` extra.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import corpus_dir, load_texts, median_time, offline, table, write_json

LIMIT = 254
OVERLAP = 32


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--semantic-files", type=int, default=120, help="files for the real-model semantic run"
    )
    args = ap.parse_args()
    offline()

    from mdindex.chunking import Chunker
    from mdindex.chunking.sentences import units
    from mdindex.config import DEFAULT_MODEL
    from mdindex.documents.parsing import parse_document
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import load_counter, resolve_model

    files = load_texts(corpus_dir(args.corpus))
    texts = [t for _, t in files]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    info = resolve_model(DEFAULT_MODEL)
    counter = load_counter(info, LIMIT)
    tok = counter.tokenizer
    rows: list[dict[str, object]] = []

    def record(name: str, seconds: float, chunks: int, note: str = "") -> None:
        rows.append({"pipeline": name, "MB/s": mb / seconds, "chunks": chunks, "note": note})
        print(f"{name:40s} {mb / seconds:6.2f} MB/s  {chunks} chunks", file=sys.stderr)

    # -- reference: plain tokenizers encode_batch with offset slicing
    def plain() -> int:
        n = 0
        for enc, text in zip(tok.encode_batch(texts, add_special_tokens=False), texts, strict=True):
            offs = enc.offsets
            for i in range(0, len(offs), LIMIT - OVERLAP):
                window = offs[i : i + LIMIT]
                _ = text[window[0][0] : window[-1][1]]
                n += 1
        return n

    secs, n = median_time(plain, args.runs)
    record("tokenizers encode_batch + slicing", secs, n, "no markdown awareness")

    # -- mdindex strategies (parsing included)
    def ours(strategy: str, embed: object = None) -> int:
        chunker = Chunker(counter, strategy, overlap_tokens=OVERLAP, embed=embed)  # type: ignore[arg-type]
        docs = [parse_document(t, p) for p, t in files]
        # batch mode, as the pipeline runs it: groups of 64 documents
        return sum(
            len(c) for i in range(0, len(docs), 64) for c in chunker.chunk_many(docs[i : i + 64])
        )

    secs, n = median_time(lambda: ours("token"), args.runs)
    record("mdindex token", secs, n, "verbatim, exact offsets, counts")
    token_rate = mb / secs
    secs, n = median_time(lambda: ours("heading"), args.runs)
    record("mdindex heading", secs, n, "sections + windows + counts")
    heading_rate = mb / secs

    # -- chonkie TokenChunker, batch mode
    try:
        from chonkie import TokenChunker

        chonkie = TokenChunker(tokenizer=tok, chunk_size=LIMIT, chunk_overlap=OVERLAP)
        secs, batches = median_time(
            lambda: chonkie.chunk_batch(texts, show_progress_bar=False), args.runs
        )
        chunks = [c for b in batches for c in b]
        over = sum(1 for c in chunks if counter.count(c.text) > LIMIT)
        exact = sum(
            1
            for t, b in zip(texts, batches, strict=True)
            for c in b
            if t[c.start_index : c.end_index] == c.text
        )
        record(
            "chonkie TokenChunker (batch)",
            secs,
            len(chunks),
            f"{over / len(chunks):.0%} over limit, {exact / len(chunks):.0%} exact slices",
        )
        chonkie_rate = mb / secs
    except ImportError:
        chonkie_rate = float("nan")
        print("chonkie not installed (pip install -e '.[bench]')", file=sys.stderr)

    # -- LangChain: MarkdownHeaderTextSplitter then its token splitter
    try:
        from langchain_text_splitters import (
            MarkdownHeaderTextSplitter,
            RecursiveCharacterTextSplitter,
        )
        from transformers import AutoTokenizer

        hf_tok = AutoTokenizer.from_pretrained(str(info.path))
        headers = [("#" * i, f"h{i}") for i in range(1, 7)]
        header_split = MarkdownHeaderTextSplitter(headers_to_split_on=headers)
        token_split = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
            hf_tok, chunk_size=LIMIT, chunk_overlap=OVERLAP
        )

        def langchain() -> int:
            n = 0
            for t in texts:
                docs = header_split.split_text(t)
                n += len(token_split.split_documents(docs))
            return n

        secs, n = median_time(langchain, args.runs)
        record("langchain header + token splitter", secs, n, "loses formatting, no offsets")
        lc_rate = mb / secs
        secs, n = median_time(
            lambda: sum(len(header_split.split_text(t)) for t in texts), args.runs
        )
        record("langchain header splitter alone", secs, n, "no size cap")
    except ImportError:
        lc_rate = float("nan")
        print("langchain-text-splitters not installed", file=sys.stderr)

    # -- semantic: MB/s with a cheap embedder, and sentences/s with the real model
    import numpy as np

    def cheap(batch: list[str]) -> np.ndarray:
        return np.ones((len(batch), 8), dtype=np.float32)

    secs, n = median_time(lambda: ours("semantic", cheap), args.runs)
    record("mdindex semantic (no-op embedder)", secs, n, "segmenting + grouping cost")

    embedder = ModelEmbedder(info, device="cpu", batch_size=64)
    subset = files[: args.semantic_files]
    sentences = [
        doc.text[s:e]
        for p, t in subset
        for doc in [parse_document(t, p)]
        for (s, e), _ in units(doc)
    ]
    embedder.embed(sentences[:64])  # load and warm up
    secs_raw, _ = median_time(lambda: embedder.embed(sentences), 1)
    chunker = Chunker(counter, "semantic", overlap_tokens=OVERLAP, embed=embedder)
    secs_sem, _n_sem = median_time(
        lambda: sum(len(c) for c in chunker.chunk_many([parse_document(t, p) for p, t in subset])),
        1,
    )
    raw_rate = len(sentences) / secs_raw
    sem_rate = len(sentences) / secs_sem
    print(
        f"semantic: {sem_rate:.0f} sentences/s vs {raw_rate:.0f} embedding each once",
        file=sys.stderr,
    )

    ratios = {
        "token_vs_chonkie": token_rate / chonkie_rate,
        "heading_vs_langchain_header_token": heading_rate / lc_rate,
        "semantic_vs_embed_each_sentence_once": sem_rate / raw_rate,
    }
    print()
    print(table(rows, ["pipeline", "MB/s", "chunks", "note"]))
    print()
    print(f"corpus: {len(files)} files, {mb:.2f} MB; limit {LIMIT}, overlap {OVERLAP}")
    print(
        f"semantic with the real model: {sem_rate:.0f} sentences/s, embedding each sentence "
        f"once: {raw_rate:.0f} sentences/s ({len(sentences)} sentences, {len(subset)} files)"
    )
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    out = write_json(
        "chunking",
        {
            "rows": rows,
            "ratios": ratios,
            "mb": mb,
            "files": len(files),
            "semantic_sentences_per_s": sem_rate,
            "embed_once_sentences_per_s": raw_rate,
        },
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
