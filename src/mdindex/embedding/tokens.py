"""Token counting with the embedding model's own tokenizer."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tokenizers import Encoding, Tokenizer

from mdindex.errors import ConfigError

# A text longer than this is tokenized in pieces cut at whitespace (for stable
# tokenizers, where that gives the same tokens): one 1 MB sequence took 2.45 s,
# the same text as 250 pieces 0.67 s, on 2 cores.
LONG_TEXT_CHARS = 65_536
_PIECE_CHARS = 16_384
_SPACE = re.compile(r"\s")
# BERT's pre-tokenizer also isolates every punctuation character, so a text with
# no whitespace at all (a run of 1M dots) can still be cut before ASCII punctuation.
_SPACE_OR_PUNCT = re.compile(r"[\s!-/:-@\[-`{-~]")


class Encoded(Protocol):
    """What chunking reads of a tokenizer's encoding."""

    @property
    def ids(self) -> list[int]: ...

    @property
    def offsets(self) -> list[tuple[int, int]]: ...

    @property
    def word_ids(self) -> list[int | None]: ...


@dataclass(frozen=True, slots=True)
class Stitched:
    """Encodings of consecutive pieces of one text, joined as if encoded whole."""

    ids: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]

    @classmethod
    def join(cls, parts: Sequence[tuple[int, Encoding]]) -> Stitched:
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        word_ids: list[int | None] = []
        words = 0
        for start, enc in parts:
            ids.extend(enc.ids)
            offsets.extend([(a + start, b + start) for a, b in enc.offsets])
            piece = enc.word_ids
            word_ids.extend([None if w is None else w + words for w in piece])
            # word ids only grow along an encoding: the last one is the largest
            last = next((w for w in reversed(piece) if w is not None), -1)
            words += last + 1
        return cls(ids, offsets, word_ids)


def piece_starts(text: str, cut: re.Pattern[str] = _SPACE) -> list[int]:
    """Where to cut a long text: where ``cut`` matches, about every _PIECE_CHARS."""
    starts = [0]
    while len(text) - starts[-1] > _PIECE_CHARS:
        m = cut.search(text, starts[-1] + _PIECE_CHARS)
        if m is None:
            break
        starts.append(m.start())
    return starts


class TokenCounter:
    """Counts tokens exactly as the embedder will see them, minus special tokens.

    ``limit`` is the largest chunk the model takes without truncation: its
    max sequence length minus the special tokens it adds ([CLS], [SEP], ...).

    ``stable`` is True for tokenizers (BERT-style WordPiece) whose tokens never
    cross whitespace and whose normalisation is per character: for them a
    slice cut at whitespace has exactly the tokens it had inside the longer
    text, so its count need not be recomputed.
    """

    def __init__(self, tokenizer: Tokenizer, max_seq_length: int) -> None:
        # The shipped tokenizer.json truncates and pads to 128; counting needs neither.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.special_tokens = len(tokenizer.encode("", add_special_tokens=True).ids)
        self.stable = _splits_at_whitespace(tokenizer)
        self.cut = _SPACE_OR_PUNCT if self.stable and _bert_pre(tokenizer) else _SPACE
        self.model_limit = max_seq_length - self.special_tokens
        self.limit = self.model_limit

    @classmethod
    def from_file(cls, path: Path, max_seq_length: int) -> TokenCounter:
        try:
            return cls(Tokenizer.from_file(str(path)), max_seq_length)
        except Exception as exc:  # tokenizers raises plain Exception on bad files
            raise ConfigError(f"model: cannot load tokenizer {path}: {exc}") from exc

    def with_limit(self, max_tokens: int | None) -> TokenCounter:
        """A counter sharing this tokenizer whose chunk limit is ``max_tokens``."""
        if max_tokens is None:
            return self
        if max_tokens > self.model_limit:
            raise ConfigError(
                f"max_tokens: {max_tokens} is above the model limit of {self.model_limit}; "
                f"use at most {self.model_limit}"
            )
        other = copy.copy(self)
        other.limit = max_tokens
        return other

    def reserve(self, tokens: int) -> TokenCounter:
        """A counter sharing this tokenizer whose model limit leaves ``tokens``
        free (for a prompt put before every chunk)."""
        if not tokens:
            return self
        if tokens >= self.model_limit // 2:
            raise ConfigError(
                f"document_prompt: its {tokens} tokens leave too little of the model limit "
                f"of {self.model_limit}; shorten it"
            )
        other = copy.copy(self)
        other.model_limit = other.limit = self.model_limit - tokens
        return other

    def encode(self, text: str) -> Encoding:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: Sequence[str]) -> list[Encoded]:
        if not texts:
            return []
        if not self.stable or all(len(t) <= LONG_TEXT_CHARS for t in texts):
            return list(self.tokenizer.encode_batch(list(texts), add_special_tokens=False))
        cuts = [piece_starts(t, self.cut) if len(t) > LONG_TEXT_CHARS else [0] for t in texts]
        pieces = [
            t[a:b]
            for t, starts in zip(texts, cuts, strict=True)
            for a, b in zip(starts, [*starts[1:], len(t)], strict=True)
        ]
        encoded = self.tokenizer.encode_batch(pieces, add_special_tokens=False)
        out: list[Encoded] = []
        pos = 0
        for starts in cuts:
            parts = list(zip(starts, encoded[pos : pos + len(starts)], strict=True))
            pos += len(starts)
            out.append(parts[0][1] if len(parts) == 1 else Stitched.join(parts))
        return out

    def count(self, text: str) -> int:
        return len(self.encode(text).ids)

    def counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.encode_batch(texts)]


_STABLE_PRE = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_STABLE_NORM = {"BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC", "StripAccents"}


def _bert_pre(tokenizer: Tokenizer) -> bool:
    pre = json.loads(tokenizer.to_str()).get("pre_tokenizer") or {}
    return pre.get("type") == "BertPreTokenizer"


def _splits_at_whitespace(tokenizer: Tokenizer) -> bool:
    spec = json.loads(tokenizer.to_str())
    model = (spec.get("model") or {}).get("type")
    pre = spec.get("pre_tokenizer") or {}
    pres = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    norm = spec.get("normalizer") or {}
    norms = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
    return (
        model == "WordPiece"
        and bool(pres)
        and all(p.get("type") in _STABLE_PRE for p in pres)
        and all(not n or n.get("type") in _STABLE_NORM for n in norms)
    )
