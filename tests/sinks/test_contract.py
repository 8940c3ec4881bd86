"""One contract, both embedded stores: what the sync core relies on from a store."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.errors import LockError, StoreMismatch
from mdindex.sinks import Point, Store
from mdindex.sinks.base import SearchFilter, StoreQuery
from mdindex.sinks.edge import EdgeStore
from mdindex.sinks.qdrant import QdrantStore
from tests.sinks.filled import fill, pid

DIM = 8


def make(kind: str, folder: Path, **kw: Any) -> Store:
    if kind == "edge":
        return EdgeStore("c", path=folder / "edge" / "c", retry_budget_s=0.5, **kw)
    return QdrantStore("c", path=folder / "client", retry_budget_s=0.5, **kw)


@pytest.fixture(params=["client", "edge"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[Store]:
    s = make(kind, tmp_path)
    s.open()
    s.ensure_collection(DIM)
    yield s
    s.close()


def vec(i: int) -> list[float]:
    v = np.random.default_rng(i).standard_normal(DIM)
    return [float(x) for x in v / np.linalg.norm(v)]


def points(n: int, start: int = 0) -> list[Point]:
    return [
        Point(
            str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))),
            vec(i),
            {
                "text": f"chunk {i} ünïcödé 文字",
                "root": "docs",
                "doc_path": f"d{i % 3}.md",
                "content_hash": f"{i:064x}",
                "heading_path": ["A", f"B{i}"],
                "meta": {"tags": ["x", "y"], "draft": False, "weight": 1.5, "nested": {"n": i}},
                "chunk_index": i,
                "vector_key": f"key{i}",
            },
        )
        for i in range(start, start + n)
    ]


def test_empty_store(kind: str, tmp_path: Path) -> None:
    s = make(kind, tmp_path)
    s.open()
    assert s.count() == 0
    assert list(s.scroll()) == []
    assert s.search(StoreQuery(3, dense=vec(0))) == []
    assert s.signature() in ("absent", "")
    s.close()


def test_points_round_trip(store: Store) -> None:
    pts = points(10)
    assert store.upsert(pts) == 10
    assert store.count() == 10
    stored = {pid: (payload, v) for pid, payload, v in store.scroll(with_vectors=True)}
    assert set(stored) == {p.id for p in pts}
    for p in pts:
        payload, v = stored[p.id]
        assert payload == p.payload
        assert v is not None and np.allclose(v, p.vector, atol=1e-6)
    # only the payload keys asked for
    slim = {pid: payload for pid, payload, _ in store.scroll(payload=["doc_path"])}
    assert all(set(payload) == {"doc_path"} for payload in slim.values())


def test_upsert_is_idempotent_and_overwrites(store: Store) -> None:
    pts = points(5)
    store.upsert(pts)
    store.upsert(pts)
    assert store.count() == 5
    changed = Point(pts[0].id, vec(99), {**pts[0].payload, "text": "new"})
    store.upsert([changed])
    payloads = {pid: payload for pid, payload, _ in store.scroll()}
    assert payloads[pts[0].id]["text"] == "new"
    key, vector = store.vectors([pts[0].id])[pts[0].id]
    assert np.allclose(vector, vec(99), atol=1e-6)
    assert key == pts[0].payload["vector_key"]


def test_vectors_skip_unknown_ids(store: Store) -> None:
    pts = points(3)
    store.upsert(pts)
    unknown = str(uuid.uuid4())
    got = store.vectors([pts[1].id, unknown])
    assert set(got) == {pts[1].id}
    assert store.vectors([]) == {}


def test_delete(store: Store) -> None:
    pts = points(6)
    store.upsert(pts)
    assert store.delete([pts[0].id, pts[1].id, str(uuid.uuid4())]) == 3
    assert {pid for pid, _, _ in store.scroll()} == {p.id for p in pts[2:]}
    store.delete([])
    assert store.count() == 4


def test_search_orders_by_cosine(store: Store) -> None:
    pts = points(20)
    store.upsert(pts)
    hits = store.search(StoreQuery(5, dense=pts[7].vector))
    assert hits[0].id == pts[7].id
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].payload == pts[7].payload
    want = sorted(pts, key=lambda p: -float(np.dot(p.vector, pts[7].vector)))[:5]
    assert [h.id for h in hits] == [p.id for p in want]


def test_scroll_pages_through_everything(store: Store) -> None:
    pts = points(250)
    store.upsert(pts)
    assert len({pid for pid, _, _ in store.scroll(page=7)}) == 250


def test_many_points_in_small_batches(kind: str, tmp_path: Path) -> None:
    s = make(kind, tmp_path, batch_points=16, batch_bytes=4096)
    s.open()
    s.ensure_collection(DIM)
    assert s.upsert(points(100)) == 100
    assert s.count() == 100
    assert s.delete([p.id for p in points(100)]) == 100
    assert s.count() == 0
    s.close()


def test_reopen_keeps_points_and_signature_tracks_writes(kind: str, tmp_path: Path) -> None:
    s = make(kind, tmp_path)
    s.open()
    s.ensure_collection(DIM)
    s.upsert(points(4))
    s.close()
    sig = s.signature()
    assert sig not in ("", "absent")
    assert make(kind, tmp_path).signature() == sig  # read without opening
    again = make(kind, tmp_path)
    again.open()
    again.ensure_collection(DIM)
    assert again.count() == 4
    again.upsert(points(1, start=50))
    again.close()
    assert again.signature() != sig


def test_other_vector_size_is_refused(kind: str, tmp_path: Path) -> None:
    s = make(kind, tmp_path)
    s.open()
    s.ensure_collection(DIM)
    s.close()
    other = make(kind, tmp_path)
    other.open()
    with pytest.raises(StoreMismatch, match="16"):
        other.ensure_collection(16)
    other.close()


def _hold(kind: str, folder: str, ready: Any, release: Any) -> None:
    s = make(kind, Path(folder))
    s.open()
    s.ensure_collection(DIM)
    ready.set()
    release.wait(30)
    s.close()


def test_one_process_at_a_time(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store another process holds is waited for (a short-lived reader, such as a
    search without a daemon), then refused with one line."""
    from mdindex.sinks import base

    monkeypatch.setattr(base, "LOCK_WAIT_S", 0.5)
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(kind, str(tmp_path), ready, release))
    child.start()
    try:
        assert ready.wait(60)
        started = time.monotonic()
        with pytest.raises(LockError, match="another process"):
            s = make(kind, tmp_path)
            s.open()
            s.ensure_collection(DIM)
        assert time.monotonic() - started >= 0.5
        # held for a moment: the opener waits, then has it
        monkeypatch.setattr(base, "LOCK_WAIT_S", 30)
        threading.Timer(1.0, release.set).start()
        s = make(kind, tmp_path)
        s.open()
        s.ensure_collection(DIM)
        assert s.count() == 0
        s.close()
    finally:
        release.set()
        child.join(30)


def test_edge_has_keyword_indexes(tmp_path: Path) -> None:
    s = make("edge", tmp_path)
    s.open()
    s.ensure_collection(DIM)
    s.upsert(points(3))
    assert isinstance(s, EdgeStore)
    schema = s.shard.info().payload_schema
    assert {"root", "doc_path", "content_hash"} <= set(schema)
    assert all(str(schema[k].data_type).endswith("Keyword") for k in ("root", "doc_path"))
    s.close()


@pytest.fixture
def filled(kind: str, tmp_path: Path) -> Iterator[Store]:
    """The five points of tests/sinks/filled.py in the engine."""
    s = make(kind, tmp_path)
    fill(s)
    yield s
    s.close()


def filters(store: Store) -> Any:
    """The engine's own filter builders (mdindex.sinks.<engine>.query)."""
    from mdindex.sinks.edge import query as edge_query
    from mdindex.sinks.qdrant import query as client_query

    return edge_query if isinstance(store, EdgeStore) else client_query


def scrolled(store: Store, where: Any) -> set[str]:
    """The IDs of the points the engine's filter ``where`` selects."""
    if isinstance(store, EdgeStore):
        from qdrant_edge import ScrollRequest

        records, _ = store.shard.scroll(ScrollRequest(filter=where, limit=100, with_payload=True))
    else:
        assert isinstance(store, QdrantStore)
        records, _ = store.client.scroll("c", scroll_filter=where, limit=100)
    return {str(r.id) for r in records}


def test_search_filter_selects_roots_path_prefix_and_frontmatter(filled: Store) -> None:
    search_filter = filters(filled).search_filter
    assert search_filter(SearchFilter()) is None
    assert scrolled(filled, search_filter(SearchFilter(roots=("wiki",)))) == {pid(3), pid(4)}
    assert scrolled(filled, search_filter(SearchFilter(path_prefix="guide/"))) == {
        pid(0),
        pid(1),
        pid(3),
        pid(4),
    }
    # a list matches when an item does; any of the values will do
    tags = search_filter(SearchFilter(where=(("tags", ("x", "z")),)))
    assert scrolled(filled, tags) == {pid(0), pid(1), pid(3)}
    nested = search_filter(SearchFilter(where=(("nested.level", ("deep",)),)))
    assert scrolled(filled, nested) == {pid(2)}
    every = SearchFilter(roots=("docs", "wiki"), path_prefix="guide/a", where=(("tags", ("z",)),))
    assert scrolled(filled, search_filter(every)) == {pid(3)}
    # the documents under the prefix named: matched exactly, through the keyword index
    named = SearchFilter(path_prefix="guide/", doc_paths=("guide/a.md",))
    assert scrolled(filled, search_filter(named)) == {pid(0), pid(3)}
    both = SearchFilter(roots=("wiki",), path_prefix="guide/", doc_paths=("guide/a.md", "index.md"))
    assert scrolled(filled, search_filter(both)) == {pid(3)}


def test_doc_filter_is_one_document_exactly(filled: Store) -> None:
    doc_filter = filters(filled).doc_filter
    assert scrolled(filled, doc_filter("wiki", "guide/a.md")) == {pid(3)}
    assert scrolled(filled, doc_filter("docs", "guide/a.md")) == {pid(0)}
    assert scrolled(filled, doc_filter("docs", "guide")) == set()
    assert filled.doc_points("wiki", "guide/a.md.bak") == {pid(4): ""}
