"""Which language detector mdindex uses: accuracy and speed on short and mixed notes.

Labeled text comes from lingua-py's language-testdata (single words, word pairs,
sentences per language), read from a git checkout of github.com/pemistahl/lingua-py
(``--lingua-git``, a bare or normal git dir). Mixed notes are built from the same
sentences: prose in one language around English code blocks, and Chinese or
Russian prose with English terms in it. Each detector runs in its own process,
so its import and load time and its memory are its own.

    python bench/langdetect.py --lingua-git /path/to/lingua-py/.git [--n 150]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_name, peak_rss_mb

LANGS = ["en", "de", "fr", "es", "pt", "it", "ru", "uk", "ar", "hi", "th", "zh", "ja", "ko"]
LENGTHS = {"word": "single-words", "pair": "word-pairs", "sentence": "sentences"}
# the languages mdindex's BM25 analysis tells apart, plus neighbours they are confused with
SUBSET = [*LANGS, "nl", "sv", "da", "pl", "tr", "fa", "he", "id", "vi", "el", "bn"]
DETECTORS = ["mdindex", "lingua-low", "lingua-high", "lingua-subset-high", "py3langid", "pycld2"]
ENGLISH_TERMS = ["Docker Compose", "API key", "Kubernetes", "pull request", "README", "JSON"]
CODE = (
    "```python\nimport os\nfor name in os.listdir('.'):\n    print(name.upper())\n```\n\n"
    "```bash\npip install mdindex && mdindex serve --port 8000\n```\n"
)


def samples(git_dir: str, n: int, seed: int = 7) -> list[tuple[str, str, str]]:
    """(kind, lang, text) triples: n per language and length, and the mixed notes."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    sentences: dict[str, list[str]] = {}
    for lang in LANGS:
        for kind, folder in LENGTHS.items():
            blob = f"HEAD:language-testdata/{folder}/{lang}.txt"
            lines = subprocess.run(
                ["git", f"--git-dir={git_dir}", "show", blob],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            lines = [line.strip() for line in lines if line.strip()]
            if kind == "sentence":
                sentences[lang] = lines
            out += [(kind, lang, t) for t in rng.sample(lines, min(n, len(lines)))]
    for lang in ("zh", "ru", "ja", "de"):
        for _ in range(n // 3):
            prose = rng.sample(sentences[lang], 2)
            note = f"# {prose[0][:20]}\n\n{prose[0]}\n\n{CODE}\n{prose[1]}\n"
            out.append(("code-note", lang, note))
    for lang in ("zh", "ru"):
        for _ in range(n // 3):
            (s,) = rng.sample(sentences[lang], 1)
            terms = rng.sample(ENGLISH_TERMS, 2)
            cut = len(s) // 2
            out.append(("terms", lang, f"{s[:cut]} {terms[0]} {s[cut:]} ({terms[1]})"))
    for _ in range(n // 3):
        prose = rng.sample(sentences["en"], 2)
        out.append(("code-note", "en", f"# Notes\n\n{prose[0]}\n\n{CODE}\n{prose[1]}\n"))
    return out


def _lingua(mode: str) -> Callable[[str], str]:
    from lingua import Language, LanguageDetectorBuilder

    if mode == "subset":
        wanted = {code.upper() for code in SUBSET}
        langs = [lang for lang in Language.all() if lang.iso_code_639_1.name in wanted]
        builder = LanguageDetectorBuilder.from_languages(*langs)
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    if mode == "low":
        builder = builder.with_low_accuracy_mode()
    detector = builder.with_preloaded_language_models().build()

    def detect(text: str) -> str:
        lang = detector.detect_language_of(text)
        return lang.iso_code_639_1.name.lower() if lang is not None else ""

    return detect


def _py3langid() -> Callable[[str], str]:
    import py3langid

    py3langid.classify("warm up")  # loads its model

    def detect(text: str) -> str:
        return str(py3langid.classify(text)[0])

    return detect


def _pycld2() -> Callable[[str], str]:
    import pycld2

    def detect(text: str) -> str:
        try:
            _, _, details = pycld2.detect(text)
        except pycld2.error:
            return ""
        code = str(details[0][1])
        return "" if code == "un" else code.split("-")[0]

    return detect


def _mdindex() -> Callable[[str], str]:
    """What mdindex does: a note's prose only, the languages it tells apart,
    unknown ("", counted wrong here) when short or unsure."""
    from mdindex.documents.language import detect, prose
    from mdindex.documents.parsing import parse_document

    detect("warm up the detector")

    def run(text: str) -> str:
        return detect(prose(parse_document(text, "note.md")) if "```" in text else text)

    return run


def run_one(name: str, git_dir: str, n: int) -> dict[str, object]:
    data = samples(git_dir, n)
    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    makers: dict[str, Callable[[], Callable[[str], str]]] = {
        "mdindex": _mdindex,
        "lingua-low": lambda: _lingua("low"),
        "lingua-high": lambda: _lingua("high"),
        "lingua-subset-high": lambda: _lingua("subset"),
        "py3langid": _py3langid,
        "pycld2": _pycld2,
    }
    detect = makers[name]()
    load_s = time.perf_counter() - t0
    right: dict[str, list[int]] = {}
    t1 = time.perf_counter()
    for kind, lang, text in data:
        got = detect(text)
        for key in (f"{kind}/{lang}", kind):
            right.setdefault(key, []).append(int(got == lang))
    per_doc_ms = (time.perf_counter() - t1) / len(data) * 1000
    acc = {k: sum(v) / len(v) for k, v in right.items()}
    return {"load_s": load_s, "ms": per_doc_ms, "rss_mb": peak_rss_mb() - rss0, "acc": acc}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lingua-git", default="/work/.mirror/pemistahl+lingua-py/repo")
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.lingua_git, args.n)))
        return
    results = {}
    for name in DETECTORS:
        cmd = [sys.executable, __file__, "--one", name, "--lingua-git", args.lingua_git]
        proc = subprocess.run([*cmd, "--n", str(args.n)], capture_output=True, text=True)
        if proc.returncode:
            print(f"{name}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        results[name] = json.loads(proc.stdout)
    print(f"CPU: {cpu_name()}; {args.n} texts per language and length")
    kinds = [*LENGTHS, "code-note", "terms"]
    print(
        f"{'detector':20} {'load s':>7} {'ms/doc':>7} {'RSS MB':>7} "
        + " ".join(f"{k:>9}" for k in kinds)
    )
    for name, r in results.items():
        acc = r["acc"]
        cols = " ".join(f"{acc.get(k, 0):9.3f}" for k in kinds)
        print(f"{name:20} {r['load_s']:7.2f} {r['ms']:7.3f} {r['rss_mb']:7.0f} {cols}")
    print("\naccuracy by language (word / pair / sentence / code-note / terms)")
    print(f"{'lang':5} " + " ".join(f"{name:>26}" for name in results))
    for lang in LANGS:
        cells = []
        for r in results.values():
            acc = r["acc"]
            cells.append(
                " ".join(
                    f"{acc[f'{k}/{lang}']:.2f}" if f"{k}/{lang}" in acc else "  - " for k in kinds
                )
            )
        print(f"{lang:5} " + " ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
