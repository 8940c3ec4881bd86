"""The fixed texts a measurement embeds: their number and lengths."""

from __future__ import annotations

from mdindex.embedding import samples


def test_the_texts_are_fixed_and_of_mixed_length() -> None:
    assert samples._texts() == samples.TEXTS
    lengths = sorted(len(t.split()) for t in samples.TEXTS)
    assert len(samples.TEXTS) == 48
    assert lengths[0] < 15 and lengths[-1] > 70


def test_the_long_texts_are_cut_at_the_limit_like_full_chunks() -> None:
    from mdindex.config import DEFAULT_MODEL
    from mdindex.embedding.model import load_tokenizer, resolve_model

    tokenizer = load_tokenizer(resolve_model(DEFAULT_MODEL))
    lengths = [len(e.ids) for e in tokenizer.encode_batch(samples.LONG_TEXTS)]
    assert len(lengths) == 16 and set(lengths) == {256}
    assert len(set(samples.LONG_TEXTS)) == 16
