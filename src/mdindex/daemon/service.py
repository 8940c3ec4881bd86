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

from mdindex.config import Settings
from mdindex.daemon.api import DaemonApi, Endpoints
from mdindex.daemon.builds import Builds
from mdindex.daemon.health import PASSING, Health
from mdindex.daemon.http import Metrics
from mdindex.daemon.mailbox import Mailbox
from mdindex.daemon.notify import Notifier
from mdindex.daemon.timings import Timings
from mdindex.daemon.watcher import Debouncer, Watcher
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
    def __init__(
        self,
        settings: Settings,
        indexer_factory: IndexerFactory | None = None,
        reload: Callable[[], Settings] | None = None,
        timings: Timings | None = None,
    ) -> None:
        self.settings = settings
        self.timings = timings or Timings()  # the product's; tests give short ones
        self.reload_settings = reload  # SIGHUP: the settings read again
        self.reload_requested = False
        self.should_exit = False
        self.exit_code = EXIT_OK
        self.indexer_factory = indexer_factory
        # The catalog is read once the writer lock is held (startup): read before,
        # a backfill slipping in between could change it under the daemon.
        self.rollout: Rollout
        self.builds: Builds
        self.roots = settings.root_list()
        self.lock = WriterLock(settings.state_dir, settings.collection, "watch")
        self.watcher = Watcher(self.roots, settings.queue_size)
        self.debouncer = Debouncer(settings.quiet_period_ms / 1000)
        self.mailbox = Mailbox(stopping=lambda: self.should_exit)
        self.notify = Notifier()
        self.metrics = Metrics()
        self.api = DaemonApi(self)
        self.endpoints = Endpoints()
        self.ready = threading.Event()  # the model is loaded: searches can be answered
        self.health = Health(self.metrics, self.notify)
        self.work = Work(self)
        self.queue: tuple[int, float | None] = (0, None)  # paths waiting, oldest event

    @property
    def indexer(self) -> Indexer | None:
        """The live version's sync core (None before startup made it)."""
        builds = getattr(self, "builds", None)
        return builds.live if builds is not None else None

    # -- signals ---------------------------------------------------------

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle_exit)
        signal.signal(signal.SIGHUP, self.handle_reload)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.should_exit = True

    def handle_reload(self, sig: int, frame: FrameType | None) -> None:
        self.reload_requested = True

    # -- lifecycle -------------------------------------------------------

    def run(self) -> int:
        self.install_signal_handlers()
        try:
            self.startup()
            if not self.should_exit:
                self.work.reconcile("startup")
            self.main_loop()
        finally:
            self.shutdown()
        return self.exit_code

    def startup(self) -> None:
        missing = [r for r in self.roots if not r.path.is_dir()]
        if len(missing) == len(self.roots):  # a typo, not a disk that is late to mount
            root = missing[0]
            raise PruneRefused(f"root {root.label!r}: {root.path} is not a folder")
        for root in missing:  # the others are indexed; it is watched once it is there
            log.error("root %s (%s) is not a folder; its documents are kept", root.label, root.path)
        self.lock.acquire()
        self.rollout = Rollout(self.settings, self.indexer_factory)
        hooks = Hooks(
            on_progress=lambda n: self.ping(),
            stop_requested=self.stop_requested,
            on_indexed=self.indexed,
        )
        self.builds = Builds(self.rollout, hooks, self.settings.rescan_interval_s, self.timings)
        # The socket first: a client started with the daemon waits for it to
        # answer instead of finding nothing (searches wait for the model).
        self.lock.update(**self.endpoints.start(self, self.api))
        try:
            self.rollout.open()
        except StoreError as exc:
            # the catalog alone says what to serve until the store answers
            self.health.store_failed(exc)
            self.work.rollout_pending = True
        serving = self.rollout.live or self.rollout.target()
        if self.rollout.live is None:
            self.rollout.begin(serving)  # a first version: live once complete
        indexer = self.builds.indexer(serving)
        self.builds.serve(indexer, serving)
        # Watch first, so nothing that changes during the reconcile is missed.
        self.watcher.start()
        try:
            indexer.load_model()
            indexer.open_store()  # (a new store needs the model's dimension)
        except StoreMismatch:
            raise
        except PASSING as exc:
            # A store or an embedding server down (or answering garbage) at boot:
            # keep running; /healthz says why, and the main loop retries.
            self.health.store_failed(exc)
        self.work.update_gauges()
        self.ready.set()
        self.notify.ready(self.health.line("ready; reconciling"))
        log.info("watching %s", ", ".join(f"{r.label}={r.path}" for r in self.roots))

    def main_loop(self) -> None:
        while not self.should_exit:
            self.drain(timeout=0.1)
            self.check_roots()
            if not self.check_observer():
                return
            self.work.serve_requests()
            if self.reload_requested:
                self.reload()
            if self.watcher.overflowed.is_set() or self.work.rescan_due():
                self.watcher.overflowed.clear()
                self.work.reconcile("rescan")
                continue
            if self.builds.close_retired():
                self.work.update_gauges()
            if self.work.unwatched_due():
                self.work.rescan_unwatched()
            batch = self.debouncer.ready()
            if batch:
                self.work.process(batch)
            elif self.builds.due():
                self.work.build_step()
            elif self.work.settle_time():
                self.work.settle()
            self.queue = (
                len(self.debouncer) + self.watcher.events.qsize(),
                self.debouncer.oldest(),
            )
            self.metrics.queue_depth.set(self.queue[0])
            self.ping()

    def shutdown(self) -> None:
        self.notify.stopping()
        self.watcher.stop(timeout=self.timings.watcher_stop_s)
        self.endpoints.stop()
        if hasattr(self, "builds"):
            self.builds.close()
        self.lock.release()
        log.info("stopped")

    # -- the roots and the observer --------------------------------------

    def check_roots(self) -> bool:
        """A root replaced by another folder, gone, or back: the observer follows
        what is there now, the paths waiting are dropped, and a rescan (under the
        guard) catches up. True when that happened."""
        if not self.watcher.follow_roots():
            return False
        self.debouncer.pending.clear()  # paths of the old folder say nothing about the new
        self.watcher.overflowed.set()  # rescan now
        return True

    def check_observer(self) -> bool:
        if self.watcher.alive():
            return True
        log.error("the file observer stopped; restarting it and rescanning")
        self.metrics.errors.inc()
        try:
            self.watcher.restart()
        except Exception as exc:  # never go on without watching
            log.error("cannot restart the observer (%s); exiting so systemd restarts us", exc)
            self.exit_code = 1
            return False
        self.watcher.overflowed.set()
        return True

    def drain(self, timeout: float) -> None:
        """Move queued events into the debouncer; wait up to ``timeout`` for the first."""
        self.debouncer.take(self.watcher.events, timeout)

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
        changed = [k for k in RESTART_ONLY if getattr(new, k) != getattr(self.settings, k)]
        if changed:
            log.warning("reload: %s change only with a restart; ignored", ", ".join(changed))
            new = new.model_copy(update={k: getattr(self.settings, k) for k in changed})
        self.settings = new
        self.rollout.settings = new
        self.builds.retarget()
        self.work.update_gauges()

    def busy(self) -> bool:
        """Something waits that comes before building: events, requests, a stop."""
        self.drain(timeout=0)
        return bool(
            self.should_exit
            or len(self.debouncer)
            or self.mailbox
            or self.watcher.overflowed.is_set()
        )

    def stop_requested(self) -> bool:
        return self.should_exit or (self.builds.now and self.busy())

    def indexed(self, refs: list[FileRef]) -> None:
        if not self.builds.now:  # a build's writes are not what users wait for
            now = time.time()
            for ref in refs:
                self.metrics.latency.observe(max(0.0, now - ref.mtime_ns / 1e9))

    # -- syncing ---------------------------------------------------------

    # -- what is published -----------------------------------------------

    def ping(self) -> None:
        """Tell systemd we are alive, but only while the observer is."""
        if self.watcher.alive():
            self.notify.watchdog()

    @property
    def phase(self) -> str:
        return self.health.phase(self.ready.is_set())

    # -- for tests ---------------------------------------------------------

    def status(self, wait: float | None = None) -> dict[str, Any]:
        return self.api.status(wait)

    def request_reconcile(
        self, timeout: float | None = None, force: bool = False
    ) -> dict[str, Any]:
        return self.api.reconcile(timeout, force)


def run_daemon(settings: Settings, reload: Callable[[], Settings] | None = None) -> int:
    return Daemon(settings, reload=reload).run()
