"""`mdindex backfill --ray` on a local Ray instance: the same store as a local backfill."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdindex.distributed import KILL_ONCE_ENV
from tests.conftest import (
    REPO,
    TinyEmbedder,
    build_indexer,
    run_backfill,
    settings_for,
    stored_points,
    tiny_factory,
)
from tests.faults.helpers import make_tree, mutate

ray = pytest.importorskip("ray", reason="the ray extra is not installed")


def start_ray(**env: str) -> None:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={
            "env_vars": {
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
                "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
                **env,
            }
        },
    )


@pytest.fixture
def local_ray() -> Iterator[None]:
    start_ray()
    yield
    ray.shutdown()


def ray_backfill(settings, embedder_factory=tiny_factory, driver_embedder=None):  # type: ignore[no-untyped-def]
    from mdindex import distributed

    indexer = build_indexer(settings, driver_embedder or TinyEmbedder())
    try:
        return distributed.backfill(indexer, None, factory=embedder_factory).as_dict()
    finally:
        indexer.finish()
        indexer.state.close()


def test_ray_backfill_equals_a_local_one(tmp_path: Path, local_ray: None) -> None:
    root = make_tree(tmp_path / "docs", docs=40)
    (root / "broken.md").write_bytes(b"# Bad\n\xff\xfe not utf-8\n")
    local = settings_for(tmp_path / "local", [root])
    on_ray = settings_for(tmp_path / "ray", [root])

    want = run_backfill(local, TinyEmbedder())
    got = ray_backfill(on_ray)
    assert stored_points(on_ray) == stored_points(local)
    assert got["chunks_embedded"] == want["chunks_embedded"] > 0
    assert [e["path"] for e in got["errors"]] == ["broken.md"]

    # Edits, a rename, a delete and a copy: again equal, and renames embed nothing.
    mutate(root)
    want = run_backfill(local, TinyEmbedder())
    got = ray_backfill(on_ray)
    assert stored_points(on_ray) == stored_points(local)
    assert got["chunks_embedded"] == want["chunks_embedded"]
    assert got["points_deleted"] == want["points_deleted"] > 0

    again = ray_backfill(on_ray)
    assert again["chunks_embedded"] == 0 and again["points_upserted"] == 0


def test_a_worker_killed_mid_run_still_converges(tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    start_ray(**{KILL_ONCE_ENV: str(marker)})
    try:
        root = make_tree(tmp_path / "docs", docs=40)
        on_ray = settings_for(tmp_path / "ray", [root])
        got = ray_backfill(on_ray)
    finally:
        ray.shutdown()
    assert marker.exists(), "no worker was killed"
    local = settings_for(tmp_path / "local", [root])
    run_backfill(local, TinyEmbedder())
    assert got["errors"] == []
    assert stored_points(on_ray) == stored_points(local)


@pytest.mark.model
def test_cli_ray_backfill_with_the_real_model(tmp_path: Path, real_embedder) -> None:
    import subprocess

    import numpy as np

    docs = REPO / "examples" / "docs"
    local = settings_for(tmp_path / "local", [docs])
    on_ray = settings_for(tmp_path / "ray", [docs])
    run_backfill(local, real_embedder)
    cmd = [sys.executable, "-m", "mdindex", "backfill", str(docs), "--ray", "--json"]
    cmd += ["--state-dir", str(on_ray.state_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"chunks_embedded": 11' in done.stdout
    want = stored_points(local, vectors=True)
    have = stored_points(on_ray, vectors=True)
    assert set(have) == set(want)
    for pid, payload in want.items():
        vec = np.array(payload.pop("_vector"))
        other = dict(have[pid])
        assert float(np.dot(vec, np.array(other.pop("_vector")))) > 0.999
        assert other == payload
