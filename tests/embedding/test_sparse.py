"""BM25 sparse vectors: a function of the text alone, the same on every store."""

from __future__ import annotations

from mdindex.embedding.sparse import PARAMS, Sparse, SparseEncoder, sparse_text


def test_a_document_vector_depends_on_its_text_alone() -> None:
    enc = SparseEncoder()
    text = "Set max_tokens to cap the output. The max tokens setting caps it."
    a, b = enc.document(text), SparseEncoder().document(text)
    assert a == b and a.indices == sorted(a.indices) and len(set(a.indices)) == len(a.indices)
    assert all(v > 0 for v in a.values)
    # a term said twice weighs more than one said once (BM25's saturating tf)
    by_term = dict(zip(a.indices, a.values, strict=True))
    (token,) = enc.query("tokens").indices
    (output,) = enc.query("output").indices
    assert by_term[token] > by_term[output]


def test_identifiers_match_whole_and_in_parts() -> None:
    enc = SparseEncoder()
    doc = set(enc.document("Pass stop_sequences to end early.").indices)
    assert set(enc.query("stop_sequences").indices) <= doc
    assert set(enc.query("sequences").indices) <= doc  # stemmed part
    assert set(enc.query("stopSequences").indices) & doc


def test_queries_weigh_each_term_once_and_drop_stop_words() -> None:
    enc = SparseEncoder()
    q = enc.query("the streaming of the streaming API")
    assert q.values == [1.0] * len(q.indices) and len(q.indices) == 2
    assert enc.query("the of and") == Sparse([], [])


def test_sparse_text_comes_from_the_payload() -> None:
    payload = {"text": "Body.", "title": "Guide", "heading_path": ["Install", "Linux"]}
    assert sparse_text(payload, prepend_context=False) == "Body."
    assert sparse_text(payload, prepend_context=True) == "Guide > Install > Linux\n\nBody."
    assert sparse_text({"text": "Body."}, prepend_context=True) == "\n\nBody."
    assert SparseEncoder.params() == PARAMS
