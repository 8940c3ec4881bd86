from __future__ import annotations

import pytest

from mdindex.chunking import Chunker
from mdindex.chunking.token import windows
from mdindex.config import load_settings
from mdindex.documents.parsing import parse_document
from mdindex.errors import ConfigError


def test_text_is_the_verbatim_slice_with_case_kept(counter) -> None:
    text = "# Title\n\n" + " ".join(f"MixedCase{i} ÜBER Straße" for i in range(200)) + "\n"
    doc = parse_document(text, "a.md")
    chunks = Chunker(counter.with_limit(50), "token", overlap_tokens=10).chunk(doc)
    assert len(chunks) > 5
    for c in chunks:
        assert text[c.char_start : c.char_end] == c.text
        assert c.token_count == counter.count(c.text) <= 50
    assert "MixedCase0 ÜBER Straße" in chunks[0].text
    assert chunks[1].char_start < chunks[0].char_end  # overlap


def test_windows_prefer_word_boundaries() -> None:
    # word ids: 0 0 1 1 1 2 3 3
    ids: list[int | None] = [0, 0, 1, 1, 1, 2, 3, 3]
    assert windows(ids, 4, 0) == [(0, 2), (2, 6), (6, 8)]
    assert windows([0] * 10, 4, 1) == [(0, 4), (4, 8), (8, 10)]  # one long word: cut anyway


def test_overlap_not_below_max_is_a_config_error(counter) -> None:
    with pytest.raises(ConfigError, match="overlap_tokens"):
        Chunker(counter.with_limit(32), "token", overlap_tokens=32)
    with pytest.raises(ConfigError, match="overlap_tokens"):
        load_settings({"max_tokens": 64, "overlap_tokens": 64})
    with pytest.raises(ConfigError, match="max_tokens"):
        counter.with_limit(1000)
