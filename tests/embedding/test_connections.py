"""Requests to an embedding server (``embedding.connections``) against our own
server on loopback (``tests/embedding/hostile.py``)."""

from __future__ import annotations

import time

import pytest

from mdindex.embedding.connections import answer_bytes
from mdindex.embedding.remote import RemoteEmbedder
from mdindex.errors import EmbeddingError
from tests.embedding.hostile import MODEL, hostile_server


@pytest.mark.slow
@pytest.mark.serial  # it asserts a time
def test_an_answer_sent_a_byte_at_a_time_is_cut_at_the_timeout() -> None:
    """Found by a hostile review: the timeout held for each read, not for the
    request, so a server sending its answer a byte a second held a sync (and the
    daemon's loop, which never showed degraded) for as many seconds as the
    answer has bytes: about 12 days for a batch of 128 vectors of 384."""
    with hostile_server() as server:
        embedder = RemoteEmbedder(server.url, MODEL, key="", timeout_s=1.0, retry_budget_s=0.5)
        embedder.load()
        server.drip_s = 0.2  # the honest answer to one text is about 160 bytes: 32 s
        started = time.monotonic()
        try:
            with pytest.raises(EmbeddingError) as raised:
                embedder.embed(["lava"])
        finally:
            server.drip_s = 0.0
        took = time.monotonic() - started
        assert took < 8, took  # a try or two of 1 s, and the 0.5 s retry budget
        line = str(raised.value)
        assert "127.0.0.1" in line and "within 1 s" in line and "\n" not in line, line
        server.answer = None
        assert embedder.embed(["lava"]).shape[0] == 1  # the server answering again is used
        embedder.close()


def test_an_answer_longer_than_its_vectors_can_be_is_refused_unread() -> None:
    """Found by a hostile review: any answer up to 256 MB was parsed, and one of
    "0," is 2.5 GB of Python floats (19 MB took 191 MB); four are in flight. Now
    an answer is at most what its texts' vectors can hold, 32 bytes a number."""
    with hostile_server() as server:
        embedder = RemoteEmbedder(server.url, MODEL, key="", retry_budget_s=0.5)
        embedder.load()
        bound = answer_bytes(1, embedder.dimension)
        numbers = ",".join(["0"] * bound)
        server.answer = f'{{"data": [{{"index": 0, "embedding": [{numbers}]}}]}}'.encode()
        with pytest.raises(EmbeddingError) as raised:
            embedder.embed(["lava"])
        assert f"with more than {bound:,} bytes" in str(raised.value)
        server.answer = None
        honest = embedder.embed(["lava", "chess"])  # an honest answer fits
        assert honest.shape == (2, embedder.dimension)
        embedder.close()
