"""Public span-QA sets in other languages, converted to the evalsets layout.

    python bench/language_sets.py SET RAW [--out bench/data/languages]

SET is one of the names below; RAW is a checkout (or `git archive` extract) of
its upstream repository, read as it is. Each set becomes
``<out>/<SET>/docs/*.md`` (one markdown file per article: ``# title``, then its
paragraphs separated by blank lines), ``questions.jsonl`` with gold character
spans in those files (the layout of ../shared/evalsets, see its README), and
the upstream license files. Every gold span is checked against the file as
mdindex reads it: ``text[char_start:char_end]`` is the answer.

- Span QA (SQuAD format): the first articles of the file, whole, until
  ``--paragraphs`` paragraphs; at most ``--per-paragraph`` questions of each,
  each with its first answer as gold. An answer whose ``answer_start`` does not
  point at it is looked for in its paragraph (the nearest occurrence), else
  the question is left out and counted.
- A docs book (``headings``): its chapter files in name order until
  ``--sections`` sections; each section's heading path is a question and the
  section its gold, as ``mdindex eval --headings`` asks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO

OUT = REPO / "bench" / "data" / "languages"


@dataclass(frozen=True)
class Source:
    kind: str  # "squad" or "headings"
    lang: str
    path: str  # inside the upstream repository: the json file, or the book's folder
    licenses: tuple[str, ...]
    upstream: str


SETS = {
    "cmrc2018": Source(
        "squad", "zh", "squad-style-data/cmrc2018_dev.json", ("LICENCE",), "ymcui/cmrc2018"
    ),
    "drcd": Source("squad", "zh", "DRCD_dev.json", ("README.md",), "DRCKnowledgeTeam/DRCD"),
    "arcd": Source("squad", "ar", "data/arcd-test.json", ("LICENSE",), "husseinmozannar/SOQAL"),
    "rustbook-ru": Source(
        "headings",
        "ru",
        "rustbook-ru/src",
        ("LICENSE-MIT", "LICENSE-APACHE", "COPYRIGHT"),
        "rust-lang-ru/book",
    ),
}


def find_answer(context: str, text: str, start: int) -> int | None:
    """Where the answer lies in its paragraph: at ``start`` when it is there,
    else its occurrence nearest to ``start``, else None."""
    if not text.strip():
        return None
    if context[start : start + len(text)] == text:
        return start
    found, at = [], context.find(text)
    while at >= 0:
        found.append(at)
        at = context.find(text, at + 1)
    return min(found, key=lambda i: abs(i - start)) if found else None


def clean(text: str) -> str:
    # mdindex reads CR and CRLF as LF; none of the chosen paragraphs holds one
    # (checked below), a title might
    return " ".join(text.split())


def squad(
    raw: Path, source: Source, paragraphs: int, per_paragraph: int
) -> tuple[dict[str, str], list[dict[str, Any]], dict[str, int]]:
    data = json.loads((raw / source.path).read_text(encoding="utf-8"))["data"]
    files: dict[str, str] = {}
    questions: list[dict[str, Any]] = []
    counts = {"paragraphs": 0, "asked": 0, "moved": 0, "dropped": 0}
    for n, article in enumerate(data):
        if counts["paragraphs"] >= paragraphs:
            break
        name = f"{n:04d}.md"
        text = f"# {clean(article['title'])}\n"
        for para in article["paragraphs"]:
            context = para["context"]
            if "\r" in context or not context.strip():
                sys.exit(f"{name}: a paragraph holds a CR or nothing; handle it before converting")
            text += "\n"
            offset = len(text)
            text += context.rstrip("\n") + "\n"
            counts["paragraphs"] += 1
            for qa in para["qas"][:per_paragraph]:
                counts["asked"] += 1
                answer = qa["answers"][0] if qa.get("answers") else None
                at = (
                    find_answer(context, answer["text"], int(answer["answer_start"]))
                    if answer
                    else None
                )
                if answer is None or at is None or not clean(qa["question"]):
                    counts["dropped"] += 1
                    continue
                counts["moved"] += at != int(answer["answer_start"])
                questions.append(
                    {
                        "id": str(qa["id"]),
                        "question": clean(qa["question"]),
                        "answer": answer["text"],
                        "gold": [
                            {
                                "doc_path": name,
                                "char_start": offset + at,
                                "char_end": offset + at + len(answer["text"]),
                            }
                        ],
                    }
                )
        files[name] = text
    return files, questions, counts


def headings(
    raw: Path, source: Source, sections: int
) -> tuple[dict[str, str], list[dict[str, Any]], dict[str, int]]:
    from mdindex.documents.parsing import parse_document
    from mdindex.documents.reading import decode
    from mdindex.index.search import Query

    files: dict[str, str] = {}
    questions: list[dict[str, Any]] = []
    for path in sorted((raw / source.path).glob("ch*.md")):
        if len(questions) >= sections:
            break
        text = decode(path.read_bytes())
        heads = parse_document(text, path.name).headings
        for i, h in enumerate(heads):
            question = " ".join(h.path)
            try:
                Query(question)  # as eval --headings: only a heading search can take
            except ValueError:
                continue
            end = heads[i + 1].start if i + 1 < len(heads) else len(text)
            questions.append(
                {
                    "id": f"{path.name}#{i}",
                    "question": question,
                    "gold": [{"doc_path": path.name, "char_start": h.start, "char_end": end}],
                }
            )
        files[path.name] = text
    return files, questions, {"sections": len(questions)}


def check(folder: Path, questions: list[dict[str, Any]]) -> None:
    """Every gold span is its answer in the file as mdindex reads it."""
    from mdindex.documents.reading import decode

    texts = {p.name: decode(p.read_bytes()) for p in folder.glob("*.md")}
    for q in questions:
        for g in q["gold"]:
            span = texts[g["doc_path"]][g["char_start"] : g["char_end"]]
            if "answer" in q and span != q["answer"]:
                sys.exit(f"{q['id']}: gold span {span!r} is not the answer {q['answer']!r}")
            if not span.strip():
                sys.exit(f"{q['id']}: empty gold span")


def license_text(raw: Path, name: str) -> str:
    text = (raw / name).read_text(encoding="utf-8")
    if name == "README.md":  # DRCD states its license in its README only
        start = text.index("## Copyright Notice")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end > 0 else len(text)].strip() + "\n"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("set", choices=sorted(SETS))
    ap.add_argument("raw", help="a checkout of the set's upstream repository")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--paragraphs", type=int, default=300)
    ap.add_argument("--per-paragraph", type=int, default=2)
    ap.add_argument("--sections", type=int, default=250)
    args = ap.parse_args()
    source, raw = SETS[args.set], Path(args.raw)
    if source.kind == "squad":
        files, questions, counts = squad(raw, source, args.paragraphs, args.per_paragraph)
    else:
        files, questions, counts = headings(raw, source, args.sections)
    target = Path(args.out) / args.set
    shutil.rmtree(target, ignore_errors=True)
    (target / "docs").mkdir(parents=True)
    for name, text in files.items():
        (target / "docs" / name).write_text(text, encoding="utf-8", newline="\n")
    check(target / "docs", questions)
    with (target / "questions.jsonl").open("w", encoding="utf-8", newline="\n") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    for name in source.licenses:
        out = "LICENSE" if name == "README.md" else name
        (target / out).write_text(license_text(raw, name), encoding="utf-8")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(
        f"{args.set} ({source.lang}, {source.upstream}): {len(files)} files, "
        f"{len(questions)} questions, {counts}, {size / 1e6:.2f} MB in {target}"
    )


if __name__ == "__main__":
    main()
