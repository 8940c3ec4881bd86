"""Two retrieval sets whose documents are long sections, made from the shared ones.

    python bench/long_sections.py OUT [--evalsets ../shared/evalsets]

A long section holds several passages that can each be the answer; a search
that answers once per section finds one of them. Both sets keep their
upstream questions, gold spans (moved with the text) and MIT license:

- ``anthropic-flat``: the 45 anthropic-docs pages, each under its one ``#``
  title: every ``##`` heading (outside code) becomes a plain line, so a page
  is one section of 300 to 40,000 characters (its 232 sections merged).
- ``chroma-headed``: the five chroma-chunking corpora (chat logs, finance,
  PubMed, State of the Union, Wikipedia: 40 KB to 740 KB each), each put
  under one ``#`` heading, as an article written under a single title is.

bench/retrieval.py builds them when ``--sets`` names them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
from pathlib import Path
from typing import Any

SETS = {"anthropic-flat": "anthropic-docs", "chroma-headed": "chroma-chunking"}
FOLDER = {"anthropic-docs": "pages", "chroma-chunking": "corpora"}
_HEADING = re.compile(r"^#{2,6} ")
_FENCE = re.compile(r"^\s*(```|~~~)")


def flatten(text: str) -> tuple[str, list[tuple[int, int, int]]]:
    """The page with its ``##``-and-deeper headings (outside code) made plain
    lines, and where each line went: (old start, new start, characters cut)."""
    out, moves = [], []
    old = new = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        cut = 0
        if not fenced and _HEADING.match(line):
            cut = line.index(" ") + 1
        moves.append((old, new, cut))
        out.append(line[cut:])
        old += len(line)
        new += len(line) - cut
    moves.append((old, new, 0))
    return "".join(out), moves


def moved(pos: int, moves: list[tuple[int, int, int]]) -> int:
    """An offset of the page, in the flattened page."""
    for (old, new, cut), (next_old, _, _) in itertools.pairwise(moves):
        if old <= pos < next_old:
            return new + max(0, pos - old - cut)
    return moves[-1][1]


def make_set(name: str, evalsets: Path, out: Path) -> Path:
    """Write set ``name`` under ``out`` (again each time); its folder."""
    source = evalsets / SETS[name]
    folder = FOLDER[SETS[name]]
    target = out / name
    shutil.rmtree(target, ignore_errors=True)
    (target / folder).mkdir(parents=True)
    shutil.copy(source / "LICENSE", target / "LICENSE")
    shift: dict[str, Any] = {}  # doc_path: how its offsets move
    for path in sorted((source / folder).rglob("*.md")):
        rel = path.relative_to(source / folder).as_posix()
        text = path.read_text(encoding="utf-8")
        if name == "anthropic-flat":
            text, moves = flatten(text)
            shift[rel] = moves
        else:
            head = f"# {path.stem.replace('_', ' ').title()}\n\n"
            text = head + text
            shift[rel] = len(head)
        dest = target / folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    lines = []
    for line in (source / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        for gold in q["gold"]:
            how = shift[gold["doc_path"]]
            for key in ("char_start", "char_end"):
                pos = gold[key]
                gold[key] = pos + how if isinstance(how, int) else moved(pos, how)
        lines.append(json.dumps(q, ensure_ascii=False))
    (target / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out")
    ap.add_argument(
        "--evalsets", default=str(Path(__file__).resolve().parents[2] / "shared" / "evalsets")
    )
    args = ap.parse_args()
    for name in SETS:
        print(make_set(name, Path(args.evalsets), Path(args.out)))


if __name__ == "__main__":
    main()
