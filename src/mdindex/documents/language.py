"""A document's language: frontmatter ``lang``/``language`` first, else detected
from its prose.

Detection is lingua's (its models ship in its wheel), low-accuracy mode:
bench/langdetect.py measured it at 0.969 on single sentences, 0.3 ms a text and
93 MB, where high-accuracy mode reached 0.982 for 1.2 GB and 28 s to load,
py3langid 0.987 on sentences but 0.585 on single words, and pycld2 0.949 and
0.319 (Intel Xeon, 2 cores). Only prose is read: code blocks,
inline code, links' targets and frontmatter say nothing of the language a note
is written in, and a prefix of ``PREFIX_CHARS`` is enough to tell. Too little
prose, or a detector unsure between two languages, is "" (unknown), which is
analysed as English: a short English note is never taken for Dutch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from mdindex.documents.types import Document
from mdindex.outside import quoted

PREFIX_CHARS = 2000
# The languages told apart: those with their own stemmer, stop words or script,
# and the widely written ones near them. Latin, Tswana, Tagalog, Welsh and the
# like are left out: with them in, 27 of the 1,155 English pages of
# ../shared/corpus and evalsets (short ones, "See [Unix epoch][].") read as one
# of them; a note in one of them can say so in its frontmatter.
LANGUAGES = (
    "ar", "bg", "bn", "ca", "cs", "da", "de", "el", "en", "es", "et", "eu", "fa", "fi", "fr",
    "he", "hi", "hr", "hu", "hy", "id", "it", "ja", "kk", "ko", "lt", "lv", "mr", "nb", "nl",
    "pl", "pt", "ro", "ru", "sk", "sl", "sr", "sv", "ta", "th", "tr", "uk", "ur", "vi", "zh",
)  # fmt: skip
# Fewer letters than this (one in CJK or Thai counts 3) and a note is ""
# (unknown): a heading alone often reads as several languages
# (bench/langdetect.py: 0.68 right on single words).
MIN_WEIGHT = 12
# A note in Latin script is read as another language than English only when the
# detector gives that language this much of its confidence: on the English
# pages of ../shared/corpus and evalsets, the 10 short ones it misread ("A
# _remote resource_ is a file on a remote server" as Catalan) had 0.60 to 0.87.
# Other scripts are never English, and their near neighbours (Russian and
# Ukrainian, Hindi and Marathi) share an analysis or nearly.
MIN_CONFIDENCE = 0.9
KEYS = ("lang", "language")
_threads_pid = 0  # the process where the detector's threads run (detect_many)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_DENSE = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LINK_TARGET = re.compile(r"\]\([^)\n]*\)|https?://\S+|<[^>\n]*>")
_CODE = re.compile(r"^(?:[a-z]{2,3})(?:[-_][A-Za-z0-9]{2,8})*$", re.IGNORECASE)


@cache
def _detector() -> Any:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    codes = [getattr(IsoCode639_1, code.upper()) for code in LANGUAGES]
    builder = LanguageDetectorBuilder.from_iso_codes_639_1(*codes).with_low_accuracy_mode()
    return builder.build()


@cache
def _known() -> dict[str, str]:
    """ISO 639-1 codes and lowercase English names of lingua's languages, to the code."""
    from lingua import Language

    out: dict[str, str] = {}
    for lang in Language.all():
        code = lang.iso_code_639_1.name.lower()
        out[code] = code
        out[lang.name.lower()] = code
    return out


def normal_code(value: str) -> str | None:
    """A language code or name as its lowercase ISO 639-1 code ("en-US", "EN",
    "English" -> "en"); None when it names no language lingua knows."""
    text = value.strip().lower()
    if not text or len(text) > 32:
        return None
    known = _known()
    if text in known:
        return known[text]
    if _CODE.match(text):
        return known.get(re.split(r"[-_]", text)[0])
    return None


def from_frontmatter(meta: dict[str, Any]) -> tuple[str | None, str | None]:
    """The language the frontmatter names, and a one-line reason when a key is
    there but names no language (that note is then detected)."""
    for key in KEYS:
        if key not in meta:
            continue
        value = meta[key]
        code = normal_code(value) if isinstance(value, str) else None
        if code is not None:
            return code, None
        return (
            None,
            f"frontmatter {key}: {quoted(value, 40)} is not a language code; detected instead",
        )
    return None, None


def prose(doc: Document) -> str:
    """Up to ``PREFIX_CHARS`` of the document's body outside code blocks."""
    parts: list[str] = []
    size = 0
    pos = doc.body_start
    for start, end in [*sorted(doc.code_ranges), (len(doc.text), len(doc.text))]:
        if start > pos:
            piece = doc.text[pos:start]
            parts.append(piece)
            size += len(piece)
            if size >= PREFIX_CHARS:
                break
        pos = max(pos, end)
    text = "".join(parts)[:PREFIX_CHARS]
    return _LINK_TARGET.sub(" ", _INLINE_CODE.sub(" ", text))


def detect(text: str, min_weight: int = MIN_WEIGHT) -> str:
    """The language of a text as an ISO 639-1 code, "" when unsure or shorter
    than ``min_weight`` (a query's is lower: "机器学习" is a whole question)."""
    text = text[:PREFIX_CHARS]
    if weight(text) < min_weight:
        return ""
    try:
        values = _detector().compute_language_confidence_values(text)
    except Exception:  # a detector bug must not cost the document
        return ""
    return _chosen(text, values)


def detect_many(texts: Sequence[str]) -> list[str]:
    """``detect`` of each text, the detector's work spread over idle cores: one
    document at a time, it was a fifth of a backfill's work outside the model,
    which on a GPU is most of the run (docs/benchmarks.md, On a GPU)."""
    global _threads_pid
    texts = [text[:PREFIX_CHARS] for text in texts]
    if _threads_pid not in (0, os.getpid()):
        # A fork of a process whose detector threads had started: the child has
        # none of them, and a parallel call there waits forever.
        return [detect(text) for text in texts]
    _threads_pid = os.getpid()
    out = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if weight(text) >= MIN_WEIGHT]
    if not todo:
        return out
    try:
        found = _detector().compute_language_confidence_values_in_parallel([texts[i] for i in todo])
    except Exception:  # one at a time, so a detector bug costs one document
        return [detect(text) for text in texts]
    for i, values in zip(todo, found, strict=True):
        out[i] = _chosen(texts[i], values)
    return out


def _chosen(text: str, values: Any) -> str:
    """The detector's first language, "" when it is unsure (see MIN_CONFIDENCE)."""
    if not values:
        return ""
    code: str = values[0].language.iso_code_639_1.name.lower()
    letters = [c for c in text if c.isalpha()]
    latin = sum(c.isascii() for c in letters) * 2 >= len(letters)
    sure = code == "en" or not latin or values[0].value >= MIN_CONFIDENCE
    return code if sure else ""


def weight(text: str) -> int:
    """Letters, those of scripts written without spaces counted three times."""
    return sum((3 if _DENSE.match(c) else 1) for c in text if c.isalpha())


def language_of(doc: Document, setting: str, detecting: bool = True) -> tuple[str, str | None]:
    """A document's language and a one-line reason when its frontmatter names
    none: frontmatter wins, then ``setting`` when it is a code, else detection
    (``detecting=False``: left "" for ``detect_languages`` to fill in)."""
    code, problem = from_frontmatter(doc.meta)
    if code is not None:
        return code, None
    if setting != "auto":
        return setting, problem
    return (detect(prose(doc)) if detecting else ""), problem


def detect_languages(docs: Sequence[Document], setting: str) -> None:
    """The detection ``language_of(..., detecting=False)`` left out, for many
    documents at once (``detect_many``)."""
    if setting != "auto":
        return
    todo = [doc for doc in docs if from_frontmatter(doc.meta)[0] is None]
    for doc, code in zip(todo, detect_many([prose(doc) for doc in todo]), strict=True):
        doc.lang = code
