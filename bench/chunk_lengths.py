"""How long chunks are in characters, per token: the measurement behind ``max_chars``.

    python bench/chunk_lengths.py [--corpus DIR] [--evalsets DIR] [--ratios 5,5.5,6,7]

Chunks every English set with the default model's tokenizer and limit (254
tokens, 32 of overlap), in the three strategies, without a character bound,
and prints per set and strategy: the chunks, their characters per token
(median, 99th percentile, largest; characters are those that are not
whitespace, as ``max_chars`` counts them), and the longest chunk, also per
token of the limit. Then, for each candidate bound (a ratio to the limit),
how many chunks it changes. The semantic strategy runs with an embedder that
finds every sentence similar, so groups close only at the limits: the longest
chunks any model could give. The sets: ../shared/corpus, ../shared/evalsets,
the evalsets rebuilt as long sections without headings
(bench/long_sections.py), and the sets in other languages
(bench/language_sets.py), where the bound may change chunks. No timing: the
figures do not depend on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_CORPUS, REPO, load_texts, offline, table, write_json

OVERLAP = 32
UNBOUNDED = 10**9


class Alike:
    """Every text gets the same vector: semantic groups close only at the limits."""

    dimension = 2

    def embed(self, texts: Sequence[str], token_ids: Any = None) -> Any:
        return np.ones((len(texts), self.dimension))


def chunk_all(counter: Any, docs: list[Any], strategy: str, max_chars: int) -> list[Any]:
    """(document, start, end, tokens, text) of every chunk of ``docs``."""
    from mdindex.chunking import Chunker

    chunker = Chunker(
        counter,
        strategy,
        overlap_tokens=OVERLAP,
        embed=Alike(),
        max_chars=max_chars,  # type: ignore[arg-type]
    )
    return [
        (i + k, c.char_start, c.char_end, c.token_count, c.text)
        for i in range(0, len(docs), 64)
        for k, cs in enumerate(chunker.chunk_many(docs[i : i + 64]))
        for c in cs
    ]


def sets(corpus: Path, evalsets: Path, languages: Path, tmp: Path) -> dict[str, Path]:
    from long_sections import FOLDER, SETS, make_set

    out = {"corpus": corpus}
    for name, folder in FOLDER.items():
        out[name] = evalsets / name / folder
    for name, source in SETS.items():
        out[name] = make_set(name, evalsets, tmp) / FOLDER[source]
    # Not English (bench/language_sets.py): there the bound may change chunks.
    for folder in sorted(languages.glob("*/docs")):
        out[folder.parent.name] = folder
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--evalsets", default=str(DEFAULT_CORPUS.parent / "evalsets"))
    ap.add_argument("--languages", default=str(REPO / "bench" / "data" / "languages"))
    ap.add_argument("--ratios", default="5,5.5,6")
    ap.add_argument("--only", help="comma-separated set names")
    args = ap.parse_args()
    offline()

    from mdindex.chunking import CHARS_PER_TOKEN
    from mdindex.chunking.chars import count_chars
    from mdindex.config import DEFAULT_MODEL
    from mdindex.documents.parsing import parse_document
    from mdindex.embedding.model import load_counter, resolve_model

    counter = load_counter(resolve_model(DEFAULT_MODEL), None)
    limit = counter.limit
    ratios = [float(r) for r in args.ratios.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        found = sets(Path(args.corpus), Path(args.evalsets), Path(args.languages), Path(tmp))
        for name, folder in found.items():
            if args.only and name not in args.only.split(","):
                continue
            docs = [parse_document(t, p) for p, t in load_texts(folder)]
            for strategy in ("heading", "token", "semantic"):
                free = chunk_all(counter, docs, strategy, UNBOUNDED)
                lengths = [count_chars(c[4]) for c in free]
                per_token = [n / c[3] for n, c in zip(lengths, free, strict=True) if c[3]]
                row: dict[str, Any] = {
                    "set": name,
                    "strategy": strategy,
                    "chunks": len(free),
                    "chars/token p50": statistics.median(per_token),
                    "p99": float(np.percentile(per_token, 99)),
                    "max": max(per_token),
                    "longest": max(lengths),
                    "longest/limit": max(lengths) / limit,
                }
                spans = {c[:3] for c in free}
                for ratio in ratios:
                    row[f"changed at {ratio:g}"] = len(
                        spans
                        - {c[:3] for c in chunk_all(counter, docs, strategy, int(ratio * limit))}
                    )
                rows.append(row)
                print(row, file=sys.stderr)
    columns = list(rows[0])
    print(f"limit {limit} tokens, overlap {OVERLAP}; default max_chars {CHARS_PER_TOKEN} x limit")
    print(table(rows, columns))
    write_json("chunk_lengths", {"limit": limit, "rows": rows})


if __name__ == "__main__":
    main()
