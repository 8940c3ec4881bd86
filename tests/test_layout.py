"""An index built without sparse vectors gains them on the next run, nothing embedded."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mdindex.layout import recover, side
from mdindex.runtime import make_models, make_store
from mdindex.search import Query
from tests.conftest import (
    TinyEmbedder,
    assert_same,
    build_indexer,
    run_backfill,
    settings_for,
    stored_points,
)
from tests.faults.helpers import fresh_points

STORES = ["client", "edge"]


def store_folder(settings: object) -> Path:
    store = make_store(settings)  # type: ignore[arg-type]
    return Path(store.path)  # type: ignore[attr-defined]


@pytest.mark.parametrize("store", STORES)
def test_a_dense_only_index_gains_sparse_vectors_without_embedding(
    tmp_path: Path, docs_tree: Path, store: str
) -> None:
    dense_only = settings_for(tmp_path, [docs_tree], store=store, sparse_vectors=False)
    run_backfill(dense_only, TinyEmbedder())
    before = stored_points(dense_only, vectors=True)
    assert all(p["_sparse"] is None for p in before.values())
    assert not make_store(dense_only).open().has_sparse

    s = settings_for(tmp_path, [docs_tree], store=store)
    tiny = TinyEmbedder()
    summary = run_backfill(s, tiny)
    assert tiny.texts_embedded == 0 and summary["chunks_embedded"] == 0
    after = stored_points(s, vectors=True)
    assert_same(after, fresh_points(tmp_path, docs_tree, store=store))
    assert after.keys() == before.keys()
    for pid, point in after.items():
        assert np.allclose(point["_vector"], before[pid]["_vector"], atol=1e-6)
        assert point["_sparse"] is not None and point["_sparse"].indices
    folder = store_folder(s)
    assert not side(folder, "relayout").exists() and not side(folder, "old").exists()
    # and back: sparse vectors off again keeps the collection, and searches densely
    assert run_backfill(dense_only, TinyEmbedder())["chunks_embedded"] == 0


@pytest.mark.parametrize("store", STORES)
def test_a_switch_a_crash_interrupted_is_undone(
    tmp_path: Path, docs_tree: Path, store: str
) -> None:
    dense_only = settings_for(tmp_path, [docs_tree], store=store, sparse_vectors=False)
    run_backfill(dense_only, TinyEmbedder())
    want = stored_points(dense_only)
    folder = store_folder(dense_only)
    # died between the two renames: the old store aside, a half-built new one
    folder.rename(side(folder, "old"))
    side(folder, "relayout").mkdir()
    (side(folder, "relayout") / "junk").write_text("half a store")
    recover(folder)
    assert folder.is_dir() and not side(folder, "old").exists()
    assert not side(folder, "relayout").exists()
    assert stored_points(dense_only) == want
    # died while copying: a half-built new store beside the old one
    shutil.copytree(folder, side(folder, "relayout"))
    s = settings_for(tmp_path, [docs_tree], store=store)
    tiny = TinyEmbedder()
    run_backfill(s, tiny)
    assert tiny.texts_embedded == 0
    assert_same(stored_points(s, vectors=True), fresh_points(tmp_path, docs_tree, store=store))


def test_a_local_folder_shared_with_other_collections_is_not_rebuilt(
    tmp_path: Path, docs_tree: Path
) -> None:
    # qdrant-client's local mode keeps every collection in one folder (edge gives
    # each its own shard folder, which is rebuilt beside and swapped alone)
    shared, client = tmp_path / "qdrant", {"store": "client"}
    other = settings_for(
        tmp_path, [docs_tree], qdrant_path=str(shared), collection="other", **client
    )
    run_backfill(other, TinyEmbedder())
    s = settings_for(tmp_path, [docs_tree], qdrant_path=str(shared), sparse_vectors=False, **client)
    run_backfill(s, TinyEmbedder())
    sparse = settings_for(tmp_path, [docs_tree], qdrant_path=str(shared), **client)
    with pytest.raises(Exception, match="also holds other") as caught:
        run_backfill(sparse, TinyEmbedder())
    assert "sparse_vectors = false" in str(caught.value)
    assert len(stored_points(other)) == len(stored_points(s)) > 0  # both left as they were


@pytest.mark.model
def test_the_upgrade_with_the_real_model_embeds_nothing(tmp_path: Path, docs_tree: Path) -> None:
    dense_only = settings_for(tmp_path, [docs_tree], sparse_vectors=False)
    models = make_models(dense_only)
    with build_indexer(dense_only, models.embedder) as indexer:
        first = indexer.backfill()
    assert first.chunks_embedded > 0
    s = settings_for(tmp_path, [docs_tree])
    with build_indexer(s, models.embedder) as indexer:
        second = indexer.backfill()
        assert indexer.store.has_sparse
        hits = indexer.search(Query("apples", k=1, mode="sparse"))
        assert hits[0]["doc_path"] == "guide/a.md"
    assert second.chunks_embedded == 0 and second.files_changed == first.files_changed
    assert all(p["_sparse"] is not None for p in stored_points(s, vectors=True).values())
