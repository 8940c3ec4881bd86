"""Chunking strategies; one module each, chosen by name in ``Chunker``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdindex.chunking import heading, token
from mdindex.documents.types import Chunk, Document
from mdindex.embedding.tokens import TokenCounter
from mdindex.errors import ConfigError
from mdindex.outside import quoted

if TYPE_CHECKING:
    from mdindex.embedding.embedder import Embedder

STRATEGIES = ("heading", "token", "semantic")

# Bump when a change to the chunkers would give different chunks for the same
# settings, so existing indexes are rebuilt instead of silently mixed.
# 2: the character bound, and sentence ends of other scripts.
CHUNKER_VERSION = 2
# The default character bound (``max_chars`` unset), per token of the limit:
# the smallest under which no chunk of ../shared/corpus, ../shared/evalsets or
# those rebuilt as long sections without headings changes, in any strategy
# (bench/chunk_lengths.py, 254 tokens): their longest chunk holds 1,357
# characters (5.34 per token of the limit); at 5.0 per token 61 of the 1,010
# anthropic-docs token windows change, at 5.5 none. The median is 2.8 to 3.9
# characters a token; Thai read as [UNK] reached 12.5 (2,361 in 189 tokens).
CHARS_PER_TOKEN = 5.5


class Chunker:
    def __init__(
        self,
        counter: TokenCounter,
        strategy: str = "heading",
        *,
        overlap_tokens: int = 32,
        noise_sections: Sequence[str] = (),
        threshold: float = 0.45,
        min_sentences: int = 2,
        embed: Embedder | None = None,
        max_chars: int | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy: {quoted(strategy)} is not one of {', '.join(STRATEGIES)}")
        if overlap_tokens >= counter.limit:
            raise ConfigError(
                f"overlap_tokens: {overlap_tokens} must be below the chunk limit of "
                f"{counter.limit} tokens; lower overlap_tokens or raise max_tokens"
            )
        self.counter = counter
        # Characters that are not whitespace (mdindex.chunking.chars): the bound
        # that holds where the tokenizer reads a whole run of text as one token.
        self.max_chars = max_chars or int(CHARS_PER_TOKEN * counter.limit)
        self.strategy = strategy
        self.overlap = overlap_tokens
        self.noise = frozenset(s.strip().casefold() for s in noise_sections)
        self.threshold = threshold
        self.min_sentences = min_sentences
        self.embed = embed

    @classmethod
    def from_params(
        cls, counter: TokenCounter, params: dict[str, Any], embed: Embedder | None = None
    ) -> Chunker:
        """The chunker of a version's index settings (``settings.index.params()``):
        the only way the settings reach a chunker, so whatever shapes chunks is
        one of them. ``counter`` is the model's, limited to ``max_tokens``."""
        from mdindex.config import Settings

        default = Settings.model_fields
        return cls(
            counter,
            params["strategy"],
            overlap_tokens=params["overlap_tokens"],
            noise_sections=params["noise_sections"],
            threshold=params.get("semantic_threshold", default["semantic_threshold"].default),
            min_sentences=params.get("min_sentences", default["min_sentences"].default),
            embed=embed,
            max_chars=params.get("max_chars"),
        )

    def params(self) -> dict[str, Any]:
        """Everything that decides which chunks come out, for the pipeline fingerprint."""
        params: dict[str, Any] = {
            "version": CHUNKER_VERSION,
            "strategy": self.strategy,
            "max_tokens": self.counter.limit,
            "max_chars": self.max_chars,
            "overlap_tokens": self.overlap,
            "noise_sections": sorted(self.noise),
        }
        if self.strategy == "semantic":
            params |= {"threshold": self.threshold, "min_sentences": self.min_sentences}
        return params

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: Sequence[Document]) -> list[list[Chunk]]:
        """Chunk several documents at once, so tokenizing and embedding run in batches."""
        if not docs:
            return []
        if self.strategy == "heading":
            return heading.chunk_many(docs, self.counter, self.overlap, self.max_chars, self.noise)
        if self.strategy == "token":
            return token.chunk_many(docs, self.counter, self.overlap, self.max_chars)
        if self.embed is None:
            raise ConfigError("strategy: semantic chunking needs an embedder")
        from mdindex.chunking import semantic  # numpy, which a no-op run never needs

        return semantic.chunk_many(
            docs,
            self.counter,
            self.overlap,
            self.embed,
            self.threshold,
            self.min_sentences,
            self.max_chars,
        )
