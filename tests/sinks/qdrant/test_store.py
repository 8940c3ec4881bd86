"""The qdrant-client store beyond the contract both engines keep
(tests/sinks/test_contract.py): one place, local mode's signature and aliases,
batches bounded by bytes, the sparse vector, dropping, a busy local folder."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from mdindex.embedding.sparse import Sparse
from mdindex.errors import LayoutMismatch, StoreError, StoreUnavailable
from mdindex.sinks import Point
from mdindex.sinks.qdrant import QdrantStore

DIM = 4


def point(n: int, sparse: Sparse | None = None, text: str = "") -> Point:
    vector = [1.0, float(n), 0.5, 0.0]
    return Point(str(uuid.UUID(int=n + 1)), vector, {"doc_path": f"{n}.md", "text": text}, sparse)


def local(folder: Path, collection: str = "c", sparse: bool = True, **kw: Any) -> QdrantStore:
    store = QdrantStore(collection, path=folder, retry_budget_s=0.5, **kw)
    store.open()
    store.ensure_collection(DIM, sparse=sparse)
    return store


def test_a_store_is_in_exactly_one_place(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="exactly one"):
        QdrantStore("c")
    with pytest.raises(StoreError, match="exactly one"):
        QdrantStore("c", path=tmp_path, url="http://127.0.0.1:6333")
    server = QdrantStore("c", url="https://bob:hunter2@qdrant.example:6333")
    assert not server.local and server.where == "https://***@qdrant.example:6333"
    assert server.signature() == "" and server.disk_bytes() is None  # nothing local to read
    here = QdrantStore("c", path=tmp_path / "q")
    assert here.local and here.where == str(tmp_path / "q")


def test_the_signature_is_this_collections_files_only(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    assert QdrantStore("a", path=folder).signature() == "absent"
    a = local(folder, "a")
    a.upsert([point(1)])
    a.close()
    signed = a.signature()
    assert signed not in ("", "absent")
    b = local(folder, "b")  # another version in the same folder
    b.upsert([point(2)])
    b.close()
    assert QdrantStore("a", path=folder).signature() == signed
    a = local(folder, "a")
    a.upsert([point(3)])
    a.close()
    assert a.signature() != signed


def test_aliases_name_one_collection_and_move_in_one_step(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    a, b = local(folder, "a"), local(folder, "b")
    try:
        a.upsert([point(1)])
        b.upsert([point(1), point(2)])
        assert a.alias_target("mdindex") is None
        assert a.point_alias("mdindex") is True
        assert b.alias_target("mdindex") == "a"
        assert a.client.count("mdindex", exact=True).count == 1  # read through the alias
        assert b.point_alias("mdindex") is True
        assert a.alias_target("mdindex") == "b"
        assert b.client.count("mdindex", exact=True).count == 2
    finally:
        a.close()
        b.close()


def test_batches_bounded_by_bytes_still_write_every_point(tmp_path: Path) -> None:
    store = local(tmp_path / "qdrant", batch_points=100, batch_bytes=2048)
    try:
        points = [point(i, text=f"{i} " + "x" * 900) for i in range(9)]  # two to a batch
        points.append(point(99, text="y" * 10_000))  # over the bound alone: written alone
        assert store.upsert(points) == 10
        stored = {pid: payload for pid, payload, _ in store.scroll()}
        assert stored == {p.id: p.payload for p in points}
    finally:
        store.close()


def test_sparse_vectors_where_the_collection_has_them(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    store = local(folder, "s")
    try:
        assert store.has_sparse
        store.upsert([point(1, Sparse([7, 3], [0.25, 0.5])), point(2)])
        assert store.sparse_vectors([point(1).id, point(2).id]) == {
            point(1).id: Sparse([3, 7], [0.5, 0.25])  # indices in order
        }
        assert store.sparse_vectors([]) == {}
    finally:
        store.close()
    dense = local(folder, "d", sparse=False)
    try:
        assert not dense.has_sparse
        dense.upsert([point(1, Sparse([3], [0.5]))])  # its dense half only
        assert dense.count() == 1 and dense.sparse_vectors([point(1).id]) == {}
    finally:
        dense.close()
    # read back from the collection itself by a store that did not create it
    for collection, has in (("s", True), ("d", False)):
        again = QdrantStore(collection, path=folder).open()
        try:
            assert again.has_sparse is has
        finally:
            again.close()
    refused = QdrantStore("d", path=folder).open()
    try:
        with pytest.raises(LayoutMismatch, match="no 'bm25' sparse vector"):
            refused.ensure_collection(DIM, sparse=True)
    finally:
        refused.close()


def test_drop_removes_the_collection_and_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    store, other = local(folder, "c"), local(folder, "other")
    try:
        store.upsert([point(i) for i in range(5)])
        other.upsert([point(1)])
        assert (store.disk_bytes() or 0) > 0
        store.drop()
        assert not store.exists() and store.count() == 0 and not store.has_sparse
        assert store.disk_bytes() == 0
        assert other.count() == 1  # the other version in the folder stays
        assert store.settle() is True  # nothing to build: local mode has no index
    finally:
        store.close()
        other.close()


def test_a_busy_local_folder_is_retried_then_unavailable(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    store = local(folder)
    try:
        store.upsert([point(1)])
        busy = sqlite3.connect(folder / "collection" / "c" / "storage.sqlite", isolation_level=None)
        busy.execute("BEGIN EXCLUSIVE")  # another writer holds the collection's file
        try:
            with pytest.raises(StoreUnavailable, match="database is locked"):
                store.upsert([point(2)])
        finally:
            busy.execute("ROLLBACK")
            busy.close()
        assert store.upsert([point(3)]) == 1  # free again: it writes
        assert {pid for pid, _, _ in store.scroll()} == {point(1).id, point(3).id}
    finally:
        store.close()
