"""Search quality against gold answers: does a search find the passage that answers?

    python bench/retrieval.py [--evalsets ../shared/evalsets] [--sets anthropic-docs,chroma-chunking]
        [--strategies heading,token,semantic] [--modes dense,sparse,hybrid] [--context off,on]
        [--peers langchain,llamaindex,bm25] [--fusion rrf] [--questions N]

Each set (see ../shared/evalsets/README.md) is indexed with the real model
through mdindex's own command (`python -m mdindex backfill`, embedded Qdrant),
once per chunking strategy and context prefix; every question is then asked
through mdindex's own search call (`mdindex.index.search.search`, what the CLI and
the daemon run), with the model loaded once, in each mode. The peers run their
default markdown pipelines (bench/peers.py: LangChain's header and recursive
splitters, LlamaIndex's MarkdownNodeParser and token splitter, the same model
and token limits) and answer through their own Qdrant retrievers; their
chunks are located in the files to get offsets. BM25 alone is rank-bm25 over
mdindex's heading chunks.

Scores, per row:
- span level: recall@k (share of gold spans a hit in the top k overlaps),
  mrr@10 (1 / rank of the first hit overlapping a gold span);
- the anthropic cookbook's metrics at k=3: precision (hits overlapping a gold
  section / 3), recall (gold sections found / gold sections), mrr;
- chroma-chunking: token-level recall, precision and IoU of the top 5, as
  Chroma's evaluation computes them (over character ranges: the covered part
  of the excerpts, over the excerpts, over the retrieved text, over both);
- points and bytes of the index, and query latency p50/p95 (first query left out).

Prints a table per set and writes bench/results/retrieval.json. Needs the
`bench` extra (and rank-bm25 for the BM25 row).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import long_sections
from common import REPO, offline, table, write_json

EVALSETS = REPO.parent / "shared" / "evalsets"
CORPUS_FOLDER = {
    "anthropic-docs": "pages",
    "chroma-chunking": "corpora",
    "anthropic-flat": "pages",  # long sections (bench/long_sections.py)
    "chroma-headed": "corpora",
}
KS = (1, 3, 5, 10)
LIMIT = 254  # as bench/peers.py: the peers' chunk token limit and overlap
OVERLAP = 32

Hit = tuple[str, int, int]  # doc_path, char_start, char_end


# -- scores ---------------------------------------------------------------


def overlaps(hit: Hit, gold: dict[str, Any]) -> bool:
    path, start, end = hit
    return path == gold["doc_path"] and start < gold["char_end"] and gold["char_start"] < end


def union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def length(ranges: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in ranges)


def chroma_scores(hits: Sequence[Hit], golds: list[dict[str, Any]]) -> tuple[float, float, float]:
    """Recall, precision and IoU of the hits against the excerpts, as
    chunking_evaluation's _scores_from_dataset_and_retrievals computes them:
    numerator = union of the hits' intersections with the excerpts; precision
    over the summed length of the hits; IoU over that plus what they missed."""
    covered: dict[str, list[tuple[int, int]]] = {}
    for path, start, end in hits:
        for g in golds:
            if path == g["doc_path"]:
                s, e = max(start, g["char_start"]), min(end, g["char_end"])
                if s < e:
                    covered.setdefault(path, []).append((s, e))
    numerator = sum(length(union(r)) for r in covered.values())
    gold_len = sum(g["char_end"] - g["char_start"] for g in golds)
    missed = 0
    for g in golds:
        inside = [
            (max(s, g["char_start"]), min(e, g["char_end"]))
            for s, e in union(covered.get(g["doc_path"], []))
        ]
        missed += (g["char_end"] - g["char_start"]) - length([(s, e) for s, e in inside if s < e])
    retrieved = sum(end - start for _, start, end in hits)
    recall = numerator / gold_len if gold_len else 0.0
    precision = numerator / retrieved if retrieved else 0.0
    iou = numerator / (retrieved + missed) if retrieved + missed else 0.0
    return recall, precision, iou


def score(
    questions: list[dict[str, Any]], answers: list[list[Hit]], chroma: bool
) -> dict[str, float]:
    out: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        out.setdefault(key, []).append(value)

    for q, hits in zip(questions, answers, strict=True):
        golds = q["gold"]
        for k in KS:
            found = sum(any(overlaps(h, g) for h in hits[:k]) for g in golds)
            add(f"recall@{k}", found / len(golds))
        first = next(
            (i for i, h in enumerate(hits[:10]) if any(overlaps(h, g) for g in golds)), None
        )
        add("mrr@10", 0.0 if first is None else 1.0 / (first + 1))
        top3 = hits[:3]
        add("cb_precision@3", sum(any(overlaps(h, g) for g in golds) for h in top3) / 3)
        add("cb_recall@3", sum(any(overlaps(h, g) for h in top3) for g in golds) / len(golds))
        first3 = next((i for i, h in enumerate(top3) if any(overlaps(h, g) for g in golds)), None)
        add("cb_mrr@3", 0.0 if first3 is None else 1.0 / (first3 + 1))
        if chroma:
            r, p, iou = chroma_scores(hits[:5], golds)
            add("tok_recall@5", r)
            add("tok_precision@5", p)
            add("tok_iou@5", iou)
    return {k: statistics.fmean(v) for k, v in out.items()}


def latency(times: list[float]) -> dict[str, float]:
    rest = sorted(times[1:]) or times
    return {
        "p50_ms": 1000 * rest[len(rest) // 2],
        "p95_ms": 1000 * rest[min(len(rest) - 1, int(len(rest) * 0.95))],
    }


def folder_bytes(folder: Path) -> int:
    # blocks, not sizes: edge pre-allocates sparse files of hundreds of MB
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


# -- mdindex ----------------------------------------------------------------


def index_with_cli(
    corpus: Path,
    work: Path,
    strategy: str,
    context: bool,
    store: str,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`mdindex backfill` of the set, as a user runs it (``env_extra``: more
    MDINDEX_* settings, e.g. the model)."""
    env = {
        **os.environ,
        **(env_extra or {}),
        "MDINDEX_STORE": store,
        "HF_HUB_OFFLINE": "1",
        "MDINDEX_STRATEGY": strategy,
        "MDINDEX_PREPEND_CONTEXT": "true" if context else "false",
        "MDINDEX_STATE_DIR": str(work),
    }
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mdindex", "backfill", str(corpus), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode not in (0, 1):
        sys.exit(f"mdindex backfill failed: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    seconds = time.perf_counter() - t
    # a re-run over a kept --work folder changes nothing: then only the count is new
    points = summary["points_upserted"] or count_points(work, store)
    return {"index_s": seconds if summary["files_changed"] else None, "points": points}


def count_points(work: Path, store: str) -> int:
    from mdindex.config import load_settings
    from mdindex.runtime import make_store

    engine = make_store(load_settings({"state_dir": str(work), "store": store})).open()
    try:
        return engine.count()
    finally:
        engine.close()


class Mdindex:
    """mdindex's own search path, the model loaded once for every index."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        from mdindex.config import load_settings
        from mdindex.runtime import make_models

        self.settings = settings or {}  # e.g. the model, for every index it opens
        self.models = make_models(load_settings(self.settings))
        self.models.embedder.load()

    def ask(
        self,
        work: Path,
        corpus: Path,
        strategy: str,
        context: bool,
        questions: list[dict[str, Any]],
        mode: str,
        fusion: str,
        store_kind: str,
        collapse: str = "passages",
    ) -> tuple[list[list[Hit]], list[float]]:
        from mdindex.config import load_settings
        from mdindex.index import ranking
        from mdindex.index.search import Query, search
        from mdindex.runtime import make_store

        # the rule that keeps hits of one section: "off" (every window), "section"
        # (the best window of each section, the rule before passages), "passagesN"
        # (touching windows joined, at most N passages a section), "passages" (the default)
        default = (ranking.MAX_PASSAGES, ranking.DECAY, ranking._touch)
        if collapse == "section":
            ranking.MAX_PASSAGES, ranking._touch = 1, lambda passage, payload: False
        elif collapse.startswith("passages") and collapse != "passages":
            cap, _, decay = collapse.removeprefix("passages").partition("-decay")
            ranking.MAX_PASSAGES = int(cap) if cap else 10**6
            ranking.DECAY = float(decay) if decay else 1.0

        settings = load_settings(
            {
                **self.settings,
                "roots": [str(corpus)],
                "state_dir": str(work),
                "strategy": strategy,
                "prepend_context": context,
                "store": store_kind,
            }
        )
        store = make_store(settings).open()
        answers, times = [], []
        try:
            for q in questions:
                t = time.perf_counter()
                hits = search(
                    self.models.embedder,
                    self.models.planner.sparse,
                    store,
                    Query(
                        q["question"], k=10, mode=mode, fusion=fusion, per_section=collapse != "off"
                    ),
                    self.models.planner.query_prompt,
                    self.models.planner.model_languages,
                )
                times.append(time.perf_counter() - t)
                answers.append([(h["doc_path"], h["char_start"], h["char_end"]) for h in hits])
        finally:
            store.close()
            ranking.MAX_PASSAGES, ranking.DECAY, ranking._touch = default
        return answers, times

    def chunks(self, work: Path, corpus: Path, store_kind: str) -> list[tuple[Hit, str]]:
        """The stored chunks of an index, with their offsets (for BM25 alone)."""
        from mdindex.config import load_settings
        from mdindex.runtime import make_store

        settings = load_settings(
            {**self.settings, "roots": [str(corpus)], "state_dir": str(work), "store": store_kind}
        )
        store = make_store(settings).open()
        try:
            return [
                ((p["doc_path"], p["char_start"], p["char_end"]), p["text"])
                for _, p, _ in store.scroll(payload=["doc_path", "char_start", "char_end", "text"])
            ]
        finally:
            store.close()


# -- peers ------------------------------------------------------------------


def files(corpus: Path) -> list[tuple[str, str]]:
    from mdindex.documents.reading import decode

    return [
        (p.relative_to(corpus).as_posix(), decode(p.read_bytes()))
        for p in sorted(corpus.rglob("*.md"))
    ]


def locate(text: str, chunk: str, hint: int = 0) -> tuple[int, int] | None:
    """Where a peer's chunk lies in its file (peers keep no offsets): the chunk
    itself, else its first and last 40 characters."""
    chunk = chunk.strip()
    at = text.find(chunk, hint)
    if at < 0:
        at = text.find(chunk)
    if at >= 0:
        return at, at + len(chunk)
    head, tail = chunk[:40], chunk[-40:]
    start = text.find(head, hint)
    if start < 0:
        start = text.find(head)
    if start < 0:
        return None
    end = text.find(tail, start)
    return (start, end + len(tail)) if end >= 0 else (start, start + len(chunk))


def peer_langchain(
    corpus: Path, work: Path, model_path: str
) -> tuple[Callable[[str], list[Hit]], dict[str, Any]]:
    from langchain_core.documents import Document
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_qdrant import QdrantVectorStore
    from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter
    from transformers import AutoTokenizer

    emb = HuggingFaceEmbeddings(
        model_name=model_path,
        model_kwargs={"device": "cpu"},
        encode_kwargs={"normalize_embeddings": True, "batch_size": 64},
    )
    headers = MarkdownHeaderTextSplitter([("#" * i, f"h{i}") for i in range(1, 7)])
    tokens = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        AutoTokenizer.from_pretrained(model_path), chunk_size=LIMIT, chunk_overlap=OVERLAP
    )
    docs: list[Document] = []
    located = 0
    t = time.perf_counter()
    for rel, text in files(corpus):
        parts = headers.split_text(text)
        hint = 0
        for chunk in tokens.split_documents(parts):
            where = locate(text, chunk.page_content, hint)
            if where:
                located += 1
                hint = where[0]
            chunk.metadata = {
                "doc_path": rel,
                "start": where[0] if where else -1,
                "end": where[1] if where else -1,
            }
            docs.append(chunk)
    store = QdrantVectorStore.from_documents(docs, emb, path=str(work / "lc"), collection_name="lc")
    info = {
        "index_s": time.perf_counter() - t,
        "points": len(docs),
        "located": located / max(1, len(docs)),
        "bytes": folder_bytes(work / "lc"),
    }

    def ask(q: str) -> list[Hit]:
        return [
            (d.metadata["doc_path"], d.metadata["start"], d.metadata["end"])
            for d in store.similarity_search(q, k=10)
        ]

    return ask, info


def peer_llamaindex(
    corpus: Path, work: Path, model_path: str
) -> tuple[Callable[[str], list[Hit]], dict[str, Any]]:
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import MarkdownNodeParser, TokenTextSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from transformers import AutoTokenizer

    emb = HuggingFaceEmbedding(
        model_name=model_path, device="cpu", embed_batch_size=64, max_length=256, normalize=True
    )
    hf_tok = AutoTokenizer.from_pretrained(model_path)
    texts = dict(files(corpus))
    t = time.perf_counter()
    docs = [Document(text=text, id_=rel, metadata={"doc_path": rel}) for rel, text in texts.items()]
    nodes = TokenTextSplitter(
        chunk_size=LIMIT,
        chunk_overlap=OVERLAP,
        tokenizer=lambda s: hf_tok.encode(s, add_special_tokens=False),
    )(MarkdownNodeParser()(docs))
    located = 0
    hints: dict[str, int] = {}
    for node in nodes:
        rel = node.metadata["doc_path"]
        where = locate(texts[rel], node.get_content(), hints.get(rel, 0))
        if where:
            located += 1
            hints[rel] = where[0]
        node.metadata["start"], node.metadata["end"] = where if where else (-1, -1)
    store = QdrantVectorStore(client=QdrantClient(path=str(work / "li")), collection_name="li")
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=emb
    )
    retriever = index.as_retriever(similarity_top_k=10)
    info = {
        "index_s": time.perf_counter() - t,
        "points": len(nodes),
        "located": located / max(1, len(nodes)),
        "bytes": folder_bytes(work / "li"),
    }

    def ask(q: str) -> list[Hit]:
        return [
            (n.node.metadata["doc_path"], n.node.metadata["start"], n.node.metadata["end"])
            for n in retriever.retrieve(q)
        ]

    return ask, info


def peer_bm25(chunks: list[tuple[Hit, str]]) -> Callable[[str], list[Hit]]:
    import re

    from rank_bm25 import BM25Okapi

    def words(s: str) -> list[str]:
        return re.findall(r"\w+", s.lower())

    bm25 = BM25Okapi([words(text) for _, text in chunks])

    def ask(q: str) -> list[Hit]:
        scores = bm25.get_scores(words(q))
        best = sorted(range(len(chunks)), key=lambda i: -scores[i])[:10]
        return [chunks[i][0] for i in best]

    return ask


def run_peer(
    ask: Callable[[str], list[Hit]], questions: list[dict[str, Any]]
) -> tuple[list[list[Hit]], list[float]]:
    answers, times = [], []
    for q in questions:
        t = time.perf_counter()
        answers.append(ask(q["question"]))
        times.append(time.perf_counter() - t)
    return answers, times


# -- main -------------------------------------------------------------------


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--evalsets", default=str(EVALSETS))
    ap.add_argument("--sets", default="anthropic-docs,chroma-chunking")
    ap.add_argument("--strategies", default="heading,token,semantic")
    ap.add_argument("--modes", default="dense,sparse,hybrid")
    ap.add_argument("--context", default="off,on")
    ap.add_argument("--fusion", default="dbsf", help="rrf, dbsf, or both: rrf,dbsf")
    ap.add_argument(
        "--collapse",
        default="passages",
        help="hits of one section: off, section, passages (the default), passagesN; several: a,b",
    )
    ap.add_argument("--peers", default="langchain,llamaindex,bm25")
    ap.add_argument(
        "--work", help="keep the indexes here; a later run re-uses them (its backfill is a no-op)"
    )
    ap.add_argument("--store", default="client", help="the embedded engine: client or edge")
    ap.add_argument(
        "--questions", type=int, default=0, help="only the first N questions of each set"
    )
    args = ap.parse_args()
    offline()
    evalsets = Path(args.evalsets)
    if not evalsets.is_dir():
        sys.exit(f"{evalsets} not found; pass --evalsets")
    from mdindex.config import DEFAULT_MODEL
    from mdindex.embedding.model import resolve_model

    model_path = str(resolve_model(DEFAULT_MODEL).path)
    engine = Mdindex()
    results: dict[str, Any] = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "store": args.store,
        "sets": {},
    }
    print(f"CPU: {results['cpu']}, {results['cores']} cores", file=sys.stderr)
    for name in args.sets.split(","):
        if name in long_sections.SETS:
            made = Path(args.work or tempfile.mkdtemp(prefix="long-sections-")) / "sets"
            long_sections.make_set(name, evalsets, made)
            corpus = made / name / CORPUS_FOLDER[name]
            questions_file = made / name / "questions.jsonl"
        else:
            corpus = evalsets / name / CORPUS_FOLDER[name]
            questions_file = evalsets / name / "questions.jsonl"
        questions = [
            json.loads(line) for line in questions_file.read_text().splitlines() if line.strip()
        ]
        if args.questions:
            questions = questions[: args.questions]
        chroma = name.startswith("chroma")
        rows: list[dict[str, Any]] = []
        if args.work:
            scratch = Path(args.work) / name
            scratch.mkdir(parents=True, exist_ok=True)
        else:
            scratch = Path(tempfile.mkdtemp(prefix=f"retrieval-{name}-"))
        heading_work: Path | None = None
        for strategy in args.strategies.split(","):
            for context in (c == "on" for c in args.context.split(",")):
                work = scratch / f"{strategy}-{int(context)}"
                print(
                    f"{name}: indexing {strategy}, context {'on' if context else 'off'} ...",
                    file=sys.stderr,
                )
                built = index_with_cli(corpus, work, strategy, context, args.store)
                built["bytes"] = folder_bytes(work / ("edge" if args.store == "edge" else "qdrant"))
                if strategy == "heading" and not context:
                    heading_work = work
                for mode in args.modes.split(","):
                    for fusion, collapse in [
                        (f, c)
                        for f in (args.fusion.split(",") if mode == "hybrid" else ["rrf"])
                        for c in args.collapse.split(",")
                    ]:
                        answers, times = engine.ask(
                            work,
                            corpus,
                            strategy,
                            context,
                            questions,
                            mode,
                            fusion,
                            args.store,
                            collapse,
                        )
                        label = (
                            mode
                            if mode != "hybrid" or "," not in args.fusion
                            else f"hybrid-{fusion}"
                        )
                        if "," in args.collapse:
                            label += f"/{collapse}"
                        rows.append(
                            {
                                "pipeline": "mdindex",
                                "strategy": strategy,
                                "context": "on" if context else "off",
                                "mode": label,
                                **built,
                                **score(questions, answers, chroma),
                                **latency(times),
                            }
                        )
                        print(
                            f"  {strategy}/{rows[-1]['context']}/{label}: recall@3 {rows[-1]['recall@3']:.3f}",
                            file=sys.stderr,
                        )
        for peer in [p for p in args.peers.split(",") if p]:
            print(f"{name}: {peer} ...", file=sys.stderr)
            if peer == "bm25":
                if heading_work is None:
                    continue
                ask = peer_bm25(engine.chunks(heading_work, corpus, args.store))
                info: dict[str, Any] = {}
            else:
                setup = {"langchain": peer_langchain, "llamaindex": peer_llamaindex}[peer]
                shutil.rmtree(scratch / peer, ignore_errors=True)
                ask, info = setup(corpus, scratch / peer, model_path)
            answers, times = run_peer(ask, questions)
            rows.append(
                {
                    "pipeline": peer,
                    "strategy": "-",
                    "context": "-",
                    "mode": "bm25" if peer == "bm25" else "dense",
                    **info,
                    **score(questions, answers, chroma),
                    **latency(times),
                }
            )
        results["sets"][name] = {"questions": len(questions), "rows": rows}
        columns = [
            "pipeline",
            "strategy",
            "context",
            "mode",
            "recall@1",
            "recall@3",
            "recall@5",
            "recall@10",
            "mrr@10",
            "cb_precision@3",
            "cb_recall@3",
            "cb_mrr@3",
        ]
        if chroma:
            columns += ["tok_recall@5", "tok_precision@5", "tok_iou@5"]
        columns += ["points", "bytes", "p50_ms", "p95_ms"]
        print(
            f"\n## {name} ({len(questions)} questions; {results['cpu']}, {results['cores']} cores)\n"
        )
        print(table(rows, columns))
    path = write_json("retrieval", results)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
