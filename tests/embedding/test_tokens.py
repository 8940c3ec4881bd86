"""Token counting with the model's own tokenizer: exact counts (the shipped
tokenizer.json truncates and pads to 128 by itself), long texts tokenized in
pieces giving the same tokens as whole, and a counter's own chunk limit."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Encoding, Tokenizer

from mdindex.config import DEFAULT_MODEL
from mdindex.embedding.model import resolve_model
from mdindex.embedding.tokens import (
    _PIECE_CHARS,
    LONG_TEXT_CHARS,
    Stitched,
    TokenCounter,
    piece_starts,
)
from mdindex.errors import ConfigError

PROSE = (
    "Ownership is Rust's most unusual feature: each value has one owner (and only one). "
    "Naïve café-goers write 文字 and emoji 😀! x=1.5; see https://example.com/a.b?c=d.\n\n"
    "- a list item\n```python\nprint('code')\n```\n"
)
TEXTS = [
    "",
    "hello",
    "Hello, world!",
    PROSE,
    "word " * 600,  # over the 128 tokenizer.json would cut at, and over the model's 256
    "supercalifragilisticexpialidocious" * 4,  # one word past WordPiece's 100 chars: [UNK]
    "\u200b\x00\x07 zero-width and control characters",
]


def tokenizer_file() -> Path:
    return resolve_model(DEFAULT_MODEL).path / "tokenizer.json"


def bare_tokenizer() -> Tokenizer:
    """The model's tokenizer without the truncation and padding its file asks for."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file()))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def whole(text: str) -> Encoding:
    return bare_tokenizer().encode(text, add_special_tokens=False)


def test_the_shipped_tokenizer_cuts_and_pads_to_128_by_itself() -> None:
    """What the counter must undo: counted with the file as it is, every text
    would be 128 tokens."""
    shipped = Tokenizer.from_file(str(tokenizer_file()))
    assert len(shipped.encode("word " * 600).ids) == 128
    assert len(shipped.encode("hello").ids) == 128


@pytest.mark.parametrize("text", TEXTS)
def test_counts_are_exact_and_never_capped(counter: TokenCounter, text: str) -> None:
    want = whole(text).ids
    assert counter.count(text) == len(want)
    assert counter.encode(text).ids == want  # no [CLS], [SEP] or [PAD]


def test_counts_of_a_batch_are_each_texts_in_order(counter: TokenCounter) -> None:
    assert counter.counts(TEXTS) == [len(whole(t).ids) for t in TEXTS]
    assert counter.counts([]) == []
    assert counter.encode_batch([]) == []
    assert counter.count("word " * 600) == 600
    assert counter.count("") == 0


def test_the_limit_is_the_model_length_less_the_special_tokens(counter: TokenCounter) -> None:
    # all-MiniLM-L6-v2: 256 tokens a sequence, [CLS] and [SEP] around each text
    assert counter.special_tokens == 2
    assert counter.model_limit == 256 - 2
    assert counter.limit == counter.model_limit
    assert counter.stable is True


def test_with_limit(counter: TokenCounter) -> None:
    assert counter.with_limit(None) is counter
    smaller = counter.with_limit(100)
    assert (smaller.limit, smaller.model_limit) == (100, 254)
    assert counter.limit == 254  # the original keeps its own
    assert smaller.count(PROSE) == counter.count(PROSE)  # the same tokenizer
    assert counter.with_limit(254).limit == 254
    with pytest.raises(ConfigError, match=r"max_tokens: 255 is above the model limit of 254"):
        counter.with_limit(255)


def _assert_same_encoding(got: Any, want: Encoding) -> None:
    assert got.ids == want.ids
    assert got.offsets == want.offsets
    assert got.word_ids == want.word_ids


@pytest.mark.parametrize(
    "text",
    [
        PROSE * (3 * LONG_TEXT_CHARS // len(PROSE)),
        "." * (3 * LONG_TEXT_CHARS),  # no whitespace at all: cut before punctuation
        "a.b,c;d" * (LONG_TEXT_CHARS // 2),
        "x" * (2 * LONG_TEXT_CHARS),  # nowhere to cut: one piece
    ],
    ids=["prose", "dots", "glued-punctuation", "one-run"],
)
def test_a_long_text_in_pieces_has_the_tokens_of_the_whole(
    counter: TokenCounter, text: str
) -> None:
    [got] = counter.encode_batch([text])
    _assert_same_encoding(got, whole(text))
    assert counter.counts([text]) == [len(whole(text).ids)]


def test_long_and_short_texts_in_one_batch_keep_their_order(counter: TokenCounter) -> None:
    long_one = PROSE * (LONG_TEXT_CHARS // len(PROSE) + 10)
    texts = ["first", long_one, "", "Last one.", long_one[::-1]]
    got = counter.encode_batch(texts)
    assert len(got) == len(texts)
    assert isinstance(got[1], Stitched)  # this one went in pieces
    for enc, text in zip(got, texts, strict=True):
        _assert_same_encoding(enc, whole(text))


def test_piece_starts_cut_about_every_piece_at_a_cut_character() -> None:
    text = ("word " * 10_000).strip()
    starts = piece_starts(text)
    assert starts[0] == 0 and len(starts) == len(text) // _PIECE_CHARS + 1
    for a, b in itertools.pairwise(starts):
        assert _PIECE_CHARS <= b - a < _PIECE_CHARS + 5
        assert text[b] == " "
    assert piece_starts("short text") == [0]
    assert piece_starts("x" * (3 * _PIECE_CHARS)) == [0]  # nothing to cut at
    dots = "." * (3 * _PIECE_CHARS)
    assert piece_starts(dots) == [0]  # whitespace only, by default
    assert piece_starts(dots, re.compile(r"\.")) == [0, _PIECE_CHARS, 2 * _PIECE_CHARS]


def test_a_slice_cut_at_whitespace_keeps_its_tokens(counter: TokenCounter) -> None:
    """What ``stable`` promises: a slice between two whitespace characters has
    exactly the tokens of the longer text that lie inside it."""
    text = PROSE * 3
    enc = counter.encode(text)
    spaces = [m.start() for m in re.finditer(r"\s", text)]
    for a, b in zip(spaces[::7], spaces[5::7], strict=False):
        inside = [i for i, (s, e) in zip(enc.ids, enc.offsets, strict=True) if a <= s and e <= b]
        assert counter.encode(text[a:b]).ids == inside


def _with(spec_change: dict[str, Any]) -> Tokenizer:
    spec = json.loads(bare_tokenizer().to_str()) | spec_change
    return Tokenizer.from_str(json.dumps(spec))


def test_only_a_whitespace_splitting_tokenizer_is_stable() -> None:
    bert = TokenCounter(Tokenizer.from_file(str(tokenizer_file())), 256)
    assert bert.stable and bert.cut.match(".")  # BERT isolates punctuation too
    splits = TokenCounter(_with({"pre_tokenizer": {"type": "WhitespaceSplit"}}), 256)
    assert splits.stable and not splits.cut.match(".") and splits.cut.match(" ")
    # a pre-tokenizer that may join across whitespace, or a normalizer that rewrites
    # text, makes a slice's tokens differ from its share of the whole
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    for change in (
        {"pre_tokenizer": metaspace},
        {"pre_tokenizer": None},
        {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": ""}},
    ):
        assert TokenCounter(_with(change), 256).stable is False, change


def test_an_unstable_tokenizer_encodes_a_long_text_whole() -> None:
    unstable = TokenCounter(_with({"pre_tokenizer": None}), 256)
    text = "word " * (LONG_TEXT_CHARS // 4)
    [got] = unstable.encode_batch([text])
    assert not isinstance(got, Stitched)
    assert got.ids == unstable.tokenizer.encode(text, add_special_tokens=False).ids


def test_from_file_counts_untruncated_within_the_length_given() -> None:
    spec = json.loads(Tokenizer.from_file(str(tokenizer_file())).to_str())
    assert spec["truncation"] and spec["padding"]  # what the file asks for
    counter = TokenCounter.from_file(tokenizer_file(), 512)
    assert counter.count("word " * 600) == 600
    assert counter.model_limit == 510


def test_a_broken_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        TokenCounter.from_file(broken, 256)
    with pytest.raises(ConfigError, match="cannot load tokenizer"):
        TokenCounter.from_file(tmp_path / "missing.json", 256)
