"""`mdindex migrate`: points and vectors move between stores; nothing is embedded."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from mdindex.embedding.embedder import ModelEmbedder
from mdindex.errors import ConfigError
from mdindex.runtime import make_store
from mdindex.sinks import Point
from mdindex.sinks.base import StoreQuery
from mdindex.versions.migrate import migrate
from tests.cli_helper import in_process
from tests.conftest import REPO, TinyEmbedder, run_backfill, settings_for, stored_points


def assert_same(got: dict[str, dict], want: dict[str, dict]) -> None:
    """Same IDs and payloads, and vectors equal up to float rounding."""
    assert set(got) == set(want)
    for pid, payload in want.items():
        other = dict(got[pid])
        assert np.allclose(other.pop("_vector"), payload["_vector"], atol=1e-6)
        assert other == {k: v for k, v in payload.items() if k != "_vector"}


def test_round_trip_client_edge_client(docs_tree: Path, tmp_path: Path) -> None:
    client = settings_for(tmp_path, [docs_tree], store="client")
    run_backfill(client, TinyEmbedder())
    want = stored_points(client, vectors=True)
    edge = client.model_copy(update={"store": "edge"})

    report = migrate(client, "edge")
    assert report.points_copied == len(want) and report.points_deleted == 0
    assert_same(stored_points(edge, vectors=True), want)
    # The next run on the new store has nothing to embed, write or rebuild.
    tiny = TinyEmbedder()
    again = run_backfill(edge, tiny)
    assert tiny.texts_embedded == 0 and again["points_upserted"] == 0

    # Back, onto a client store that has drifted: its extra point goes.
    store = make_store(client)
    store.open()
    store.upsert([Point("00000000-0000-4000-8000-000000000001", [1.0] + [0.0] * 31, {})])
    store.close()
    report = migrate(edge, "client")
    assert report.points_deleted == 1
    assert_same(stored_points(client, vectors=True), want)


def test_refusals(docs_tree: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path, [docs_tree])
    with pytest.raises(ConfigError, match="no points"):
        migrate(s, "edge" if s.store == "client" else "client")
    run_backfill(s, TinyEmbedder())
    with pytest.raises(ConfigError, match="already"):
        migrate(s, s.store)
    with pytest.raises(ConfigError, match="server URL"):
        migrate(s, "qdrant.example:6333")


@pytest.mark.slow
@pytest.mark.model
def test_cli_migrate_with_the_real_model(
    tmp_path: Path, real_embedder: ModelEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return in_process(capsys, *args, env=env)  # the commands' output: main() here

    docs = REPO / "examples" / "docs"
    state = str(tmp_path / "state")
    assert _cli("backfill", str(docs), "--state-dir", state, "--store", "client").returncode == 0
    before = _cli("search", "how do I install it", "--state-dir", state, "--store", "client")
    done = _cli("migrate", "--to", "edge", "--state-dir", state, "--store", "client", "--json")
    assert done.returncode == 0, done.stderr
    assert '"points_copied": ' in done.stdout
    after = _cli("search", "how do I install it", "--state-dir", state, "--store", "edge")
    assert after.returncode == 0 and after.stdout == before.stdout
    backfill = _cli("backfill", str(docs), "--state-dir", state, "--store", "edge", "--json")
    assert '"chunks_embedded": 0' in backfill.stdout and '"points_upserted": 0' in backfill.stdout

    s = settings_for(tmp_path, [docs], store="edge")
    stored = stored_points(s, vectors=True)
    # The vectors moved as they were: each is still the model's vector of its
    # text behind its context (prepend_context is on by default).
    texts = [
        " > ".join([p["title"], *p["heading_path"]]) + "\n\n" + p["text"] for p in stored.values()
    ]
    fresh = real_embedder.embed(texts)
    got = np.array([p["_vector"] for p in stored.values()])
    assert float(np.min(np.sum(fresh * got, axis=1))) > 0.99

    bad = _cli("migrate", "--to", "ftp://x", "--state-dir", state)
    assert bad.returncode == 2 and "--to" in bad.stderr
    down = _cli(
        "migrate",
        "--to",
        "http://127.0.0.1:9",
        "--state-dir",
        state,
        "--store",
        "edge",
        env={"MDINDEX_RETRY_BUDGET_S": "0.5"},
    )
    assert down.returncode == 3, down.stderr


def test_a_copy_into_edge_builds_each_segment_as_it_fills(tmp_path: Path) -> None:
    """Issue 37: a migration writes every point before the store's first build,
    as a cold backfill did; the copy waits while each segment is built."""
    from mdindex.sinks.edge import EdgeStore
    from mdindex.sinks.edge.optimize import graphs
    from mdindex.versions.migrate import copy_points

    source = EdgeStore("s", path=tmp_path / "s")
    source.ensure_collection(16, sparse=False)
    vectors = np.random.default_rng(5).standard_normal((1200, 16)).astype(np.float32)
    source.upsert([Point(f"{i:032x}", vectors[i].tolist(), {"i": i}) for i in range(1200)])
    tiny = {"index_min_points": 100, "indexing_threshold_kb": 1}
    target = EdgeStore("t", path=tmp_path / "t", segment_points=300, **tiny)  # type: ignore[arg-type]
    try:
        copied, seen = copy_points(source, target, prepend_context=False, sparse=False)
        assert copied == 1200 and len(seen) == 1200
        assert graphs(target.path) == 2  # 512 and 1,024 written: each built as it filled
        assert target.settle() is True and graphs(target.path) == 3 and target.count() == 1200
        hit = target.search(StoreQuery(1, dense=vectors[700].tolist()))[0]
        assert hit.payload == {"i": 700}
    finally:
        source.close()
        target.close()
