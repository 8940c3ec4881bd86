"""A daemon on a thread, for tests: started, stopped as SIGTERM would stop it,
and read back; and the waits the daemon tests share."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mdindex.config import Timings
from mdindex.daemon.service import Daemon
from mdindex.index.indexer import Hooks
from tests.conftest import (
    TinyEmbedder,
    build_indexer,
    differences,
    run_backfill,
    same_points,
    settings_for,
    stored_points,
)

QUIET_MS = 150


class Running:
    """A daemon on a thread, stopped the way SIGTERM would stop it."""

    def __init__(
        self, settings: Any, embedder: Any, timings: Timings | None = None, **options: Any
    ) -> None:
        self.settings = settings
        self.embedder = embedder
        self.options = options  # for every Indexer the daemon makes
        self.indexed: list[str] = []
        # the product's timers unless the test gives short ones
        self.daemon = Daemon(settings, indexer_factory=self._factory, timings=timings)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.exit_code: int | None = None

    def _factory(self, settings: Any, hooks: Hooks, **options: Any) -> Any:
        # record which documents get written, to count re-indexing
        daemons_hook = hooks.on_indexed

        def record(refs: list[Any]) -> None:
            self.indexed.extend(r.rel for r in refs)
            if daemons_hook is not None:
                daemons_hook(refs)

        mine = dataclasses.replace(hooks, on_indexed=record)
        return build_indexer(settings, self.embedder, hooks=mine, **(options | self.options))

    def _run(self) -> None:
        self.exit_code = self.daemon.run()

    def start(self) -> Running:
        self.thread.start()
        wait_for(lambda: self.daemon.work.next_rescan > 0, 60, "daemon start")
        return self

    def stop(self, timeout: float = 10) -> float:
        t = time.monotonic()
        self.daemon.shared.should_exit = True
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "daemon did not stop in time"
        return time.monotonic() - t

    def points(self, vectors: bool = False) -> dict[str, dict[str, Any]]:
        """What the daemon's store holds, as ``stored_points`` gives it."""
        out = {}
        store = self.daemon.indexer.store  # type: ignore[union-attr]
        for pid, payload, vec in store.scroll(payload=True, with_vectors=vectors):
            payload.pop("indexed_at", None)
            if vectors:
                payload["_vector"] = vec
            out[pid] = payload
        if vectors:
            sparse = store.sparse_vectors(list(out))
            for pid, payload in out.items():
                payload["_sparse"] = sparse.get(pid)
        return out


def tcp_port(d: Running) -> int:
    """The daemon's TCP port (http_port=0 picks a free one)."""
    return next(s.port for s in d.daemon.endpoints.servers if s.path is None)


def token_of(d: Running) -> str:
    from mdindex.index.lock import token_path

    return token_path(d.settings.state_dir, d.settings.collection).read_text()


def pause_after(started: float, least: float) -> None:
    """Sleep ``least``, or twice what the check begun at ``started`` took: a
    check that reads the whole store (the hostile corpus's thousands of
    points, 80 ms a read) every 50 ms took most of a core from the daemon it
    waited for; this way a check takes at most a third of one."""
    time.sleep(max(least, 2 * (time.monotonic() - started)))


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while (started := time.monotonic()) < deadline:
        if pred():
            return
        pause_after(started, 0.05)
    raise AssertionError(f"timed out waiting for {what}")


def fresh(tmp_path: Path, root: Path) -> dict[str, dict[str, Any]]:
    where = tmp_path / f"fresh-{time.monotonic_ns()}"
    s = settings_for(where, [str(root)])
    run_backfill(s, TinyEmbedder())
    return stored_points(s, vectors=True)


def converges(d: Running, tmp_path: Path, root: Path, timeout: float = 30) -> None:
    """Until the daemon's store equals a fresh backfill of ``root``, and the sync
    that wrote it is over: the points land before that sync's bookkeeping (a
    reconcile's phase, gauges, coverage and the guard's record of each root; a
    commit's ``on_indexed``), so a test that read or changed anything right
    after the points matched met a daemon still in that sync (CI saw the startup
    scan's "reconciling" where the coverage test wanted "degraded")."""
    want = fresh(tmp_path, root)
    deadline = time.monotonic() + timeout
    got: dict[str, Any] = {}
    while (started := time.monotonic()) < deadline:
        got = d.points(vectors=True)
        if same_points(got, want):
            caught_up(d, max(1.0, deadline - time.monotonic()))
            return
        pause_after(started, 0.2)
    raise AssertionError(f"store did not converge: {differences(got, want)}")


def caught_up(d: Running, timeout: float = 30) -> dict[str, Any]:
    """The daemon's own barrier (`status --wait`): every change made before the
    call synced, and the main loop past whatever it was doing when asked (the
    answer comes from the loop, between two of its jobs). Its status."""
    return d.daemon.status(wait=timeout)


@contextlib.contextmanager
def held(d: Running) -> Iterator[None]:
    """The daemon's main loop parked before its next look at the file events,
    until the block ends: what the test does meanwhile reaches it all at once,
    whatever the threads' timing (a loop that took each event as it came never
    let a queue of 3 fill; one that took a write before the chmod after it
    indexed the note)."""
    shared, parked, gate = d.daemon.shared, threading.Event(), threading.Event()
    drain = shared.drain

    def parking(timeout: float) -> None:
        parked.set()
        gate.wait(60)
        drain(timeout)

    shared.drain = parking  # type: ignore[method-assign]
    try:
        assert parked.wait(30), "the main loop never came back to the events"
        yield
    finally:
        del shared.drain  # the method again
        gate.set()
