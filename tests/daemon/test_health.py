"""How the daemon is doing: its phase and why it is degraded, the totals of its
syncs, the store failing, and the gauges of the live version, as systemd,
Prometheus and `status` hear them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdindex.daemon.health import Health
from mdindex.daemon.metrics import Metrics
from mdindex.daemon.notify import Notifier
from mdindex.errors import StoreUnavailable
from mdindex.index.summary import Summary
from tests.conftest import Factory, TinyEmbedder, build_indexer, run_backfill, stored_points
from tests.daemon.test_notify import Receiver


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    path = tmp_path / "notify.sock"
    receiver = Receiver(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield receiver
    receiver.sock.close()


@pytest.fixture
def health(systemd: Receiver) -> Health:
    return Health(Metrics(), Notifier())


def sample(health: Health, name: str) -> float | None:
    return health.metrics.registry.get_sample_value(name)


def test_the_phase_follows_startup_reconciles_and_trouble(health: Health) -> None:
    assert health.phase(ready=False) == "starting"
    assert health.phase(ready=True) == "starting"  # the model is loaded, no reconcile yet
    health.started = health.reconciling = True
    assert health.phase(ready=True) == "reconciling"
    assert health.phase(ready=False) == "starting"
    health.reconciling = False
    assert health.phase(ready=True) == "watching" and health.reason == ""
    health.refused = "root 'docs' lost more than half of its documents"
    assert health.phase(ready=True) == "degraded"
    assert health.reason == "deletions refused: root 'docs' lost more than half of its documents"
    health.reconciling = True
    assert health.phase(ready=True) == "degraded"  # trouble shows before work
    health.unhealthy = "store: unreachable"
    assert health.reason == "store: unreachable"  # the store first: nothing works without it


def test_syncs_add_up_in_the_totals_and_the_metrics(health: Health) -> None:
    assert sample(health, "mdindex_last_sync_timestamp_seconds") == 0
    first = Summary(
        files_changed=2, files_deleted=1, chunks_embedded=5, points_upserted=6, points_deleted=3
    )
    second = Summary(files_changed=1, files_failed=2, chunks_embedded=1, points_upserted=1)
    health.account(first)
    health.account(second)
    t = health.totals
    assert (t.files_changed, t.files_deleted, t.files_failed, t.chunks_embedded) == (3, 1, 2, 6)
    assert t.points_upserted == 0  # the totals systemd's line shows, and only those
    assert sample(health, "mdindex_chunks_embedded_total") == 6
    assert sample(health, "mdindex_points_upserted_total") == 7
    assert sample(health, "mdindex_points_deleted_total") == 3
    assert sample(health, "mdindex_errors_total") == 2
    assert (sample(health, "mdindex_last_sync_timestamp_seconds") or 0) > 0
    assert health.line("watching") == (
        "watching; 0 documents, 3 indexed, 1 deleted, 2 failed, 6 chunks embedded"
    )


def test_a_store_failure_until_a_sync_goes_through(health: Health, systemd: Receiver) -> None:
    health.started = True
    health.store_failed(StoreUnavailable("qdrant at http://h:6333 unreachable"))
    assert health.reason == "store: qdrant at http://h:6333 unreachable"
    assert health.phase(ready=True) == "degraded"
    assert sample(health, "mdindex_healthy") == 0 and sample(health, "mdindex_errors_total") == 1
    assert systemd.messages() == [
        "STATUS=store unavailable, retrying; 0 documents, 0 indexed, 0 deleted, 0 failed, "
        "0 chunks embedded"
    ]
    health.account(Summary())
    assert health.reason == "" and health.phase(ready=True) == "watching"


def test_publish_reads_the_live_version(
    docs_tree: Path, make_settings: Factory, tiny: TinyEmbedder, health: Health
) -> None:
    (docs_tree / "bad.md").write_bytes(b"# Bad\n\xff\xfe\n")
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    points = len(stored_points(s))
    versions = [{"fingerprint": "abc", "live": True}]
    with build_indexer(s, tiny) as indexer:
        health.publish(indexer, versions)
    g = health.gauges
    assert (g.documents, g.points, g.versions) == (3, points, versions)
    assert [f["path"] for f in g.failed] == ["bad.md"]
    assert g.last_sync is not None and g.last_sync.endswith("Z")
    assert sample(health, "mdindex_documents") == 3 and sample(health, "mdindex_points") == points
    assert sample(health, "mdindex_healthy") == 1
    assert health.line("watching").startswith("watching; 3 documents,")
    health.refused = "root 'docs' is not a folder"
    with build_indexer(s, tiny) as indexer:
        health.publish(indexer, versions)
    assert sample(health, "mdindex_healthy") == 0


def test_the_live_versions_row_counts_what_status_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Suspected in a hostile review and held: after file events, `status` said
    6 documents and its versions row (and `versions list` through the daemon)
    the 3 of the last whole reconcile, for up to rescan_interval_s."""
    from mdindex.cli import main
    from tests.conftest import settings_for
    from tests.daemon.running import QUIET_MS, Running, caught_up, wait_for

    root = tmp_path / "notes"
    root.mkdir()
    for name in "abc":
        (root / f"{name}.md").write_text(f"# {name}\n\nText {name}.\n")
    s = settings_for(tmp_path, [root], quiet_period_ms=QUIET_MS)
    d = Running(s, TinyEmbedder()).start()
    try:
        wait_for(lambda: d.daemon.shared.rollout.live is not None, 30, "the first version live")
        for i in range(4):
            (root / f"more{i}.md").write_text(f"# More {i}\n\nMore text {i}.\n")
        (root / "a.md").unlink()
        wait_for(lambda: d.daemon.api.status()["documents"] == 6, 30, "the events synced")
        # 6 is also what three of the four new notes make if the events come in
        # more than one batch; the barrier waits for the last
        status = caught_up(d)
        (live,) = [v for v in status["versions"] if v["live"]]
        assert (live["documents"], live["points"]) == (6, status["points"]), status
        assert status["coverage"] == "6 of 6"
        # `versions list` asks the daemon when one runs
        capsys.readouterr()
        assert main(["versions", "list", "--json", "--state-dir", str(s.state_dir)]) == 0
        (listed,) = [v for v in json.loads(capsys.readouterr().out) if v["live"]]
        assert listed["documents"] == 6
    finally:
        d.stop()
