"""`mdindex watch`: startup, a main loop, shutdown.

Signal handlers only set flags. The main loop moves file events into the
debouncer, hands stable paths to the sync core in batches, answers what the
API's threads asked (``mailbox``), rescans periodically and after any lost
event, builds a new version in quiet moments (``builds``), and pings
systemd's watchdog only while the observer lives and work moves. Shutdown
stops the observer and the endpoints, then closes the stores and states,
within a timeout. What the API answers is ``api``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from mdindex.config import Settings, Timings
from mdindex.daemon.api import DaemonApi, Endpoints
from mdindex.daemon.builds import Builds
from mdindex.daemon.health import PASSING
from mdindex.daemon.requests import Requests
from mdindex.daemon.shared import Shared
from mdindex.daemon.work import Work
from mdindex.documents.files import FileRef
from mdindex.errors import (
    EXIT_OK,
    MdindexError,
    PruneRefused,
    StoreError,
    StoreMismatch,
)
from mdindex.index.indexer import Hooks, Indexer
from mdindex.index.lock import WriterLock
from mdindex.versions.rollout import IndexerFactory, Rollout

log = logging.getLogger(__name__)

# Settings a reload cannot change: where the index is and what is watched.
RESTART_ONLY = ("roots", "collection", "state_dir", "qdrant_url", "qdrant_path", "store")


class Daemon:
    """The lifecycle and the main loop. Its parts (``work``, the API's
    ``api``, the endpoints) are given what it shares (``shared.Shared``), not
    the daemon itself."""

    def __init__(
        self,
        settings: Settings,
        indexer_factory: IndexerFactory | None = None,
        reload: Callable[[], Settings] | None = None,
        timings: Timings | None = None,
    ) -> None:
        # what the parts below are given, not the daemon; timings: the product's
        # unless a test gives short ones
        self.shared = Shared(settings, timings or settings.timings)
        self.reload_settings = reload  # SIGHUP: the settings read again
        self.reload_requested = False
        self.exit_code = EXIT_OK
        self.indexer_factory = indexer_factory
        self.lock = WriterLock(settings.state_dir, settings.collection, "watch")
        self.api = DaemonApi(self.shared)
        self.endpoints = Endpoints()
        self.work = Work(self.shared)
        self.requests = Requests(self.shared, self.work)

    # -- signals ---------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle_exit)
        signal.signal(signal.SIGHUP, self.handle_reload)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.shared.should_exit = True

    def handle_reload(self, sig: int, frame: FrameType | None) -> None:
        self.reload_requested = True

    # -- lifecycle -------------------------------------------------------

    def run(self) -> int:
        self.check_roots()  # before anything starts: a typo is one line, not "stopped" too
        self.install_signal_handlers()
        try:
            self.startup()
            if not self.shared.should_exit:
                self.work.reconcile("startup")
            self.main_loop()
        finally:
            self.shutdown()
        return self.exit_code

    def check_roots(self) -> None:
        missing = [r for r in self.shared.roots if not r.path.is_dir()]
        if len(missing) == len(self.shared.roots):  # a typo, not a disk that is late to mount
            root = missing[0]
            raise PruneRefused(f"root {root.label!r}: {root.path} is not a folder")
        for root in missing:  # the others are indexed; it is watched once it is there
            log.error("root %s (%s) is not a folder; its documents are kept", root.label, root.path)

    def startup(self) -> None:
        s = self.shared
        self.lock.acquire()
        s.rollout = Rollout(s.settings, self.indexer_factory)
        hooks = Hooks(
            on_progress=lambda n: s.ping(),
            alive=s.ping,
            stop_requested=s.stop_requested,
            on_indexed=self.indexed,
        )
        s.builds = Builds(s.rollout, hooks, s.settings.rescan_interval_s, s.timings)
        # The socket first: a client started with the daemon waits for it to
        # answer instead of finding nothing (searches wait for the model).
        self.lock.update(**self.endpoints.start(s, self.api))
        try:
            s.rollout.open()
        except StoreError as exc:
            # the catalog alone says what to serve until the store answers
            s.health.store_failed(exc)
            self.work.rollout_pending = True
        serving = s.rollout.live or s.rollout.target()
        if s.rollout.live is None:
            s.rollout.begin(serving)  # a first version: live once complete
        indexer = s.builds.indexer(serving)
        s.builds.serve(indexer, serving)
        # What the state holds, answered while the model loads: status said 0
        # documents and 0 points until the model was in.
        self.work.update_gauges()
        # Watch first, so nothing that changes during the reconcile is missed.
        s.watcher.start()
        try:
            indexer.load_model()
            indexer.open_store()  # (a new store needs the model's dimension)
        except StoreMismatch:
            raise
        except PASSING as exc:
            # A store or an embedding server down (or answering garbage) at boot:
            # keep running; /healthz says why, and the main loop retries.
            s.health.store_failed(exc)
        self.work.update_gauges()
        s.ready.set()
        s.notify.ready(s.health.line("ready; reconciling"))
        log.info("watching %s", ", ".join(f"{r.label}={r.path}" for r in s.roots))

    def main_loop(self) -> None:
        s = self.shared
        while not s.should_exit:
            s.drain(timeout=0.1)
            s.check_roots()
            if not self.check_observer():
                return
            self.requests.serve()
            if self.reload_requested:
                self.reload()
            if s.watcher.overflowed.is_set() or self.work.rescan_due():
                s.watcher.overflowed.clear()
                self.work.reconcile("rescan")
                continue
            if s.builds.close_retired():
                self.work.update_gauges()
            if self.work.unwatched_due():
                self.work.rescan_unwatched()
            batch = s.debouncer.ready()
            if batch:
                self.work.process(batch)
            elif s.builds.due():
                self.work.build_step()
            elif self.work.settle_time():
                self.work.settle()
            s.queue = (len(s.debouncer) + s.watcher.events.qsize(), s.debouncer.oldest())
            s.metrics.queue_depth.set(s.queue[0])
            s.ping()

    def shutdown(self) -> None:
        s = self.shared
        s.notify.stopping()
        s.watcher.stop(timeout=s.timings.watcher_stop_s)
        self.endpoints.stop()
        if hasattr(s, "builds"):
            s.builds.close()
        self.lock.release()
        log.info("stopped")

    # -- the roots and the observer --------------------------------------

    def check_observer(self) -> bool:
        s = self.shared
        if s.watcher.alive():
            return True
        log.error("the file observer stopped; restarting it and rescanning")
        s.metrics.errors.inc()
        try:
            s.watcher.restart()
        except Exception as exc:  # never go on without watching
            log.error("cannot restart the observer (%s); exiting so systemd restarts us", exc)
            self.exit_code = 1
            return False
        s.watcher.overflowed.set()
        return True

    # -- requests and versions -------------------------------------------

    def reload(self) -> None:
        """Read the settings again (SIGHUP, `systemctl reload`): a change of the
        index settings builds its version beside the live one, which goes on
        answering. Roots, the store and the endpoints need a restart."""
        self.reload_requested = False
        if self.reload_settings is None:
            return
        try:
            new = self.reload_settings()
        except MdindexError as exc:
            log.error("reload: %s; keeping the settings as they were", exc)
            return
        s = self.shared
        changed = [k for k in RESTART_ONLY if getattr(new, k) != getattr(s.settings, k)]
        if changed:
            log.warning("reload: %s change only with a restart; ignored", ", ".join(changed))
            new = new.model_copy(update={k: getattr(s.settings, k) for k in changed})
        s.settings = new
        s.rollout.settings = new
        s.builds.retarget()
        self.work.update_gauges()

    def indexed(self, refs: list[FileRef]) -> None:
        if not self.shared.builds.now:  # a build's writes are not what users wait for
            now = time.time()
            for ref in refs:
                self.shared.metrics.latency.observe(max(0.0, now - ref.mtime_ns / 1e9))

    # -- for tests ---------------------------------------------------------

    @property
    def indexer(self) -> Indexer | None:
        """The live version's sync core (None before startup made it)."""
        builds = getattr(self.shared, "builds", None)
        return builds.live if builds is not None else None

    @property
    def phase(self) -> str:
        return self.shared.phase

    def status(self, wait: float | None = None) -> dict[str, Any]:
        return self.api.status(wait)

    def request_reconcile(
        self, timeout: float | None = None, force: bool = False
    ) -> dict[str, Any]:
        return self.api.reconcile(timeout, force)


def run_daemon(settings: Settings, reload: Callable[[], Settings] | None = None) -> int:
    return Daemon(settings, reload=reload).run()
