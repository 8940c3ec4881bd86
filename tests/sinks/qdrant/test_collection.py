"""Cluster settings: validated like any setting, and turned into the collection's parameters.

No Qdrant server can run here (and fake ones are not allowed), so what a
server does with them is not tested; what mdindex asks of it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mdindex.config import load_settings
from mdindex.errors import ConfigError
from mdindex.runtime import cluster_spec, make_store
from mdindex.sinks.qdrant import ClusterSpec, QdrantStore

URL = "http://127.0.0.1:9"


def test_cluster_settings_need_a_server(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shard_number applies to a Qdrant server"):
        load_settings({"state_dir": str(tmp_path), "shard_number": 3})
    with pytest.raises(ConfigError, match="write_ordering"):
        load_settings({"state_dir": str(tmp_path), "write_ordering": "strong"})
    with pytest.raises(ConfigError, match="cannot exceed replication_factor"):
        load_settings({"qdrant_url": URL, "replication_factor": 2, "write_consistency_factor": 3})
    with pytest.raises(ConfigError, match="quantization"):
        load_settings({"qdrant_url": URL, "quantization": "int4"})


def test_settings_become_the_collection_parameters() -> None:
    from qdrant_client import models as qm

    s = load_settings(
        {
            "qdrant_url": URL,
            "shard_number": 6,
            "replication_factor": 2,
            "write_consistency_factor": 2,
            "on_disk_vectors": True,
            "on_disk_payload": True,
            "quantization": "int8",
            "write_ordering": "strong",
        }
    )
    store = make_store(s)
    assert isinstance(store, QdrantStore)
    assert store.cluster == cluster_spec(s)
    params = store.cluster.create_params(384)
    assert params["vectors_config"] == qm.VectorParams(
        size=384, distance=qm.Distance.COSINE, on_disk=True
    )
    assert (params["shard_number"], params["replication_factor"]) == (6, 2)
    assert params["write_consistency_factor"] == 2 and params["on_disk_payload"] is True
    assert params["quantization_config"].scalar.type == qm.ScalarType.INT8
    assert store._ordering() == qm.WriteOrdering.STRONG


def test_defaults_ask_nothing_special(tmp_path: Path) -> None:
    from qdrant_client import models as qm

    params = ClusterSpec().create_params(8)
    assert set(params) == {"vectors_config", "sparse_vectors_config"}
    assert params["sparse_vectors_config"]["bm25"].modifier == qm.Modifier.IDF
    assert set(ClusterSpec().create_params(8, sparse=False)) == {"vectors_config"}
    local = make_store(load_settings({"state_dir": str(tmp_path), "store": "client"}))
    assert isinstance(local, QdrantStore) and local._ordering() is None
    assert local.describe() == {"engine": "qdrant-client local mode"}


def test_status_of_an_unreachable_server_still_answers() -> None:
    store = make_store(load_settings({"qdrant_url": URL, "shard_number": 2, "retry_budget_s": 0}))
    info = store.describe()
    assert info["engine"] == "qdrant server" and info["write_ordering"] == "weak"
    assert info["collection_status"].startswith("unknown")
