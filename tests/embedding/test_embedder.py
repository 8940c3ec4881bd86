"""The embedder's own tokenize-and-forward path against plain sentence-transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import native_bf16
from mdindex.embedding.tokens import TokenCounter
from mdindex.errors import ConfigError
from tests.conftest import REPO

pytestmark = pytest.mark.model  # every test here embeds with the real model

TEXTS = [
    "Hugo is a static site generator.",
    "A much longer paragraph about vector stores, markdown files and the way a "
    "watcher keeps an index in step with the files on disk. " * 4,
    "",
    "`code` and émojis 🎉 and CJK 文字",
    "word " * 600,  # over the model's 256 tokens: cut as encode cuts it
]


def _encode(embedder: ModelEmbedder, texts: list[str]) -> np.ndarray:
    return np.asarray(
        embedder.model().encode(texts, batch_size=2, normalize_embeddings=True),
        dtype=np.float32,
    )


def test_direct_forward_matches_encode_in_fp32(real_embedder: ModelEmbedder) -> None:
    fp32 = ModelEmbedder(real_embedder.info, device="cpu", batch_size=2, precision="fp32")
    # Mixed lengths across several batches, so sorting and putting rows back is exercised.
    texts = (
        TEXTS
        + [f"{t} variant {i}" for i, t in enumerate(TEXTS)]
        + [f"{i} " * (i * 7) for i in range(1, 9)]
    )
    got = fp32.embed(texts)
    assert fp32.loaded is not None and fp32.loaded.tokenizer is not None  # direct, not encode
    want = _encode(fp32, texts)
    assert got.shape == (len(texts), 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # Row by row: each vector is its own text's, not a neighbour's of similar length.
    assert float(np.min(np.sum(got * want, axis=1))) > 0.99999


def test_bf16_stays_close_to_fp32(real_embedder: ModelEmbedder) -> None:
    bf16 = ModelEmbedder(real_embedder.info, device="cpu", precision="bf16")
    if not native_bf16():  # a CPU without avx512_bf16 or AMX: refused in one line
        with pytest.raises(ConfigError, match="precision 'bf16' cannot run on cpu"):
            bf16.embed(TEXTS)
        return
    fp32 = ModelEmbedder(real_embedder.info, device="cpu", precision="fp32")
    cos = np.sum(bf16.embed(TEXTS) * fp32.embed(TEXTS), axis=1)
    assert float(cos.min()) > 0.995


def test_example_docs_embed_alike_both_ways(real_embedder: ModelEmbedder) -> None:
    texts = [p.read_text() for p in sorted((REPO / "examples" / "docs").rglob("*.md"))]
    assert texts
    got = real_embedder.embed(texts)
    want = _encode(real_embedder, texts)
    tol = 0.995 if real_embedder.precision == "bf16" else 0.99999
    assert float(np.min(np.sum(got * want, axis=1))) > tol


@pytest.mark.parametrize("texts", [[], ["only one"]])
def test_small_inputs(real_embedder: ModelEmbedder, texts: list[str]) -> None:
    assert real_embedder.embed(texts).shape == (len(texts), 384)


def test_token_ids_from_chunking_give_the_same_vectors(
    real_embedder: ModelEmbedder, counter: TokenCounter
) -> None:
    fp32 = ModelEmbedder(real_embedder.info, device="cpu", precision="fp32")
    texts = [t for t in TEXTS if t.strip()][:3]
    known = [counter.encode(t).ids for t in texts]
    plain = fp32.embed(texts)
    assert fp32.texts_pretokenized == 0
    reused = fp32.embed(texts, token_ids=[known[0], None, known[2]])
    assert fp32.texts_pretokenized == 2
    assert np.array_equal(plain, reused)
    # ids too long for the model are not trusted; the text is tokenized (and cut) instead
    long_text = TEXTS[-1]
    fp32.embed([long_text], token_ids=[counter.encode(long_text).ids])
    assert fp32.texts_pretokenized == 2


def test_heading_chunks_carry_their_ids_to_the_embedder(
    tmp_path: Path, real_embedder: ModelEmbedder
) -> None:
    from tests.conftest import build_indexer, settings_for

    s = settings_for(tmp_path, [REPO / "examples" / "docs"])
    embedder = ModelEmbedder(real_embedder.info, device="cpu")
    indexer = build_indexer(s, embedder)
    try:
        summary = indexer.backfill()
    finally:
        indexer.close()
    assert summary.chunks_embedded > 0
    assert embedder.texts_pretokenized == summary.chunks_embedded


@pytest.mark.slow
def test_a_query_is_answered_between_the_batches_of_a_long_embedding(
    real_embedder: ModelEmbedder,
) -> None:
    """A search in the daemon's HTTP thread embeds its query while the main
    thread embeds a build's documents: it waits for one batch, not the group."""
    import threading

    texts = [f"Document {i} tells a longer story about item {i} and its parts." for i in range(512)]
    real_embedder.embed(texts[:64])  # loaded and warm
    group_done = threading.Event()
    started = threading.Event()

    def group() -> None:
        started.set()
        real_embedder.embed(texts)  # 8 batches
        group_done.set()

    worker = threading.Thread(target=group)
    worker.start()
    started.wait()
    vector = real_embedder.embed_query("what does item 7 consist of")
    answered_first = not group_done.is_set()
    worker.join()
    assert answered_first, "the query waited for the whole group"
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3
