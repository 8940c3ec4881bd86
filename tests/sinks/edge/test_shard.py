"""A qdrant-edge shard on disk: created with the model's vectors, loaded once,
and an existing one checked against the model by its own creation record."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from mdindex.errors import LayoutMismatch, LockError, StoreError, StoreMismatch
from mdindex.sinks.edge.shard import CONFIG_FILE, check_existing, create, load, read_config
from tests.conftest import umask


def made(path: Path, dimension: int = 8, sparse: bool = True, threshold: int = 1234) -> Path:
    shard = create(path, dimension, sparse, threshold)
    shard.close()
    return path


def test_create_records_the_vectors_and_load_reads_the_shard(tmp_path: Path) -> None:
    from qdrant_edge import CountRequest

    path = made(tmp_path / "store" / "c")  # the parent folder is made too
    config = read_config(path)
    assert config["vectors"] == {"": {**config["vectors"][""], "size": 8, "distance": "Cosine"}}
    assert set(config["sparse_vectors"]) == {"bm25"}
    assert config["optimizers"]["indexing_threshold"] == 1234
    shard = load(path)
    try:
        assert shard.count(CountRequest(exact=True)) == 0
    finally:
        shard.close()
    dense_only = read_config(made(tmp_path / "d", dimension=3, sparse=False))
    assert dense_only["vectors"][""]["size"] == 3 and not dense_only.get("sparse_vectors")


def test_the_store_folder_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Found by a newcomer: the Python API leaves the umask alone (the command
    line sets 077), and under umask 002 the embedded store's folders came out
    group-writable and world-readable, the indexed text with them."""
    with umask(0o002):
        made(tmp_path / "store" / "edge" / "c")
    for folder in (tmp_path / "store", tmp_path / "store" / "edge"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_a_shard_open_elsewhere_is_a_lock_error(tmp_path: Path) -> None:
    path = made(tmp_path / "c")
    first = load(path)
    try:
        with pytest.raises(LockError, match="open in another process"):
            load(path)
    finally:
        first.close()
    load(path).close()  # free again once closed


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]", '"a string"'])
def test_an_unreadable_record_is_a_store_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "c"
    path.mkdir()
    if content is not None:
        (path / CONFIG_FILE).write_text(content)
    with pytest.raises(StoreError, match=f"unreadable {CONFIG_FILE}"):
        read_config(path)


@pytest.fixture
def config(tmp_path: Path) -> dict[str, Any]:
    return read_config(made(tmp_path / "c"))


def test_the_models_vectors_are_accepted(config: dict[str, Any], tmp_path: Path) -> None:
    assert check_existing(config, tmp_path, 8, sparse=True) is True
    assert check_existing(config, tmp_path, 8, sparse=False) is True  # kept, unused
    dense_only = read_config(made(tmp_path / "d", sparse=False))
    assert check_existing(dense_only, tmp_path, 8, sparse=False) is False


def test_other_vectors_are_refused(config: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(StoreMismatch, match="has 8-d Cosine vectors but the model gives 16-d"):
        check_existing(config, tmp_path, 16, sparse=True)
    dot = copy.deepcopy(config)
    dot["vectors"][""]["distance"] = "Dot"
    with pytest.raises(StoreMismatch, match="8-d Dot vectors"):
        check_existing(dot, tmp_path, 8, sparse=True)
    named = copy.deepcopy(config)
    named["vectors"] = {"text": config["vectors"][""]}
    with pytest.raises(StoreMismatch, match="named vectors"):
        check_existing(named, tmp_path, 8, sparse=True)
    two = copy.deepcopy(config)
    two["vectors"]["other"] = config["vectors"][""]
    with pytest.raises(StoreMismatch, match="named vectors"):
        check_existing(two, tmp_path, 8, sparse=True)
    with pytest.raises(StoreMismatch, match="named vectors"):
        check_existing({}, tmp_path, 8, sparse=True)


def test_a_missing_sparse_vector_is_a_layout_mismatch(tmp_path: Path) -> None:
    dense_only = read_config(made(tmp_path / "d", sparse=False))
    with pytest.raises(LayoutMismatch, match="no 'bm25' sparse vector"):
        check_existing(dense_only, tmp_path / "d", 8, sparse=True)
    assert issubclass(LayoutMismatch, StoreMismatch)


def test_int8_quantization_and_vectors_on_disk_are_recorded_in_the_shard(tmp_path: Path) -> None:
    """Issue 37: quantization on edge keeps int8 copies in RAM and the originals
    on disk (``memory`` cold) for rescoring; without it neither is recorded."""
    from mdindex.sinks.edge.shard import quantization_of

    shard = create(tmp_path / "q", 8, True, 100, quantization="int8", on_disk_vectors=True)
    shard.close()
    config = read_config(tmp_path / "q")
    assert config["quantization_config"] == {
        "scalar": {"type": "int8", "quantile": 0.99, "memory": "pinned"}
    }
    assert config["vectors"][""]["memory"] == "cold"
    assert config["sparse_vectors"]["bm25"]["memory"] == "cold"
    assert quantization_of(config) == "int8"
    plain = read_config(made(tmp_path / "p"))
    assert "quantization_config" not in plain and "memory" not in plain["vectors"][""]
    assert "memory" not in plain["sparse_vectors"]["bm25"]
    assert quantization_of(plain) == "none"


def test_the_dense_vectors_graph_settings_are_recorded_in_the_shard(tmp_path: Path) -> None:
    """Issue 37: a new shard records the HNSW graph it builds (edges per node,
    candidates while building, the size below which a filtered search scans),
    so the optimizer of a reopened shard builds the same graph."""
    from mdindex.sinks.edge.shard import FULL_SCAN_KB, HNSW_EF_CONSTRUCT, HNSW_M

    config = read_config(made(tmp_path / "c"))
    assert config["hnsw_config"] == {
        "m": HNSW_M,
        "ef_construct": HNSW_EF_CONSTRUCT,
        "full_scan_threshold": FULL_SCAN_KB,
        "max_indexing_threads": 0,
    }
    reopened = load(tmp_path / "c")
    reopened.close()
    assert read_config(tmp_path / "c")["hnsw_config"] == config["hnsw_config"]
