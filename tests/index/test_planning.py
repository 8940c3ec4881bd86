"""Planning: a file's text to the points it should be stored as. The point IDs,
the payload, the embedded text with its context prefix, and each document's
time budget."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mdindex.chunking import Chunker
from mdindex.config import Settings
from mdindex.documents.files import Failure, FileRef
from mdindex.documents.parsing import parse_document
from mdindex.documents.types import Chunk, Document, digest
from mdindex.embedding.model import ModelInfo
from mdindex.embedding.sparse import SEPARATOR, SparseEncoder, sparse_text
from mdindex.embedding.tokens import TokenCounter
from mdindex.errors import ConfigError
from mdindex.index.payload import FRAMEWORK_KEYS, public
from mdindex.index.planning import DocWork, Planned, Planner, innermost, point_id
from mdindex.runtime import make_models
from tests.conftest import Factory, TinyEmbedder, run_backfill, settings_for, stored_points

TEXT = (
    "---\ntitle: Home\n---\n# Welcome\n\nHello there.\n\n"
    "## Same\n\nRepeated words.\n\n## Same\n\nRepeated words.\n"
)


def planner_of(settings: Settings) -> Planner:
    """The planner the settings build, chunking with a tiny embedder."""
    models = make_models(settings)
    models.chunker.embed = TinyEmbedder()
    return models.planner


def planned(planner: Planner, text: str = TEXT, rel: str = "a.md") -> list[Planned]:
    doc = parse_document(text, rel, base_url=planner.settings.base_url)
    return planner.plan_points("docs", rel, doc, planner.chunker.chunk(doc))


def ref(tmp_path: Path, rel: str) -> FileRef:
    return FileRef("docs", rel, tmp_path / rel, 0, 0)


def test_a_point_id_is_a_uuid_of_exactly_its_parts() -> None:
    parts: tuple[str, str, str, int, str] = ("docs", "guide/a.md", "ab" * 32, 0, "f" * 16)
    pid = point_id(*parts)
    assert uuid.UUID(pid).version == 5 and str(uuid.UUID(pid)) == pid
    assert point_id(*parts) == pid
    changed = [
        point_id("notes", *parts[1:]),
        point_id(parts[0], "guide/b.md", *parts[2:]),
        point_id(*parts[:2], "cd" * 32, *parts[3:]),
        point_id(*parts[:3], 1, parts[4]),
        point_id(*parts[:4], "e" * 16),
    ]
    assert len(set(changed)) == 5 and pid not in changed


def test_payload_keys_and_ids_are_deterministic(
    docs_tree: Path, make_settings: Factory, tmp_path: Path, tiny: TinyEmbedder
) -> None:
    s = make_settings(docs_tree, base_url="https://docs.example")
    run_backfill(s, tiny)
    points = stored_points(s)
    keys = {
        "text",
        "root",
        "doc_path",
        "title",
        "url",
        "section",
        "heading_path",
        "chunk_index",
        "char_start",
        "char_end",
        "line_start",
        "line_end",
        "token_count",
        "content_hash",
        "doc_hash",
        "strategy",
        "model",
        "meta",
    }
    for p in points.values():
        assert keys <= p.keys()
        src = (docs_tree / p["doc_path"]).read_text()
        assert src[p["char_start"] : p["char_end"]] == p["text"]
    home = [p for p in points.values() if p["doc_path"] == "index.md" and p["section"] == "Install"]
    assert home[0]["url"] == "https://docs.example/#install"
    assert home[0]["title"] == "Home" and home[0]["heading_path"] == ["Welcome", "Install"]
    # same tree, other machine/state: same IDs
    s2 = settings_for(tmp_path / "other", [str(docs_tree)], base_url="https://docs.example")
    run_backfill(s2, TinyEmbedder())
    assert stored_points(s2).keys() == points.keys()


def test_each_plan_is_its_chunk_with_payload_key_and_id(make_settings: Factory) -> None:
    planner = planner_of(make_settings(base_url="https://docs.example"))
    plans = planned(planner)
    assert [p.payload["section"] for p in plans] == ["Welcome", "Same", "Same"]
    for index, p in enumerate(plans):
        pl = p.payload
        assert pl["chunk_index"] == index and pl["doc_path"] == "a.md" and pl["root"] == "docs"
        assert TEXT[pl["char_start"] : pl["char_end"]] == pl["text"]
        assert pl["content_hash"] == digest(pl["text"])
        assert pl["title"] == "Home" and pl["meta"] == {} and pl["strategy"] == "heading"
        assert pl["model"] == "all-MiniLM-L6-v2"
        # the nested copy that LangChain and LlamaIndex read, and nothing more in it
        assert pl["metadata"] == {k: pl[k] for k in FRAMEWORK_KEYS}
        # the vector key names the model and the text embedded, and users never see it
        assert p.vector_key == pl["vector_key"]
        assert p.vector_key == digest(f"all-MiniLM-L6-v2\x00{p.embed_input}")[:32]
        assert public(pl) == {k: v for k, v in pl.items() if k != "vector_key"}
    # the document's URL with each section's own anchor
    assert [p.payload["url"] for p in plans] == [
        "https://docs.example/a/#welcome",
        "https://docs.example/a/#same",
        "https://docs.example/a/#same-1",
    ]
    # the same text twice in one document: one vector key, two points
    first, second = plans[1], plans[2]
    assert first.payload["content_hash"] == second.payload["content_hash"]
    assert first.vector_key == second.vector_key and first.id != second.id
    assert [p.id for p in plans] == [
        point_id("docs", "a.md", p.payload["content_hash"], n, planner.id_fingerprint)
        for p, n in zip(plans, (0, 0, 1), strict=True)
    ]


@pytest.mark.parametrize("strategy", ["heading", "token", "semantic"])
def test_line_numbers_match_offsets(
    counter: TokenCounter, make_settings: Factory, strategy: str
) -> None:
    settings = make_settings(strategy=strategy)
    chunker = Chunker(counter.with_limit(40), strategy, overlap_tokens=8, embed=TinyEmbedder())
    planner = Planner(settings, settings.index.params(), _info(), counter, chunker)
    text = "---\ntitle: x\n---\n# A\n\n" + "\n".join(f"Line {i} has words." for i in range(60))
    doc = parse_document(text, "a.md")
    for p in planner.plan_points("r", "a.md", doc, chunker.chunk(doc)):
        pl = p.payload
        assert pl["line_start"] == text[: pl["char_start"]].count("\n") + 1
        assert pl["line_end"] == text[: pl["char_end"] - 1].count("\n") + 1


def _info() -> ModelInfo:
    from mdindex.embedding.model import resolve_model

    return resolve_model("all-MiniLM-L6-v2")


def test_settings_that_only_change_payloads_keep_the_ids(make_settings: Factory) -> None:
    base = planner_of(make_settings())
    ids = [p.id for p in planned(base)]
    for payload_only in ({"base_url": "https://x.example"}, {"sparse_vectors": False}):
        other = planner_of(make_settings(**payload_only))
        assert [p.id for p in planned(other)] == ids, payload_only
        # ...but every document is written again once, for its new payload
        assert other.doc_fingerprint != base.doc_fingerprint, payload_only
    for shaping in ({"prepend_context": False}, {"strategy": "token"}, {"max_tokens": 64}):
        other = planner_of(make_settings(**shaping))
        assert not {p.id for p in planned(other)} & set(ids), shaping
        assert other.doc_fingerprint != base.doc_fingerprint, shaping


def test_the_embedded_text_is_the_chunk_behind_its_context(make_settings: Factory) -> None:
    with_context = planner_of(make_settings())
    counter = with_context.counter
    for p in planned(with_context):
        context = " > ".join(["Home", *p.payload["heading_path"]])
        assert p.embed_input == f"{context}\n\n{p.payload['text']}"
        # encoded once to check that it fits, and handed on, so nobody tokenizes it again
        assert p.token_ids == counter.encode(p.embed_input).ids
    without = planner_of(make_settings(prepend_context=False))
    for p in planned(without):
        assert p.embed_input == p.payload["text"]
        assert p.token_ids == counter.encode(p.payload["text"]).ids


def chunk_of(
    counter: TokenCounter, tokens: int, path: tuple[str, ...] = ("Head",)
) -> tuple[Document, Chunk]:
    """A document with a 60-word title, and a chunk of exactly ``tokens`` tokens
    under the headings ``path``."""
    title = " ".join(f"title{i}" for i in range(60))
    body = " ".join(["word"] * tokens)
    heads = "".join(f"{'#' * (i + 1)} {h}\n\n" for i, h in enumerate(path))
    text = f"---\ntitle: {title}\n---\n{heads}{body}\n"
    doc = parse_document(text, "long.md")
    start = text.index(body)
    chunk = Chunk(body, start, start + len(body), counter.count(body), path[-1], path, "head")
    assert chunk.token_count == tokens
    return doc, chunk


def test_a_context_that_does_not_fit_keeps_its_innermost_headings(make_settings: Factory) -> None:
    planner = planner_of(make_settings())
    counter = planner.counter
    limit = counter.model_limit
    # the title (60 words) does not fit, the headings do: they are kept whole
    path = ("Guide to the install", "Linux systems", "Building from source")
    doc, chunk = chunk_of(counter, limit - 20, path)
    heads = " > ".join(path)
    assert planner.embed_input(doc, chunk) == f"{heads}\n\n{chunk.text}"
    for kept in ("Linux systems > Building from source", "Building from source"):
        room = counter.count(kept) + 1  # room for the headings kept, and a token of the one before
        doc, chunk = chunk_of(counter, limit - room, path)
        assert planner.embed_input(doc, chunk) == f"{kept}\n\n{chunk.text}"
    # one heading longer than the room: as much of its end as fits
    long_head = " ".join(f"part{i}" for i in range(40))
    doc, chunk = chunk_of(counter, limit - 20, (long_head,))
    cut = planner.embed_input(doc, chunk)
    prefix, _, text = cut.partition("\n\n")
    assert text == chunk.text
    assert prefix and long_head.endswith(prefix) and len(prefix) < len(long_head)
    assert limit - 3 <= counter.count(cut) <= limit
    # no room for a useful prefix: the chunk alone
    doc, chunk = chunk_of(counter, limit - 1)
    assert planner.embed_input(doc, chunk) == chunk.text
    [alone] = planner.plan_points("docs", "long.md", doc, [chunk])
    assert alone.embed_input == chunk.text and alone.token_ids is None  # the chunk had none


# text as read from a file: no lone surrogates
HEADING = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=">"), min_size=1, max_size=24
)


@settings(max_examples=300, deadline=None)
@given(st.lists(HEADING, min_size=1, max_size=6), st.integers(min_value=1, max_value=40))
def test_a_cut_context_is_an_end_of_it_from_a_heading(
    counter: TokenCounter, parts: list[str], room: int
) -> None:
    prefix = SEPARATOR.join(parts) + "\n\n"
    enc = counter.encode(prefix)
    assume(len(enc.ids) > room)
    kept = innermost(prefix, enc.offsets, room)
    dropped = prefix[: len(prefix) - len(kept)]
    assert prefix.endswith(kept)
    if room <= 2 or not kept:
        assert not kept.strip()
        return
    assert len(dropped) >= enc.offsets[len(enc.ids) - room][0]  # no more than room of its tokens
    # from a heading's start, or a part of the last heading when none fits whole
    assert dropped.endswith(SEPARATOR) or SEPARATOR not in kept
    assert dropped.endswith(SEPARATOR) or len(kept) < len(prefix) - prefix.rfind(SEPARATOR)


def test_sparse_vectors_come_from_the_payload_and_the_point_carries_them(
    make_settings: Factory,
) -> None:
    plans = planned(planner_of(make_settings()))
    encoder = SparseEncoder()
    for p in plans:
        assert p.sparse == encoder.document(sparse_text(p.payload, True))
        assert p.sparse is not None and p.sparse.indices
        point = p.point([0.5, 0.5], "2026-01-01T00:00:00.000Z")
        assert point.id == p.id and list(point.vector) == [0.5, 0.5] and point.sparse == p.sparse
        assert point.payload == {**p.payload, "indexed_at": "2026-01-01T00:00:00.000Z"}
        # Ray hands plans around as plain dicts
        assert Planned.from_dict(dataclasses.asdict(p)) == p
    assert all(p.sparse is None for p in planned(planner_of(make_settings(sparse_vectors=False))))


def test_plan_gives_each_document_its_work(make_settings: Factory, tmp_path: Path) -> None:
    planner = planner_of(make_settings())
    texts = {"a.md": TEXT, "b.md": "# Beta\n\nBananas.\n", "c.md": "# Gamma\n\nGrapes.\n"}
    loaded = [(ref(tmp_path, rel), parse_document(t, rel)) for rel, t in texts.items()]
    works = planner.plan(loaded)
    assert all(isinstance(w, DocWork) for w in works)
    for (r, _doc), work in zip(loaded, works, strict=True):
        assert isinstance(work, DocWork)
        assert work.ref == r and work.doc_hash == digest(texts[r.rel])
        assert work.points == planned(planner, texts[r.rel], r.rel)


class Fragile(Chunker):
    """A chunker with a bug that only one document's text brings out."""

    def chunk_many(self, docs: Sequence[Document]) -> list[list[Chunk]]:
        if any("BOOM" in doc.text for doc in docs):
            raise RuntimeError("index out of range   in\n  a chunker")
        return super().chunk_many(docs)


def test_a_chunker_bug_costs_its_document_only(make_settings: Factory, tmp_path: Path) -> None:
    s = make_settings()
    models = make_models(s)
    fragile = Fragile(models.counter, "heading")
    planner = Planner(s, s.index.params(), models.info, models.counter, fragile)
    texts = {"a.md": "# A\n\nApples.\n", "boom.md": "# B\n\nBOOM.\n", "c.md": "# C\n\nCherries.\n"}
    loaded = [(ref(tmp_path, rel), parse_document(t, rel)) for rel, t in texts.items()]
    first, failed, last = planner.plan(loaded)
    reason = "internal error while chunking: RuntimeError: index out of range in a chunker"
    assert failed == Failure("docs", "boom.md", reason)
    assert isinstance(first, DocWork) and isinstance(last, DocWork)
    assert [p.payload["text"] for p in first.points + last.points] == [
        "# A\n\nApples.",
        "# C\n\nCherries.",
    ]


def test_an_error_of_our_own_is_not_one_documents_failure(
    make_settings: Factory, tmp_path: Path
) -> None:
    """A setting that cannot work (semantic chunking without an embedder) stops the run."""
    s = make_settings(strategy="semantic")
    models = make_models(s)
    chunker = Chunker(models.counter, "semantic", embed=None)
    planner = Planner(s, s.index.params(), models.info, models.counter, chunker)
    with pytest.raises(ConfigError, match="needs an embedder"):
        planner.plan([(ref(tmp_path, "a.md"), parse_document("# A\n\nText.\n", "a.md"))])


def test_a_document_over_its_time_budget_fails_alone(
    make_settings: Factory, tmp_path: Path
) -> None:
    planner = planner_of(make_settings(file_time_budget_s=0.1))
    # chunking it takes about 0.7 s here (parsing, outside the budget in this test, 0.1 s)
    big = "".join(f"## Part {i}\n\n{'word ' * 400}\n\n" for i in range(1200))
    texts = {"a.md": "# A\n\nApples.\n", "big.md": big, "c.md": "# C\n\nCherries.\n"}
    loaded = [(ref(tmp_path, rel), parse_document(t, rel)) for rel, t in texts.items()]
    first, failed, last = planner.plan(loaded)
    assert isinstance(failed, Failure) and failed.rel == "big.md"
    assert "file_time_budget_s" in failed.reason and "0.1 s" in failed.reason
    assert isinstance(first, DocWork) and isinstance(last, DocWork)
    assert first.points == planned(planner, texts["a.md"], "a.md")
    assert last.points == planned(planner, texts["c.md"], "c.md")


def test_a_file_over_its_time_budget_is_reported_and_the_run_goes_on(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder
) -> None:
    """A shape nobody has tried yet must cost one file, not stall the daemon."""
    big = docs_tree / "big.md"
    big.write_text("".join(f"## Part {i}\n\n{'word ' * 400}\n\n" for i in range(400)))
    s = make_settings(docs_tree, file_time_budget_s=0.05)
    result = run_backfill(s, tiny)
    reasons = {e["path"]: e["reason"] for e in result["errors"]}
    assert "file_time_budget_s" in reasons["big.md"]
    docs = {p["doc_path"] for p in stored_points(s).values()}
    assert docs == {"index.md", "guide/a.md", "guide/b.md"}
    relaxed = make_settings(docs_tree)  # the default budget: indexed
    assert run_backfill(relaxed, tiny)["errors"] == []
    assert "big.md" in {p["doc_path"] for p in stored_points(relaxed).values()}


def test_every_point_carries_its_documents_language(make_settings: Factory) -> None:
    planner = planner_of(make_settings())
    zh = "# 计划\n\n我们在周末整理了项目的笔记，并且讨论了下一步的计划和需要完成的工作。\n"
    assert {p.payload["lang"] for p in planned(planner, zh)} == {"zh"}
    assert {p.payload["metadata"]["lang"] for p in planned(planner, zh)} == {"zh"}
    assert {p.payload["lang"] for p in planned(planner)} == {"en"}
    pinned = planner_of(make_settings(language="de"))
    doc = parse_document(TEXT, "a.md", language=pinned.settings.language)
    plans = pinned.plan_points("docs", "a.md", doc, pinned.chunker.chunk(doc))
    assert {p.payload["lang"] for p in plans} == {"de"}


@pytest.mark.slow
def test_prompts_go_before_what_the_real_model_embeds_and_before_each_query(
    tmp_path: Path,
) -> None:
    """A local sentence-transformers model with e5-style prompts: every stored
    vector is the model's of document_prompt + the embedded text, the chunk
    limit leaves the prompt room, and a search embeds query_prompt + query."""
    import json

    import numpy as np

    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import resolve_model
    from tests.cli_helper import mdindex

    docs = Path(__file__).resolve().parents[2] / "examples" / "docs"
    prompts = {"document_prompt": "passage: ", "query_prompt": "query: "}
    exact = {"backend": "torch", "precision": "fp32"}
    settings = settings_for(tmp_path, [docs], **prompts, **exact)
    models = make_models(settings)
    plain = make_models(settings_for(tmp_path, [docs]))
    assert models.counter.model_limit == plain.counter.model_limit - 2  # "passage", ":"
    summary = run_backfill(settings, models.embedder)
    assert summary["errors"] == []
    points = stored_points(settings, vectors=True)
    planner = models.planner
    texts = {}
    root = settings.require_roots()[0]
    for path in sorted(docs.rglob("*.md")):
        rel = path.relative_to(docs).as_posix()
        doc = parse_document(path.read_text(encoding="utf-8"), rel)
        for p in planner.plan_points(root.label, rel, doc, planner.chunker.chunk(doc)):
            texts[p.id] = p.embed_input
    assert points.keys() == texts.keys() and len(points) > 8
    assert all(t.startswith("passage: ") for t in texts.values())
    fp32 = ModelEmbedder(
        resolve_model("all-MiniLM-L6-v2"), "cpu", precision="fp32", backend="torch"
    )
    ids = list(points)
    want = fp32.embed([texts[i] for i in ids])
    got = np.asarray([points[i]["_vector"] for i in ids], dtype=np.float32)
    assert (np.sum(want * got, axis=1)).min() > 1 - 1e-4
    question = "how are files split into chunks"
    env = {"MDINDEX_QUERY_PROMPT": "query: ", "MDINDEX_DOCUMENT_PROMPT": "passage: "}
    r = mdindex("search", question, "--json", "--mode", "dense",
                "--state-dir", str(tmp_path / "state"), "-k", "1",
                env=env, backend="torch", timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (hit,) = json.loads(r.stdout)
    (vector,) = [
        np.asarray(p["_vector"], dtype=np.float32)
        for p in points.values()
        if (p["doc_path"], p["chunk_index"]) == (hit["doc_path"], hit["chunk_index"])
    ]
    with_prompt = float(np.dot(vector, fp32.embed_query("query: " + question)))
    without = float(np.dot(vector, fp32.embed_query(question)))
    assert abs(hit["score"] - with_prompt) < 1e-4 < abs(hit["score"] - without)
