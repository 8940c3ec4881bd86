"""Token counting with the embedding model's own tokenizer."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from mdindex.errors import ConfigError


class TokenCounter:
    """Counts tokens exactly as the embedder will see them, minus special tokens.

    ``limit`` is the largest chunk the model takes without truncation: its
    max sequence length minus the special tokens it adds ([CLS], [SEP], ...).
    """

    def __init__(self, tokenizer: Tokenizer, max_seq_length: int) -> None:
        # The shipped tokenizer.json truncates and pads to 128; counting needs neither.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.special_tokens = len(tokenizer.encode("", add_special_tokens=True).ids)
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
