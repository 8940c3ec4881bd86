"""BM25 sparse vectors: a function of the text alone, the same on every store."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mdindex.embedding.sparse import PARAMS, Sparse, SparseEncoder, sparse_text
from tests.conftest import corpus_files


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


def _before(text: str) -> Sparse:
    """A document's vector as every document's was before languages were told apart."""
    from qdrant_edge import Bm25, Bm25Config, TokenizerType

    config = Bm25Config(k=1.2, b=0.75, avg_len=256.0, tokenizer=TokenizerType.Code)
    vector = Bm25(Bm25Config(**_fields(config), language="english")).embed_document(text)
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    return Sparse([int(i) for i, _ in pairs], [float(v) for _, v in pairs])


def _fields(config: Any) -> dict[str, Any]:
    return {"k": config.k, "b": config.b, "avg_len": config.avg_len, "tokenizer": config.tokenizer}


def test_english_and_unknown_documents_keep_the_old_vectors_exactly() -> None:
    enc = SparseEncoder()
    texts = [p.read_text(encoding="utf-8") for p in corpus_files()[:40]]
    texts += ["Set max_tokens to cap the output.", "我们在周末整理了项目的笔记", ""]
    for text in texts:
        old = _before(text)
        assert enc.document(text) == enc.document(text, "en") == enc.document(text, "") == old
        # byte for byte: the same float32 weights
        assert [struct.pack("<f", v) for v in enc.document(text).values] == [
            struct.pack("<f", v) for v in old.values
        ]
    # an English query finds exactly the terms it found before
    q = "how do I stream tokens with stop_sequences"
    assert enc.query(q) == enc.query(q, ["en"]) == enc.query(q, [""])


def test_chinese_is_cut_into_words_and_stop_words_dropped() -> None:
    enc = SparseEncoder()
    note = "我们在周末整理了项目的笔记"
    assert len(_before(note).indices) == 1  # the whole clause one term
    zh = enc.document(note, "zh")
    assert len(zh.indices) >= 5
    q = enc.query("项目笔记", ["zh"])
    assert set(q.indices) - set(enc.query("项目笔记").indices) <= set(zh.indices)
    assert len(set(q.indices) & set(zh.indices)) >= 2
    # 的 is a Chinese stop word: the Chinese analysis adds nothing for it
    assert enc.query("的", ["zh"]) == enc.query("的")
    thai = enc.document("สวัสดีครับ วันนี้อากาศดีมาก", "th")
    assert len(thai.indices) > len(_before("สวัสดีครับ วันนี้อากาศดีมาก").indices)


def test_other_languages_add_their_stemmed_terms_to_the_english_ones() -> None:
    enc = SparseEncoder()
    note = "Мы разворачиваем сервис в контейнерах и проверяем журналы сервера."
    ru = enc.document(note, "ru")
    assert set(_before(note).indices) <= set(ru.indices)  # every English-analysis term kept
    # another form of a word: only the Russian stemmer matches it
    q = enc.query("журнал", ["ru"])
    assert set(q.indices) & set(ru.indices)
    assert not set(enc.query("журнал").indices) & set(_before(note).indices)
    for lang in ("ar", "de", "hi", "uk", "xx", "pl"):  # stemmer, stop words, or neither
        assert enc.document(note, lang).indices


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["", "en", "zh", "ja", "th", "ru", "ar", "hi", "xx"]))
def test_analysis_never_fails_on_any_text(text: str, lang: str) -> None:
    enc = SparseEncoder()
    doc = enc.document(text, lang)
    assert doc.indices == sorted(set(doc.indices)) and all(v > 0 for v in doc.values)
    q = enc.query(text, [lang])
    assert q.indices == sorted(set(q.indices)) and set(q.values) <= {1.0}


# -- invisible characters (issue 33) -------------------------------------------

from mdindex.embedding.sparse import INVISIBLE  # noqa: E402

HIDDEN = [chr(c) for c in sorted(INVISIBLE)]


def test_invisible_characters_inside_words_hide_nothing() -> None:
    """Found by a hostile review: a zero-width space inside a word (common in
    text pasted from the web, and between Chinese words) split it or joined a
    sentence into one term, so a sparse search for the word missed the note."""
    assert {"\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e", "\u200f"} <= set(HIDDEN)
    assert {chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]} <= set(HIDDEN)
    enc = SparseEncoder()
    for lang, note, word in [
        ("en", "The volcano erupted and lava reached the sea.", "volcano"),
        ("zh", "火山喷发时熔岩流入大海。", "熔岩"),
        ("", "Tune the superconductor magnets.", "superconductor"),
    ]:
        for mark in HIDDEN:
            hidden = note.replace(word, word[0] + mark + word[1:]).replace(" ", mark + " ")
            doc = enc.document(hidden, lang)
            assert doc == enc.document(note, lang), (lang, hex(ord(mark)))
            query = enc.query(word, [lang])
            assert query.indices and set(query.indices) <= set(doc.indices)
            # and a query holding one finds the clean note
            marked = enc.query(word[:1] + mark + word[1:], [lang])
            assert marked == query and set(marked.indices) <= set(enc.document(note, lang).indices)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(max_size=8) | st.sampled_from(["熔岩", "volcano", "日本語"]), max_size=12),
    st.lists(st.sampled_from(HIDDEN), max_size=12),
    st.sampled_from(["", "en", "zh", "ja", "th", "ru"]),
    st.randoms(use_true_random=False),
)
def test_invisible_characters_anywhere_leave_the_vectors_as_they_were(
    pieces: list[str], marks: list[str], lang: str, rnd: Any
) -> None:
    clean = "".join(pieces).translate(INVISIBLE)
    hidden = list(clean)
    for mark in marks:
        hidden.insert(rnd.randint(0, len(hidden)), mark)
    enc = SparseEncoder()
    assert enc.document("".join(hidden), lang) == enc.document(clean, lang)
    assert enc.query("".join(hidden), [lang]) == enc.query(clean, [lang])
