"""`mdindex backfill --ray` on a local Ray instance: the same store as a local backfill."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.distributed import KILL_ONCE_ENV
from mdindex.index import graph
from mdindex.index.state import State
from mdindex.runtime import state_path
from tests.conftest import (
    REPO,
    TinyEmbedder,
    assert_same,
    build_indexer,
    run_backfill,
    settings_for,
    stored_points,
    tiny_factory,
)
from tests.faults.helpers import make_tree, mutate

pytestmark = pytest.mark.slow  # a local Ray instance

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
        indexer.close()


def test_ray_backfill_equals_a_local_one(tmp_path: Path, local_ray: None) -> None:
    root = make_tree(tmp_path / "docs", docs=40)
    (root / "broken.md").write_bytes(b"# Bad\n\xff\xfe not utf-8\n")
    (root / "links.md").write_text("# Links\n\n[[doc01]] and [zero](sub/doc00.md#intro) #tagged\n")
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
    # and the link graph the workers planned is the one a local run records
    assert graphs(on_ray) == graphs(local) and len(graphs(local)) > 40


def graphs(settings: Any) -> dict[tuple[str, str], str]:
    state = State(state_path(settings))
    try:
        return graph.digests(state.db)
    finally:
        state.close()


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
    import numpy as np

    from tests.cli_helper import mdindex

    docs = REPO / "examples" / "docs"
    local = settings_for(tmp_path / "local", [docs])
    on_ray = settings_for(tmp_path / "ray", [docs])
    run_backfill(local, real_embedder)
    done = mdindex("backfill", docs, "--ray", "--json", "--state-dir", on_ray.state_dir)
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


def columns(rows: list[dict[str, str]]) -> dict[str, np.ndarray]:
    return {k: np.array([r[k] for r in rows], dtype=object) for k in rows[0]}


def stages_in_process(settings, embedder, *, crash_after_workers: bool):  # type: ignore[no-untyped-def]
    """The Ray stages of a server-mode backfill, called directly in this process:
    workers write the points themselves, then the driver commits (or crashes)."""
    from mdindex.distributed import _Chunk, _Embed, _Write, work_items, write_batch

    indexer = build_indexer(settings, embedder)

    def runner(changes, summary):  # type: ignore[no-untyped-def]
        candidates = changes.files
        donors = indexer.vector_donors()
        batch = columns(work_items(indexer, changes))
        batch = _Embed(settings, tiny_factory, set(donors), 1)(_Chunk(settings)(batch))
        indexer.state.mark_inflight(f.key for f in candidates)
        indexer.store.close()  # an embedded store takes one writer at a time
        writer = _Write(settings, donors)
        batch = writer(batch)
        writer.close()
        rows = zip(batch["reason"], batch["unchanged"], strict=True)
        planned = [not (why or same) for why, same in rows]
        ok = [w for w, p in zip(batch["written"], planned, strict=True) if p]
        assert ok and all(ok)
        if crash_after_workers:
            raise KeyboardInterrupt  # the driver dies before committing anything
        write_batch(indexer, batch, {f.key: f for f in candidates}, summary)
        indexer.writer.delete_docs(changes.deleted, summary)

    try:
        return indexer.backfill(runner=runner).as_dict()
    finally:
        indexer.close()


def test_workers_write_the_points_and_the_driver_commits(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "docs", docs=12)
    s = settings_for(tmp_path / "w", [root])
    first = stages_in_process(s, TinyEmbedder(), crash_after_workers=False)
    assert first["points_upserted"] > 0 and first["errors"] == []
    mutate(root)
    stages_in_process(s, TinyEmbedder(), crash_after_workers=False)
    local = settings_for(tmp_path / "local", [root])
    run_backfill(local, TinyEmbedder())
    assert stored_points(s) == stored_points(local)
    assert run_backfill(s, TinyEmbedder())["points_upserted"] == 0


def test_a_driver_crash_after_worker_writes_converges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_tree(tmp_path / "docs", docs=12)
    s = settings_for(tmp_path / "w", [root])
    run_backfill(s, TinyEmbedder())
    mutate(root)
    with pytest.raises(KeyboardInterrupt):
        stages_in_process(s, TinyEmbedder(), crash_after_workers=True)
    # The points the workers wrote for doc01 are now in the store, unknown to the
    # committed state; and doc01 changes again before the next run.
    doc = root / "doc01.md"
    doc.write_text(doc.read_text().replace("now says", "says at last"))
    caplog.set_level("INFO")
    run_backfill(s, TinyEmbedder())
    # Found through the in-flight marks, not by rebuilding the whole state.
    assert "being written by workers" in caplog.text
    assert "rebuilding local state" not in caplog.text
    local = settings_for(tmp_path / "local", [root])
    run_backfill(local, TinyEmbedder())
    assert stored_points(s) == stored_points(local)


def test_workers_reuse_a_vector_only_under_its_own_key(tmp_path: Path) -> None:
    """With prepend_context a point ID leaves the title out: a.md taking b.md's
    title keeps its IDs, and its stored vectors (of the old title) must not be
    reused for the new key, which b.md's points do hold."""
    root = tmp_path / "docs"
    root.mkdir()
    body = "\n## One\n\nThe same first part.\n\n## Two\n\nThe same second part.\n"
    (root / "a.md").write_text("---\ntitle: Apples\n---\n" + body)
    (root / "b.md").write_text("---\ntitle: Bananas\n---\n" + body)
    s = settings_for(tmp_path / "w", [root], prepend_context=True)
    stages_in_process(s, TinyEmbedder(), crash_after_workers=False)
    (root / "a.md").write_text("---\ntitle: Bananas\n---\n" + body)
    stages_in_process(s, TinyEmbedder(), crash_after_workers=False)
    local = settings_for(tmp_path / "local", [root], prepend_context=True)
    run_backfill(local, TinyEmbedder())
    assert_same(stored_points(s, vectors=True), stored_points(local, vectors=True))
