"""BM25 alone, per language: today's analysis against the per-language one.

A quick probe without a model or a store: each set's documents (bench/data/languages
and ../shared/evalsets' anthropic-docs) cut into paragraphs, each paragraph a
sparse vector from mdindex's SparseEncoder, ranked as Qdrant's IDF modifier
ranks them (sum over the query's terms of idf times the stored weight). A
paragraph answers a question when it overlaps a gold span. Variants:

- ``english``: every document and query analysed as English (Code tokenizer,
  English stemmer and stop words), as before languages were told apart;
- ``own``: documents and queries analysed as their detected language only;
- ``mdindex``: documents and queries analysed as English and as their detected
  language, each term at its larger weight (what mdindex does);
- ``multilingual`` (spaced scripts): like ``mdindex`` with the Multilingual
  tokenizer in place of Code for the language's own terms, to see which
  keeps words better.

    python bench/sparse_languages.py [--sets cmrc2018,drcd,arcd,rustbook-ru,anthropic-docs]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, cpu_name
from mdindex.documents.language import detect
from mdindex.documents.reading import decode
from mdindex.embedding.sparse import (
    PARAMS,
    STEMMERS,
    STOPWORDS,
    UNSPACED,
    Sparse,
    SparseEncoder,
)

DATA = REPO / "bench" / "data" / "languages"
SETS = {
    "cmrc2018": DATA / "cmrc2018" / "docs",
    "drcd": DATA / "drcd" / "docs",
    "arcd": DATA / "arcd" / "docs",
    "rustbook-ru": DATA / "rustbook-ru" / "docs",
    "anthropic-docs": REPO.parent / "shared" / "evalsets" / "anthropic-docs" / "pages",
}


def paragraphs(folder: Path) -> list[tuple[str, int, int, str]]:
    """(doc_path, start, end, text) of every blank-line-separated paragraph."""
    out = []
    for path in sorted(folder.rglob("*.md")):
        text = decode(path.read_bytes())
        rel = path.relative_to(folder).as_posix()
        for m in re.finditer(r"(?:[^\n]+\n?)+", text):
            if m.group().strip():
                out.append((rel, m.start(), m.end(), m.group()))
    return out


def multilingual(lang: str) -> Any:
    from qdrant_edge import (
        Bm25,
        Bm25Config,
        DisabledStemmer,
        Language,
        SnowballLanguage,
        SnowballParams,
        StopwordsSet,
        TokenizerType,
    )

    stem, stop = STEMMERS.get(lang), STOPWORDS.get(lang)
    return Bm25(
        Bm25Config(
            k=PARAMS["k"],
            b=PARAMS["b"],
            avg_len=PARAMS["avg_len"],
            tokenizer=TokenizerType.Multilingual,
            stemmer=SnowballParams(getattr(SnowballLanguage, stem)) if stem else DisabledStemmer(),
            stopwords=getattr(Language, stop) if stop else StopwordsSet(set(), set()),
        )
    )


class _Pairs:
    """A dict of weights as a vector ``plain`` reads."""

    def __init__(self, weights: dict[int, float]) -> None:
        self.indices, self.values = list(weights), list(weights.values())


def plain(vector: Any) -> Sparse:
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    return Sparse([i for i, _ in pairs], [v for _, v in pairs])


def recall(docs: list[Sparse], make_query: Any, questions: list[dict[str, Any]], paras: Any) -> str:
    hits3 = hits10 = 0
    for q in questions:
        ranked = rank(docs, make_query(q["question"]))
        found = [
            any(
                g["doc_path"] == paras[j][0]
                and paras[j][1] < g["char_end"]
                and g["char_start"] < paras[j][2]
                for g in q["gold"]
            )
            for j in ranked
        ]
        hits3 += any(found[:3])
        hits10 += any(found[:10])
    return f"{hits3 / len(questions):.3f}/{hits10 / len(questions):.3f}"


def rank(docs: list[Sparse], query: Sparse, k: int = 10) -> list[int]:
    df: Counter[int] = Counter(i for d in docs for i in d.indices)
    n = len(docs)
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in query.indices}
    scores = []
    for j, d in enumerate(docs):
        weights = dict(zip(d.indices, d.values, strict=True))
        s = sum(idf[t] * weights[t] for t in query.indices if t in weights)
        if s > 0:
            scores.append((s, j))
    return [j for _, j in sorted(scores, reverse=True)[:k]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--evalsets", type=Path, help="../shared/evalsets, where it is elsewhere")
    args = ap.parse_args()
    if args.evalsets:
        SETS["anthropic-docs"] = args.evalsets / "anthropic-docs" / "pages"
    enc = SparseEncoder()
    print(f"CPU: {cpu_name()}; BM25 alone over paragraphs, recall@3 / recall@10")
    for name in args.sets.split(","):
        folder = SETS[name]
        questions = [
            json.loads(line)
            for line in (folder.parent / "questions.jsonl").read_text().splitlines()
            if line.strip()
        ]
        paras = paragraphs(folder)
        t = time.perf_counter()
        langs = [detect(p[3]) for p in paras]
        detect_ms = (time.perf_counter() - t) / len(paras) * 1000
        top = Counter(langs).most_common(3)
        main_lang = top[0][0]
        own = [enc._bm25(lang) for lang in langs]
        variants: dict[str, tuple[list[Sparse], Any]] = {
            "english": ([enc.document(p[3]) for p in paras], lambda q: enc.query(q)),
            "own": (
                [plain(bm.embed_document(p[3])) for p, bm in zip(paras, own, strict=True)],
                lambda q: plain(enc._bm25(detect(q)).embed_query(q)),
            ),
            "mdindex": (
                [enc.document(p[3], lang) for p, lang in zip(paras, langs, strict=True)],
                lambda q: enc.query(q, [detect(q)]),
            ),
        }
        if main_lang not in UNSPACED | {"en"}:
            bm = multilingual(main_lang)

            def both(
                text: str, lang: str, query: bool, bm: Any = bm, main: str = main_lang
            ) -> Sparse:
                english = enc.query(text) if query else enc.document(text)
                if lang != main:
                    return english
                own = plain(bm.embed_query(text) if query else bm.embed_document(text))
                weights = dict(zip(english.indices, english.values, strict=True))
                for i, v in zip(own.indices, own.values, strict=True):
                    weights[i] = max(v, weights.get(i, 0.0))
                return plain(_Pairs(weights))

            docs = [both(p[3], lang, False) for p, lang in zip(paras, langs, strict=True)]
            variants["multilingual"] = (docs, lambda q: both(q, detect(q), True))
        row = [f"{v} {recall(d, mq, questions, paras)}" for v, (d, mq) in variants.items()]
        print(
            f"{name:15} {len(questions):4} q {len(paras):5} paragraphs, detected {top} "
            f"({detect_ms:.2f} ms each): " + "  ".join(row)
        )


if __name__ == "__main__":
    main()
