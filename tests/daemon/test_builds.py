"""The versions a running daemon holds: the live one that answers, the build of
the one the settings ask for (in quiet moments, switched to once complete),
those switched away from, and `versions use|drop` on them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import Settings, Timings
from mdindex.daemon.builds import Builds
from mdindex.errors import ConfigError, EmbeddingError
from mdindex.index.indexer import Hooks
from mdindex.runtime import make_store, version_of
from mdindex.versions.catalog import Catalog, Progress
from tests.conftest import TinyEmbedder, rollout_for, run_rollout, settings_for
from tests.daemon.running import QUIET_MS, Running, caught_up, converges, tcp_port, wait_for
from tests.faults.helpers import fresh_points


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    (r / "sub" / "deep").mkdir(parents=True)
    (r / "a.md").write_text("# A\n\nAlpha apples.\n\n## Two\n\nMore apples here.\n")
    (r / "sub" / "b.md").write_text("# B\n\nBeta bananas.\n")
    (r / "sub" / "deep" / "c.md").write_text("# C\n\nCherries in the deep folder.\n")
    return r


@pytest.fixture
def daemon(tmp_path: Path, root: Path) -> Iterator[Running]:
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, http_port=0)
    d = Running(s, TinyEmbedder()).start()
    yield d
    if d.thread.is_alive():
        d.stop()


def builds_serving(
    old: Settings, new: Settings, embedder: TinyEmbedder, timings: Timings | None = None
) -> Builds:
    """Builds as a daemon started with ``new`` holds them, ``old`` being live
    (with the product's timers unless ``timings``)."""
    builds = Builds(rollout_for(new, embedder), Hooks(), 600, timings or Timings())
    builds.serve(builds.indexer(version_of(old)), version_of(old))
    return builds


def test_a_build_goes_on_beside_the_live_version_and_switches(tmp_path: Path, root: Path) -> None:
    old = settings_for(tmp_path, [str(root)])
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token")
    embedder = TinyEmbedder()
    builds = builds_serving(old, new, embedder)
    try:
        assert builds.build is None and not builds.due() and builds.progress(3) is None
        builds.plan()
        assert builds.building == version_of(new) and builds.due()
        catalog = Catalog.load(new)
        assert catalog.versions[version_of(new)].status == "building"
        assert catalog.live == version_of(old)
        assert builds.progress(5) == Progress(version_of(new), 0, 5)
        was_live = builds.live
        embedded: list[int] = []
        assert builds.step(on_embedded=embedded.append) is True
        assert (builds.serving, builds.building, builds.build) == (version_of(new), "", None)
        assert builds.live is not was_live and builds.blocked == ""
        catalog = Catalog.load(new)
        assert catalog.live == version_of(new)
        assert catalog.versions[version_of(new)].embedded == sum(embedded)
        assert sum(embedded) == embedder.texts_embedded > 0
        assert builds.live is not None
        held = {pid: p for pid, p, _ in builds.live.store.scroll()}
        for payload in held.values():
            payload.pop("indexed_at")
        assert held == fresh_points(tmp_path, root, vectors=False, strategy="token")
        # the old version closes a while later, so a search that took it can finish
        assert [indexer for indexer, _ in builds.retired] == [was_live]
        assert builds.close_retired() is False
        assert builds.close_retired(wait=False) is True and builds.retired == []
        assert set(Catalog.load(new).versions) == {version_of(old), version_of(new)}  # kept: 1
    finally:
        builds.close()


class Choosing(TinyEmbedder):
    """A model with a backend to choose: it would have a run count ahead, and
    keeps what each load was told."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[int, int] | None] = []

    def lookahead(self) -> int:
        return 0 if self.runs else 10_000_000

    def load(self, run: tuple[int, int] | None = None) -> None:
        self.runs.append(run)


def test_a_build_loads_its_model_for_speed_and_holds_nothing_back(
    tmp_path: Path, root: Path
) -> None:
    """A daemon pays a load once: a build's model is loaded before its first
    pass for the fastest backend, not for that pass's count, so a pass the
    daemon stops (it is busy) has written what it could."""
    old = settings_for(tmp_path, [str(root)])
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token")
    embedder = Choosing()
    builds = builds_serving(old, new, embedder)
    try:
        builds.plan()
        assert builds.step(on_embedded=lambda n: None) is True
        assert embedder.runs[0] is None and embedder.texts_embedded > 0
    finally:
        builds.close()


def test_a_build_that_would_empty_the_index_waits(tmp_path: Path, root: Path) -> None:
    old = settings_for(tmp_path, [str(root)])
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token")
    builds = builds_serving(old, new, TinyEmbedder())
    try:
        builds.plan()
        root.rename(root.with_name("unmounted"))
        started = time.monotonic()
        assert builds.step(on_embedded=lambda n: None) is False
        assert "holds 0 documents against 3" in builds.blocked
        assert builds.serving == version_of(old) and builds.build is not None
        assert not builds.due() and builds.retry_at >= started + 600  # until the next rescan
        assert Catalog.load(new).live == version_of(old)
        # the settings go back: the build is no longer asked for
        builds.rollout.settings = old
        builds.retarget()
        assert builds.building == "" and builds.blocked == ""
        assert builds.build is None
    finally:
        builds.close()


class Refusing(TinyEmbedder):
    """An embedding server that is down."""

    def embed(self, texts: Any, token_ids: Any = None) -> Any:
        raise EmbeddingError("embedding server: connection refused")


def test_a_build_the_embedder_refused_goes_on_after_the_daemons_retry_wait(
    tmp_path: Path, root: Path
) -> None:
    """Issue 35: a test set the work loop's retry wait while the build read a
    second constant of its own and still waited 5 s; both read ``Timings``."""
    old = settings_for(tmp_path, [str(root)])
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token")
    builds = builds_serving(old, new, Refusing(), Timings(store_retry_s=0.25))
    try:
        builds.plan()
        started = time.monotonic()
        assert builds.step(on_embedded=lambda n: None) is False
        assert "connection refused" in builds.blocked
        assert started + 0.25 <= builds.retry_at <= time.monotonic() + 0.25
        assert builds.serving == version_of(old) and builds.build is not None
    finally:
        builds.close()


def test_versions_in_use_are_not_dropped_and_use_rolls_back(tmp_path: Path, root: Path) -> None:
    old = settings_for(tmp_path, [str(root)])
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token")
    builds = builds_serving(old, new, TinyEmbedder())
    try:
        builds.plan()
        with pytest.raises(ConfigError, match="in use by a build"):
            builds.drop([version_of(new)[:6]])
        with pytest.raises(ConfigError, match="is live"):
            builds.drop([version_of(old)])
        assert builds.drop([]) == {"dropped": []}
        assert builds.step(on_embedded=lambda n: None)
        # roll back: the old version is caught up and switched to like any build
        assert builds.use([version_of(old)[:6]]) == {
            "live": version_of(new),
            "target": version_of(old),
        }
        assert builds.building == version_of(old)
        assert builds.step(on_embedded=lambda n: None) and builds.serving == version_of(old)
        assert Catalog.load(new).pinned == {"fingerprint": version_of(old), "over": version_of(new)}
        assert builds.drop([]) == {"dropped": [version_of(new)]}
        assert list(Catalog.load(new).versions) == [version_of(old)]
        assert not (new.state_dir / "edge" / f"mdindex__{version_of(new)}").exists()
    finally:
        builds.close()


def test_a_version_switched_away_from_is_closed_after_a_while(tmp_path: Path, root: Path) -> None:
    old = settings_for(tmp_path, [str(root)], keep_versions=0)
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], strategy="token", keep_versions=0)
    builds = builds_serving(old, new, TinyEmbedder(), Timings(retire_after_s=0.2))
    try:
        builds.plan()
        assert builds.step(on_embedded=lambda n: None)
        assert builds.close_retired() is False
        time.sleep(0.3)
        assert builds.close_retired() is True
        # keep_versions = 0: the old version is dropped with it
        assert list(Catalog.load(new).versions) == [version_of(new)]
    finally:
        builds.close()


class SlowTiny(TinyEmbedder):
    """A TinyEmbedder that takes its time, as a real model does, and embeds no
    document before ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def embed(self, texts: Any, token_ids: Any = None) -> Any:
        if len(texts) > 1:  # documents, not a query
            assert self.go.wait(30)
            time.sleep(0.15)
        return super().embed(texts, token_ids)


@pytest.mark.slow
def test_a_settings_change_is_built_beside_while_searches_go_on(tmp_path: Path) -> None:
    """The daemon started with new settings answers from the old version while
    it builds the new one (an event meanwhile reaches both), shows both in
    status with the build's progress, and switches without a restart; a client
    searching all along never gets an error or an empty answer."""
    from mdindex.runtime import version_of
    from mdindex.versions.catalog import Catalog
    from tests.conftest import run_rollout
    from tests.faults.helpers import fresh_points, make_tree

    root = make_tree(tmp_path / "docs", docs=24)
    old = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    run_rollout(old, TinyEmbedder())
    new = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS, strategy="token")
    model = SlowTiny()
    d = Running(new, model, group_docs=2)
    answers: list[str] = []
    failures: list[str] = []
    searching = threading.Event()
    searching.set()

    def client() -> None:
        while searching.is_set():
            try:
                hits = d.daemon.api.search({"q": "document section item", "k": 3})
                answers.append(hits[0]["strategy"] if hits else "EMPTY")
                # the build goes on once the old version answered: a client
                # thread started late on a loaded machine asked first after the switch
                model.go.set()
            except Exception as exc:
                failures.append(repr(exc))
            time.sleep(0.01)

    d.start()
    searcher = threading.Thread(target=client, daemon=True)
    searcher.start()
    try:
        rows: list[dict[str, Any]] = []

        def building() -> bool:
            rows[:] = d.daemon.status()["versions"]
            return any(r.get("progress") for r in rows)

        wait_for(building, 30, "a build under way")
        by_fp = {r["fingerprint"]: r for r in rows}
        assert by_fp[version_of(old)]["live"] and by_fp[version_of(old)]["status"] == "complete"
        assert by_fp[version_of(new)]["status"] == "building"
        assert " of 24 documents" in by_fp[version_of(new)]["progress"]
        # an edit during the build: searchable at once in the old version...
        (root / "late.md").write_text("# Late\n\nA zeppelin arrives during the build.\n")
        wait_for(
            lambda: any(
                h["doc_path"] == "late.md"
                for h in d.daemon.api.search({"q": "zeppelin", "k": 1, "mode": "sparse"})
            ),
            30,
            "the edit searchable during the build",
        )
        # ...and in the new one once it is live
        wait_for(lambda: Catalog.load(new).live == version_of(new), 60, "the switch")
        wait_for(lambda: answers[-1] == "token", 10, "answers from the new version")
        assert d.daemon.status()["strategy"] == "token"
        want = fresh_points(tmp_path, root, vectors=False, strategy="token")
        wait_for(lambda: d.points() == want, 30, "the new version equal to the files")
    finally:
        searching.clear()
        searcher.join(10)
        d.stop()
    assert failures == []
    assert "EMPTY" not in answers
    assert answers[0] == "heading" and answers[-1] == "token"
    switched = answers.index("token")
    assert set(answers[switched:]) == {"token"}, "answers went back to the old version"


@pytest.mark.slow
def test_a_reload_with_other_settings_switches_without_a_restart(
    daemon: Running, root: Path, tmp_path: Path
) -> None:
    """SIGHUP (`systemctl reload`) reads the settings again; a new strategy is
    built beside and switched to, with the same daemon, model and endpoints."""
    from mdindex.runtime import version_of
    from mdindex.versions.catalog import Catalog
    from tests.faults.helpers import fresh_points

    d = daemon
    converges(d, tmp_path, root)
    port = tcp_port(d)
    token = d.settings.model_copy(update={"strategy": "token"})
    d.daemon.reload_settings = lambda: token
    d.daemon.reload_requested = True  # what the SIGHUP handler sets
    wait_for(lambda: Catalog.load(token).live == version_of(token), 30, "the switch")
    want = fresh_points(tmp_path, root, vectors=False, strategy="token")
    wait_for(lambda: d.points() == want, 30, "the new version equal to the files")
    assert tcp_port(d) == port and d.thread.is_alive()
    # the switch is in the catalog and the store a moment before the main loop
    # publishes the versions' rows: the barrier waits for that loop
    rows = caught_up(d)["versions"]
    assert [(r["status"], r["live"]) for r in rows] == [("complete", True), ("complete", False)]
    # a reload that changes what only a restart can is refused, and changes nothing
    d.daemon.reload_settings = lambda: token.model_copy(update={"roots": [str(tmp_path)]})
    d.daemon.reload_requested = True
    wait_for(lambda: not d.daemon.reload_requested, 10, "the reload")
    assert d.daemon.shared.settings.roots == d.settings.roots


@pytest.mark.slow
def test_versions_use_and_drop_through_the_running_daemon(
    daemon: Running, root: Path, tmp_path: Path, capsys: Any
) -> None:
    """`mdindex versions use` while the daemon holds the store: the daemon
    catches the old version up and switches to it while it answers; `drop`
    then removes the other one."""
    from mdindex.cli import main
    from mdindex.runtime import version_of
    from mdindex.versions.catalog import Catalog
    from tests.faults.helpers import fresh_points

    d = daemon
    converges(d, tmp_path, root)
    old = d.settings
    token = old.model_copy(update={"strategy": "token"})
    d.daemon.reload_settings = lambda: token
    d.daemon.reload_requested = True
    wait_for(lambda: Catalog.load(token).live == version_of(token), 30, "the switch")
    (root / "while-token.md").write_text("# While\n\nWritten while the token version was live.\n")
    state = ["--state-dir", str(old.state_dir), "--json"]

    assert main(["versions", "use", version_of(old)[:8], *state]) == 0
    assert json.loads(capsys.readouterr().out) == {"live": version_of(old)}
    catalog = Catalog.load(old)
    assert catalog.live == version_of(old)
    assert catalog.pinned == {"fingerprint": version_of(old), "over": version_of(token)}
    # the old version was caught up with what changed while it was not live
    want = fresh_points(tmp_path, root, vectors=False)
    wait_for(lambda: d.points() == want, 30, "the old version equal to the files")

    # a backfill asking the daemon for other settings is refused: it says how
    assert main(["backfill", str(root), "--strategy", "semantic", *state]) == 2
    assert "reload it" in capsys.readouterr().err
    assert main(["backfill", str(root), *state]) == 0  # the daemon's own: a reconcile
    assert json.loads(capsys.readouterr().out)["errors"] == []

    # an empty fingerprint names no version, as without a daemon (it dropped every old one)
    assert main(["versions", "drop", "", *state]) == 2
    assert "'' names no version" in capsys.readouterr().err
    assert set(Catalog.load(old).versions) == {version_of(old), version_of(token)}
    assert main(["versions", "drop", *state]) == 0
    assert json.loads(capsys.readouterr().out) == {"dropped": [version_of(token)]}
    assert list(Catalog.load(old).versions) == [version_of(old)]
    # the live one is refused, with exit 2
    assert main(["versions", "drop", version_of(old), *state]) == 2
    assert "is live" in capsys.readouterr().err


def test_a_store_grown_past_the_quantized_size_is_rebuilt_by_the_running_daemon(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quantization = "auto": the daemon's rescan after the tree grew past the
    size builds the int8 version beside the live one in its quiet moments,
    embedding nothing the live version holds, and switches; searches answer
    all along, and the new version equals the files."""
    from mdindex.sinks.edge.shard import read_config
    from mdindex.versions import quantization
    from mdindex.versions.catalog import reader_settings
    from tests.daemon.running import fresh

    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    run_rollout(s, TinyEmbedder())
    small = Catalog.load(s)
    assert small.live is not None
    monkeypatch.setattr(quantization, "AUTO_INT8_POINTS", small.versions[small.live].points + 1)
    embedder = TinyEmbedder()
    d = Running(s, embedder).start()
    try:
        caught_up(d)
        assert Catalog.load(s).live == small.live and embedder.texts_embedded == 0
        (root / "d.md").write_text("# D\n\nDates from the desert.\n")
        caught_up(d)
        assert embedder.texts_embedded == 1  # the new file's one chunk, in the live version
        d.daemon.api.reconcile()  # the periodic rescan: it records the live version's size
        wait_for(lambda: Catalog.load(s).live != small.live, 60, "the switch to int8")
        catalog = Catalog.load(s)
        assert catalog.versions[catalog.live or ""].params["quantization"] == "int8"
        assert catalog.versions[small.live].status == "complete"  # kept for a rollback
        assert embedder.texts_embedded == 1  # the build took every vector from the live one
        hits = d.daemon.api.search({"q": "dates desert", "k": 1})
        assert hits[0]["doc_path"] == "d.md"
        config = read_config(Path(make_store(reader_settings(s)).where))
        assert config["quantization_config"]["scalar"]["type"] == "int8"
        assert config["vectors"][""]["memory"] == "cold"
        assert d.points(vectors=True) == fresh(tmp_path, root)
    finally:
        d.stop()
