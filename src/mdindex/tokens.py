"""Token counting with the embedding model's own tokenizer."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from mdindex.errors import ConfigError


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

    def encode(self, text: str) -> Encoding:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: Sequence[str]) -> list[Encoding]:
        if not texts:
            return []
        return self.tokenizer.encode_batch(list(texts), add_special_tokens=False)

    def count(self, text: str) -> int:
        return len(self.encode(text).ids)

    def counts(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.encode_batch(texts)]


_STABLE_PRE = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_STABLE_NORM = {"BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC", "StripAccents"}


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
