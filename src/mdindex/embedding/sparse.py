"""BM25 sparse vectors: term weights computed here, IDF applied by the engine.

Every point may carry, beside its dense vector, a sparse vector named
``SPARSE_NAME`` whose values are BM25's term-frequency part,
``tf * (k + 1) / (tf + k * (1 - b + b * len / avg_len))``, with a fixed
``avg_len``; the engine multiplies in the IDF (Qdrant's IDF modifier) at
query time. So a point's sparse vector depends on its own text only, and
adding or removing documents never rewrites other points.

One encoder for every store: qdrant-edge's ``Bm25`` (Rust), used directly,
so the same tree gives the same sparse vectors on qdrant-client's local mode,
a server and edge. About 0.2 ms per 2,000 characters here, under 1 % of
embedding them.

How text is analysed depends on the document's language (payload ``lang``):

- English, and every document whose language is unknown: the Code tokenizer,
  which also splits ``snake_case`` and ``camelCase`` identifiers and keeps
  them whole, with English stop words and Snowball stemmer, exactly as before
  languages were told apart, so English vectors did not move.
- Any other language: the terms of that English analysis and of the
  language's own, each at its larger weight. Its own analysis is the Code
  tokenizer with the language's Snowball stemmer and stop words where
  qdrant-edge has them (``STEMMERS``, ``STOPWORDS``); for Chinese, Japanese,
  Korean and Thai, written without spaces, the Multilingual tokenizer, which
  segments them into words.

Zero-width and direction characters (``INVISIBLE``) are taken out of the
text first, a document's and a query's alike: a zero-width space inside a
word split it into two terms, or joined a Chinese sentence's words into
none, so the note could not be found by the word. Only the analysis drops
them; the stored text, and its offsets, keep every character.

A query is analysed the same two ways, English and as its own language. So
an English question still matches English notes term for term, and English
terms in a Chinese note; a Chinese one finds its words in Chinese notes.

Measured with BM25 alone over paragraphs (bench/sparse_languages.py, recall@3,
Intel Xeon, 2 cores), English analysis before and this one: CMRC 2018
(Chinese) 0.164 and 0.993; DRCD (Chinese) 0.091 and 0.988; ARCD (Arabic)
0.768 and 0.880 (the language's analysis alone 0.841); the Russian Rust
book's heading questions 0.827 and 0.815 (alone 0.752: its stemmer blurs the
heading's exact words; with both kept, an exact form counts twice).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

SPARSE_NAME = "bm25"
# Standard BM25 constants; avg_len in tokens is about a heading chunk's length.
# analysis 3: invisible characters dropped first; 2: per language (above);
# before it, Code and English for everything. "tokenizer" is the English
# analysis's.
PARAMS: dict[str, Any] = {
    "k": 1.2,
    "b": 0.75,
    "avg_len": 256.0,
    "tokenizer": "code",
    "analysis": 3,
}
# Characters that show nothing and join or split no word for a reader: zero
# width space, non-joiner and joiner, word joiner, byte order mark (zero width
# no-break space), soft hyphen, and the bidirectional marks, embeddings,
# overrides and isolates.
INVISIBLE = dict.fromkeys(
    [0x00AD, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x200E, 0x200F,
     *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)  # fmt: skip
# qdrant-edge's Snowball stemmers and stop word lists, by ISO 639-1 code.
STEMMERS = {
    "ar": "Arabic", "hy": "Armenian", "da": "Danish", "nl": "Dutch", "fi": "Finnish",
    "fr": "French", "de": "German", "el": "Greek", "hu": "Hungarian", "it": "Italian",
    "nb": "Norwegian", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "es": "Spanish", "sv": "Swedish", "ta": "Tamil", "tr": "Turkish",
}  # fmt: skip
STOPWORDS = {
    "ar": "Arabic", "az": "Azerbaijani", "eu": "Basque", "bn": "Bengali", "ca": "Catalan",
    "zh": "Chinese", "da": "Danish", "nl": "Dutch", "fi": "Finnish", "fr": "French",
    "de": "German", "el": "Greek", "he": "Hebrew", "hu": "Hungarian", "id": "Indonesian",
    "it": "Italian", "ja": "Japanese", "kk": "Kazakh", "ne": "Nepali", "nb": "Norwegian",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sl": "Slovene", "es": "Spanish",
    "sv": "Swedish", "tg": "Tajik", "tr": "Turkish",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sparse:
    """A sparse vector: term hashes and their weights, indices strictly ascending."""

    indices: list[int]
    values: list[float]

    def as_dict(self) -> dict[str, list[Any]]:
        return {"indices": self.indices, "values": self.values}


# Between the title and the headings of a chunk's context, for both halves
# (the embedded text's prefix: index.planning).
SEPARATOR = " > "


def sparse_text(payload: dict[str, Any], prepend_context: bool) -> str:
    """What a point's sparse vector is computed from: its chunk text, behind its
    title and heading path when context is prepended. From the payload alone, so
    a stored point's sparse vector can be recomputed without re-chunking."""
    text = str(payload.get("text", ""))
    if not prepend_context:
        return text
    path = payload.get("heading_path") or []
    context = [str(payload.get("title") or ""), *(str(h) for h in path)]
    return SEPARATOR.join(c for c in context if c) + "\n\n" + text


# Scripts written without spaces, which only the Multilingual tokenizer cuts into words.
UNSPACED = {"zh", "ja", "ko", "th"}


def analysis_of(lang: str) -> str:
    """The analysis a language gets: "en" for English and unknown, else the code."""
    return lang if lang and lang != "en" else "en"


class SparseEncoder:
    """BM25 document and query vectors (see the module docstring)."""

    def __init__(self) -> None:
        # made on first use, one per analysis: a no-op run never imports qdrant_edge
        self._encoders: dict[str, Any] = {}

    def _bm25(self, lang: str) -> Any:
        key = analysis_of(lang)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = _make(key)
        return encoder

    @staticmethod
    def params() -> dict[str, Any]:
        """What decides the vectors, for the index fingerprint."""
        return dict(PARAMS)

    def document(self, text: str, lang: str = "") -> Sparse:
        """A document's vector, analysed as its language (``lang``, "" unknown)."""
        text = text.translate(INVISIBLE)
        english = self._bm25("en").embed_document(text)
        if analysis_of(lang) == "en":
            return _sorted(english)
        weights = dict(zip(english.indices, english.values, strict=True))
        own = self._bm25(lang).embed_document(text)
        for index, value in zip(own.indices, own.values, strict=True):
            weights[index] = max(value, weights.get(index, 0.0))
        return _sorted_pairs(weights.items())

    def documents(self, texts: Sequence[str], lang: str = "") -> list[Sparse]:
        return [self.document(t, lang) for t in texts]

    def query(self, text: str, langs: Sequence[str] = ()) -> Sparse:
        """A query's vector: the terms of its English analysis and of each of
        ``langs``' (every term weighs 1, as qdrant-edge weighs query terms)."""
        text = text.translate(INVISIBLE)
        terms: set[int] = set()
        for key in dict.fromkeys(["en", *(analysis_of(lang) for lang in langs)]):
            terms.update(int(i) for i in self._bm25(key).embed_query(text).indices)
        ordered = sorted(terms)
        return Sparse(ordered, [1.0] * len(ordered))


def _make(key: str) -> Any:
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

    common: dict[str, Any] = {"k": PARAMS["k"], "b": PARAMS["b"], "avg_len": PARAMS["avg_len"]}
    if key == "en":
        return Bm25(Bm25Config(**common, tokenizer=TokenizerType.Code, language="english"))
    stem = STEMMERS.get(key)
    stop = STOPWORDS.get(key)
    # Code, beside the English terms, measured as well as Multilingual on Arabic
    # (0.880 both) and better on Russian (0.815 against 0.803); only
    # Multilingual segments the unspaced scripts.
    tokenizer = TokenizerType.Multilingual if key in UNSPACED else TokenizerType.Code
    return Bm25(
        Bm25Config(
            **common,
            tokenizer=tokenizer,
            stemmer=SnowballParams(getattr(SnowballLanguage, stem)) if stem else DisabledStemmer(),
            stopwords=getattr(Language, stop) if stop else StopwordsSet(set(), set()),
        )
    )


def _sorted(vector: Any) -> Sparse:
    return _sorted_pairs(zip(vector.indices, vector.values, strict=True))


def _sorted_pairs(pairs: Iterable[tuple[int, float]]) -> Sparse:
    ordered = sorted(pairs)
    return Sparse([int(i) for i, _ in ordered], [float(v) for _, v in ordered])
