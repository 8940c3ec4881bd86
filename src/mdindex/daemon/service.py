"""`mdindex watch`: startup, a main loop, shutdown.

Signal handlers only set flags. The main loop moves file events into the
debouncer, hands stable paths to the sync core in batches, rescans
periodically and after any lost event, and pings systemd's watchdog only
while the observer lives and work moves. Shutdown stops the observer and
the HTTP endpoint, then closes the store and the state, within a timeout.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from mdindex import guard
from mdindex.config import Settings
from mdindex.daemon.http import LOOPBACK, Api, HttpServer, Metrics, load_token, write_token
from mdindex.daemon.mcp_http import McpBridge
from mdindex.daemon.notify import Notifier
from mdindex.daemon.watcher import Batch, Debouncer, Watcher
from mdindex.errors import (
    EXIT_OK,
    ConfigError,
    LockError,
    MdindexError,
    PruneRefused,
    SpaceRefused,
    StoreError,
    StoreMismatch,
)
from mdindex.files import FileRef
from mdindex.lock import WriterLock, socket_path, token_path
from mdindex.mcp_server import build_server
from mdindex.models import Summary
from mdindex.rollout import IndexerFactory, Progress, Rollout
from mdindex.search import Query
from mdindex.status import fields
from mdindex.sync import Hooks, Indexer
from mdindex.versions import version_of

log = logging.getLogger(__name__)

WATCHER_STOP_S = 3.0  # of systemd's TimeoutStopSec=15s; the store closes after it
# Small groups keep the time between stop checks short (about a second of embedding on CPU).
DAEMON_GROUP_CHARS = 64_000
STORE_RETRY_S = 5.0
# watchdog can lose track of a folder that is moved and recreated quickly (its
# inotify path map gets confused); a fast-path rescan shortly after any folder
# event catches whatever it missed.
DIR_RESCAN_DELAY_S = 2.0
# Store housekeeping waits for this long a lull after the last write.
SETTLE_AFTER_S = 5.0
SOCKET_PATH_MAX = 100
# A version switched away from is closed this long after, so a search that
# took it just before the switch still finishes on it.
RETIRE_AFTER_S = 5.0
# A search that arrives while the daemon loads its model waits this long for it
# (the first load on a machine also exports and measures: about 15 s here).
STARTING_WAIT_S = 120.0


class Daemon:
    def __init__(
        self,
        settings: Settings,
        indexer_factory: IndexerFactory | None = None,
        reload: Callable[[], Settings] | None = None,
    ) -> None:
        self.settings = settings
        self.reload_settings = reload  # SIGHUP: the settings read again
        self.reload_requested = False
        self.rollout_pending = False  # the versions' opening waits for the store
        self.indexer_factory = indexer_factory
        # The catalog is read once the writer lock is held (startup): read before,
        # a backfill slipping in between could change it under the daemon.
        self.rollout: Rollout
        self.roots = settings.root_list()
        self.root_ids: dict[str, str] = {}  # the folders the observer watches (mdindex.guard)
        self.ready = threading.Event()  # the model is loaded: searches can be answered
        self.refused = ""  # deletions the guard refused, until a reconcile is not refused
        self.force_next = False  # the next reconcile deletes what the guard would refuse
        self.should_exit = False
        self.exit_code = EXIT_OK
        self.notify = Notifier()
        self.metrics = Metrics()
        self.lock = WriterLock(settings.state_dir, settings.collection, "watch")
        self.watcher = Watcher(self.roots, settings.queue_size)
        self.debouncer = Debouncer(settings.quiet_period_ms / 1000)
        self.indexer: Indexer | None = None  # the live version's, which searches use
        self.serving = ""  # its fingerprint
        # A version the settings ask for, built beside the live one while idle.
        self.build: Indexer | None = None
        self.building = ""  # its fingerprint
        self.building_now = False  # the main loop is inside a build step
        self.build_blocked = ""  # why a build waits (the disk, a missing root)
        self.build_retry_at = 0.0
        self.build_siblings: list[Indexer] = []  # old versions it takes vectors from
        self.build_embedded = 0  # chunks the build embedded so far
        self.retired: list[tuple[Indexer, float]] = []  # switched away from, closing soon
        self.versions: list[dict[str, Any]] = []  # for status, from the main thread
        self.servers: list[HttpServer] = []
        self.mcp: McpBridge | None = None
        self.socket_dir: Path | None = None  # a private folder for a socket path too long
        self.unhealthy = ""  # why, when not healthy
        self.started = False  # the startup reconcile has begun
        self.reconciling = False
        self.queue: tuple[int, float | None] = (0, None)  # paths waiting, oldest event
        self.next_rescan = 0.0
        self.settle_due = False  # the store may want housekeeping once things are quiet
        self.last_work = 0.0
        self.totals = Summary()
        # Read by the HTTP thread; the state's SQLite connection stays with the main thread.
        self.documents = 0
        self.points = 0
        self.files_seen = 0
        self.failed: list[dict[str, str]] = []
        self.last_sync: str | None = None
        # Reconciles asked for over HTTP (`mdindex backfill`, `status --wait`):
        # each waits on its event for the main loop to fill in the result.
        self.requests: queue.Queue[tuple[threading.Event, dict[str, Any]]] = queue.Queue()
        # `mdindex versions use|drop` asked over HTTP: (done, action, fingerprints, result)
        self.version_requests: queue.Queue[
            tuple[threading.Event, str, list[str], dict[str, Any]]
        ] = queue.Queue()

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
                self.reconcile("startup")
            self.main_loop()
        finally:
            self.shutdown()
        return self.exit_code

    def startup(self) -> None:
        for root in self.roots:
            if not root.path.is_dir():
                raise PruneRefused(f"root {root.label!r}: {root.path} is not a folder")
        self.lock.acquire()
        self.rollout = Rollout(self.settings, self.indexer_factory)
        # The socket first: a client started with the daemon waits for it to
        # answer instead of finding nothing (searches wait for the model).
        self.start_api()
        try:
            self.rollout.open()
        except StoreError as exc:
            # the catalog alone says what to serve until the store answers
            self.store_failed(exc)
            self.rollout_pending = True
        self.hooks = Hooks(
            on_progress=lambda n: self.ping(),
            stop_requested=self.stop_requested,
            on_indexed=self.indexed,
        )
        self.serving = self.rollout.live or self.rollout.target()
        if self.rollout.live is None:
            self.rollout.begin(self.serving)  # a first version: live once complete
        self.indexer = indexer = self.rollout.indexer(
            self.serving, hooks=self.hooks, group_chars=DAEMON_GROUP_CHARS
        )
        # Watch first, so nothing that changes during the reconcile is missed.
        self.start_watcher()
        indexer.load_model()
        try:
            indexer.open_store()
        except StoreMismatch:
            raise
        except StoreError as exc:
            # Keep running: /healthz says why, and the main loop retries.
            self.store_failed(exc)
        self.update_gauges()
        self.ready.set()
        self.notify.ready(self.status_line("ready; reconciling"))
        log.info("watching %s", ", ".join(f"{r.label}={r.path}" for r in self.roots))

    def start_api(self) -> None:
        """The Unix socket other commands ask through, and the TCP port when set."""
        s = self.settings
        token = load_token()
        write_token(token_path(s.state_dir, s.collection), token)
        self.mcp = McpBridge(
            build_server(s, _DaemonTools(self), allow_refresh=s.mcp_allow_refresh is True)
        ).start()
        api = Api(
            self.metrics,
            self.health,
            self.search,
            self.status,
            self.request_reconcile,
            token,
            mcp=self.mcp,
            versions=self.request_versions,
        )
        path = socket_path(s.state_dir, s.collection)
        if len(os.fsencode(path)) >= SOCKET_PATH_MAX:  # sun_path is 108 bytes
            self.socket_dir = Path(tempfile.mkdtemp(prefix="mdindex-"))  # 0700
            path = self.socket_dir / "api.sock"
        self.servers.append(HttpServer(api, path=path))
        record: dict[str, Any] = {"socket": str(path)}
        if s.http_port is not None:
            if s.http_host not in LOOPBACK:
                log.warning(
                    "http_host %s is not a loopback address: anyone who can reach it and "
                    "holds the token can read every indexed document",
                    s.http_host,
                )
            tcp = HttpServer(api, host=s.http_host, port=s.http_port)
            self.servers.append(tcp)
            record |= {"http_host": s.http_host, "http_port": tcp.port}
            log.info("http endpoint on http://%s:%d", s.http_host, tcp.port)
        for server in self.servers:
            server.start()
        self.lock.update(**record)
        log.info("api on %s", path)

    def start_watcher(self) -> None:
        """Watch the roots as they are now (each root's folder, by identity)."""
        self.root_ids = guard.identities(self.roots)
        self.watcher.start()

    def check_roots(self) -> bool:
        """A root replaced by another folder (``mv docs docs.bak; mkdir docs``), gone,
        or back: the observer still follows the old folder, so it is restarted on
        what is there now, and a rescan (under the guard) catches up. True when
        that happened."""
        now = guard.identities(self.roots)
        if now == self.root_ids:
            return False
        changed = sorted(set(now.items()) ^ set(self.root_ids.items()))
        labels = ", ".join(sorted({label for label, _ in changed}))
        log.warning("root %s replaced, gone or back; watching what is there now", labels)
        self.watcher.stop(timeout=WATCHER_STOP_S)
        self.debouncer.pending.clear()  # paths of the old folder say nothing about the new
        try:
            self.start_watcher()
        except Exception as exc:  # a root that is gone cannot be watched until it is back
            log.error("cannot watch the roots (%s); rescanning until they are back", exc)
            self.root_ids = now
        self.watcher.overflowed.set()  # rescan now
        return True

    def main_loop(self) -> None:
        while not self.should_exit:
            self.drain(timeout=0.1)
            self.check_roots()
            if not self.check_observer():
                return
            self.serve_requests()
            self.serve_version_requests()
            if self.reload_requested:
                self.reload()
            if self.watcher.overflowed.is_set() or time.monotonic() >= self.next_rescan:
                self.watcher.overflowed.clear()
                self.reconcile("rescan")
                continue
            self.close_retired()
            batch = self.debouncer.ready()
            if batch:
                self.process(batch)
            elif self.build is not None and time.monotonic() >= self.build_retry_at:
                self.build_step()
            elif self.settle_due and time.monotonic() - self.last_work >= SETTLE_AFTER_S:
                self.settle()
            self.queue = (
                len(self.debouncer) + self.watcher.events.qsize(),
                self.debouncer.oldest(),
            )
            self.metrics.queue_depth.set(self.queue[0])
            self.ping()

    def shutdown(self) -> None:
        self.notify.stopping()
        self.watcher.stop(timeout=WATCHER_STOP_S)
        for server in self.servers:
            server.stop()
        if self.mcp is not None:
            self.mcp.stop()
        if self.socket_dir is not None:
            self.socket_dir.rmdir()
        for indexer, _ in self.retired:
            indexer.close()
        if self.build is not None:
            self.build.close()
        for sibling in self.build_siblings:
            sibling.close()
        if self.indexer is not None:
            self.indexer.close()
        self.lock.release()
        log.info("stopped")

    # -- versions --------------------------------------------------------

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
        fixed = ("roots", "collection", "state_dir", "qdrant_url", "qdrant_path", "store")
        changed = [k for k in fixed if getattr(new, k) != getattr(self.settings, k)]
        if changed:
            log.warning("reload: %s change only with a restart; ignored", ", ".join(changed))
            new = new.model_copy(update={k: getattr(self.settings, k) for k in changed})
        self.settings = new
        self.rollout.settings = new
        self.retarget()

    def retarget(self) -> None:
        """Build what the settings (or a rollback) ask for now, if it is not live."""
        target = self.rollout.target()
        log.info("the settings ask for version %s (live: %s)", target, self.serving)
        if self.build is not None and self.building != target:
            log.info("version %s is no longer asked for; its build stops", self.building)
            self.build.close()
            for sibling in self.build_siblings:
                sibling.close()
            self.build, self.building, self.build_siblings = None, "", []
        self.build_blocked = ""
        self.plan_build()
        self.update_gauges()

    def plan_build(self) -> None:
        """Start building the version the settings ask for, when it is not live."""
        target = self.rollout.target()
        if target == self.serving or self.build is not None:
            return
        assert self.indexer is not None
        self.close_retired(wait=False)  # a retired version may be the one asked for
        try:
            self.rollout.begin(target)
            self.build_siblings = self.rollout.siblings(target, opened=[self.serving])
            self.build = self.rollout.indexer(
                target,
                hooks=self.hooks,
                group_chars=DAEMON_GROUP_CHARS,
                siblings=[self.indexer, *self.build_siblings],
            )
        except (SpaceRefused, StoreError, LockError) as exc:
            log.error("version %s cannot be built now: %s", target, exc)
            self.build_blocked = str(exc)
            for sibling in self.build_siblings:
                sibling.close()
            self.build_siblings = []
            return
        self.building = target
        self.build_embedded = 0
        log.info("serving version %s while version %s is built", self.serving, target)

    def build_step(self) -> None:
        """Go on building while nothing else waits; switch once it is complete."""
        assert self.build is not None
        if self.busy():
            return
        self.building_now = True
        self.notify.status(self.status_line(f"building version {self.building}"))
        try:
            summary = self.build.backfill(prune=True, force=True)
            self.metrics.embedded.inc(summary.chunks_embedded)
            self.build_embedded += summary.chunks_embedded
            if summary.interrupted:
                return
            self.rollout.complete(self.building, self.build, self.build_embedded)
            self.rollout.switch(self.building, self.build.store)
        except (PruneRefused, StoreError) as exc:
            log.error("version %s: %s; trying again later", self.building, exc)
            self.build_blocked = str(exc)
            # a store error may pass soon; a missing root waits for the next rescan
            wait = STORE_RETRY_S if isinstance(exc, StoreError) else self.settings.rescan_interval_s
            self.build_retry_at = time.monotonic() + wait
            return
        finally:
            self.building_now = False
        self.promote(self.build, self.building)
        self.build, self.building, self.build_blocked = None, "", ""

    def promote(self, indexer: Indexer, fp: str) -> None:
        """Searches go to ``indexer`` from now on; the one before closes soon."""
        old = self.indexer
        indexer.release_siblings()
        for sibling in self.build_siblings:
            sibling.close()
        self.build_siblings = []
        self.indexer, self.serving = indexer, fp
        if old is not None and old is not indexer:
            self.retired.append((old, time.monotonic()))
        self.settle_due = True
        self.update_gauges()
        self.notify.status(self.status_line("watching"))

    def close_retired(self, wait: bool = True) -> None:
        """Close versions switched away from a while ago (or now: not ``wait``),
        then apply keep_versions."""
        if not self.retired or (wait and time.monotonic() - self.retired[0][1] < RETIRE_AFTER_S):
            return
        for indexer, _ in self.retired:
            indexer.close()
        self.retired = []
        try:
            self.rollout.retain()
        except StoreError as exc:
            log.error("dropping old versions failed (tried again after the next switch): %s", exc)
        self.update_gauges()

    def request_versions(self, action: str, fingerprints: list[str]) -> dict[str, Any]:
        """`versions use|drop` (HTTP thread), done on the main loop."""
        done = threading.Event()
        result: dict[str, Any] = {}
        self.version_requests.put((done, action, fingerprints, result))
        while not done.wait(1.0):
            if self.should_exit:
                raise StoreError("the daemon is stopping; nothing changed")
        if "error" in result:
            raise result["error"]
        return result

    def serve_version_requests(self) -> None:
        while True:
            try:
                done, action, fingerprints, result = self.version_requests.get_nowait()
            except queue.Empty:
                return
            try:
                result |= self.use(fingerprints) if action == "use" else self.drop(fingerprints)
            except MdindexError as exc:
                result["error"] = exc
            done.set()

    def use(self, fingerprints: list[str]) -> dict[str, Any]:
        """Roll back (or forward): pin a complete version; it is caught up and
        switched to like any build, while the live one answers."""
        if len(fingerprints) != 1:
            raise ConfigError("versions use: give one FINGERPRINT (see mdindex versions list)")
        catalog = self.rollout.catalog
        fp = catalog.find(fingerprints[0])
        if catalog.versions[fp].status != "complete":
            raise ConfigError(f"versions: {fp} is {catalog.versions[fp].status}, not complete")
        own = version_of(self.settings)
        catalog.pinned = None if fp == own else {"fingerprint": fp, "over": own}
        catalog.commit()
        self.retarget()
        return {"live": self.serving, "target": fp}

    def drop(self, fingerprints: list[str]) -> dict[str, Any]:
        catalog = self.rollout.catalog
        busy = {self.serving, self.building}
        fps = [catalog.find(f) for f in fingerprints] or [
            fp for fp in catalog.versions if fp not in busy | {self.rollout.target()}
        ]
        self.close_retired(wait=False)
        for fp in fps:
            if fp in busy or any(version_of(s.settings) == fp for s in self.build_siblings):
                raise ConfigError(f"versions: {fp} is live or in use by a build; not dropped")
            self.rollout.drop(fp)
        self.update_gauges()
        return {"dropped": fps}

    def busy(self) -> bool:
        """Something waits that comes before building: events, requests, a stop."""
        self.drain(timeout=0)
        return bool(
            self.should_exit
            or len(self.debouncer)
            or not self.requests.empty()
            or not self.version_requests.empty()
            or self.watcher.overflowed.is_set()
        )

    def stop_requested(self) -> bool:
        return self.should_exit or (self.building_now and self.busy())

    def indexed(self, refs: list[FileRef]) -> None:
        if not self.building_now:  # a build's writes are not what users wait for
            self.observe_latency(refs)

    # -- work ------------------------------------------------------------

    def settle(self) -> None:
        """Let the store do its housekeeping while nothing else waits; it gives way
        (and is tried again later) as soon as an event, a request or a stop arrives."""
        assert self.indexer is not None

        def idle() -> bool:
            self.ping()  # the main loop is busy here; systemd must still hear from it
            self.drain(timeout=0)
            return not (self.should_exit or len(self.debouncer) or not self.requests.empty())

        self.notify.status(self.status_line("building the search index"))
        try:
            self.settle_due = not self.indexer.settle(idle)
        except StoreError as exc:
            self.store_failed(exc)
        self.last_work = time.monotonic()
        self.notify.status(self.status_line("watching"))

    def drain(self, timeout: float) -> None:
        """Move queued events into the debouncer; wait up to ``timeout`` for the first."""
        deadline = self.debouncer.next_deadline()
        wait = timeout if deadline is None else max(0.0, min(timeout, deadline - time.monotonic()))
        try:
            self.debouncer.add(self.watcher.events.get(timeout=wait))
        except queue.Empty:
            return
        while True:
            try:
                self.debouncer.add(self.watcher.events.get_nowait())
            except queue.Empty:
                return

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

    def serve_requests(self) -> None:
        """One reconcile answers every request queued before it started: each
        asked after its changes reached the disk, and a reconcile sees the disk."""
        waiting: list[tuple[threading.Event, dict[str, Any]]] = []
        while True:
            try:
                waiting.append(self.requests.get_nowait())
            except queue.Empty:
                break
        if not waiting:
            return
        self.force_next = self.force_next or any(result.get("force") for _, result in waiting)
        summary = self.reconcile("requested")
        for done, result in waiting:
            result.pop("force", None)
            if summary is None:
                result["error"] = self.reason or "reconcile failed"
            else:
                result.update(summary.as_dict())
            done.set()

    def request_reconcile(
        self, timeout: float | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Run a full reconcile on the main loop and return its summary (HTTP
        thread); {} when ``timeout`` passes first. ``force``: deletions the guard
        would refuse are made (`mdindex backfill --force`)."""
        done = threading.Event()
        result: dict[str, Any] = {"force": True} if force else {}
        self.requests.put((done, result))
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while not done.wait(max(0.0, min(1.0, deadline - time.monotonic()))):
            if self.should_exit:
                raise StoreError("the daemon is stopping; reconcile not run")
            if time.monotonic() >= deadline:
                return {}
        if "error" in result:
            raise StoreError(str(result["error"]))
        return result

    def reconcile(self, why: str) -> Summary | None:
        assert self.indexer is not None
        self.started = self.reconciling = True
        self.notify.status(self.status_line(f"{why}: reconciling"))
        self.next_rescan = time.monotonic() + self.settings.rescan_interval_s
        if why == "rescan":
            self.metrics.rescans.inc()
        force, self.force_next = self.force_next, False
        try:
            if self.rollout_pending:
                self.open_rollout()
            summary = self.indexer.backfill(prune=True, force=force, keep_going=True)
        except PruneRefused as exc:  # a root that is not a folder
            self.reconciling = False
            log.error("%s: %s", why, exc)
            self.refused = str(exc)
            self.update_gauges()
            return None
        except StoreMismatch:
            raise
        except StoreError as exc:
            self.reconciling = False
            self.store_failed(exc)
            self.next_rescan = time.monotonic() + STORE_RETRY_S
            return None
        self.reconciling = False
        self.files_seen = summary.files_seen
        self.refused = summary.refused  # a whole reconcile says whether it still holds
        self.account(summary)
        log.info("%s: %s", why, summary.line())
        self.after_sync(summary)
        return summary

    def open_rollout(self) -> None:
        """The versions' opening (adoption, a crash's leftovers), once the store
        answers; an adopted index is what is served from then on."""
        self.rollout.open()
        self.rollout_pending = False
        live = self.rollout.live
        if live is not None and live != self.serving:
            indexer = self.rollout.indexer(live, hooks=self.hooks, group_chars=DAEMON_GROUP_CHARS)
            self.promote(indexer, live)

    def after_sync(self, summary: Summary) -> None:
        """A first version is live once complete; any other the settings ask
        for is built beside it."""
        assert self.indexer is not None
        if summary.interrupted:
            return
        try:
            if self.serving != self.rollout.live:
                self.rollout.complete(self.serving, self.indexer, summary.chunks_embedded)
                self.rollout.switch(self.serving, self.indexer.store)
            else:
                self.rollout.record(self.serving, self.indexer)
        except (PruneRefused, StoreError) as exc:
            log.error("version %s: %s", self.serving, exc)
            return
        self.plan_build()
        self.update_gauges()

    def process(self, batch: Batch) -> None:
        """Event handling: the paths a batch names go to the sync core."""
        assert self.indexer is not None
        if batch.dirs:
            self.next_rescan = min(self.next_rescan, time.monotonic() + DIR_RESCAN_DELAY_S)
        if self.check_roots():
            # the paths may name the old folder's files: the rescan decides
            for path in batch.files + batch.dirs:
                log.debug("dropped with a replaced root: %s", path)
            return
        changes = self.indexer.changes(batch.files, batch.dirs)
        try:
            summary = self.indexer.apply(changes)
        except StoreError as exc:
            self.store_failed(exc)
            for path in batch.files:  # try these paths again later
                self.debouncer.add_path(path, False, delay=STORE_RETRY_S)
            for path in batch.dirs:
                self.debouncer.add_path(path, True, delay=STORE_RETRY_S)
            return
        self.files_seen += changes.new - summary.files_deleted
        if summary.refused:
            self.refused = summary.refused
        self.account(summary)
        if summary.files_changed or summary.files_deleted or summary.files_failed:
            log.info("%s", summary.line())

    def account(self, summary: Summary) -> None:
        assert self.indexer is not None
        if summary.points_upserted or summary.points_deleted:
            self.settle_due = True
            self.last_work = time.monotonic()
        self.metrics.embedded.inc(summary.chunks_embedded)
        self.metrics.upserted.inc(summary.points_upserted)
        self.metrics.deleted.inc(summary.points_deleted)
        self.metrics.errors.inc(summary.files_failed)
        for key in ("files_changed", "files_deleted", "files_failed", "chunks_embedded"):
            setattr(self.totals, key, getattr(self.totals, key) + getattr(summary, key))
        self.metrics.last_sync.set(time.time())
        if self.unhealthy.startswith("store"):
            log.info("store reachable again")
        self.unhealthy = ""
        self.update_gauges()
        self.notify.status(self.status_line("watching"))

    def store_failed(self, exc: MdindexError) -> None:
        log.error("store error; will retry: %s", exc)
        self.metrics.errors.inc()
        self.unhealthy = f"store: {exc}"
        self.metrics.healthy.set(0)
        self.notify.status(self.status_line("store unavailable, retrying"))

    def observe_latency(self, refs: list[FileRef]) -> None:
        now = time.time()
        for ref in refs:
            self.metrics.latency.observe(max(0.0, now - ref.mtime_ns / 1e9))

    def ping(self) -> None:
        """Tell systemd we are alive, but only while the observer is."""
        if self.watcher.alive():
            self.notify.watchdog()

    def update_gauges(self) -> None:
        """What the HTTP thread reads, refreshed on the main thread (which owns the state)."""
        assert self.indexer is not None
        self.documents, self.points = self.indexer.counts()
        self.failed = self.indexer.failures()
        self.last_sync = self.indexer.last_sync()
        self.metrics.documents.set(self.documents)
        self.metrics.points.set(self.points)
        progress = None
        if self.build is not None:
            progress = Progress(self.building, self.build.state.doc_count(), self.files_seen)
        self.versions = self.rollout.rows(progress)
        self.metrics.healthy.set(1 if not self.reason else 0)

    @property
    def reason(self) -> str:
        """Why the daemon is degraded ("" when it is not)."""
        return self.unhealthy or (f"deletions refused: {self.refused}" if self.refused else "")

    @property
    def phase(self) -> str:
        if not self.ready.is_set():
            return "starting"
        if self.reason:
            return "degraded"
        if self.reconciling:
            return "reconciling"
        return "watching" if self.started else "starting"

    def status_line(self, phase: str) -> str:
        t = self.totals
        return (
            f"{phase}; {self.documents} documents, "
            f"{t.files_changed} indexed, {t.files_deleted} deleted, {t.files_failed} failed, "
            f"{t.chunks_embedded} chunks embedded"
        )

    # -- the HTTP API ----------------------------------------------------

    def health(self) -> tuple[bool, str]:
        if not self.ready.is_set():
            return False, "starting"
        if not self.watcher.alive():
            return False, "file observer is not running"
        return (not self.reason), self.reason or "watching"

    def serving_indexer(self, timeout: float = STARTING_WAIT_S) -> Indexer:
        """The live version's sync core, once the daemon can answer (HTTP thread):
        a request that arrives while it loads its model waits for it."""
        if not self.ready.wait(timeout) or self.indexer is None:
            raise StoreError("the daemon is still starting (loading its model); try again")
        return self.indexer

    def search(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A search from the HTTP API's parameters; ValueError for a bad one."""
        query = Query.from_params(params, self.settings.search_mode, self.settings.fusion)
        return self.serving_indexer().search(query)

    def status(self, wait: float | None = None) -> dict[str, Any]:
        """The status fields (HTTP thread). With ``wait``, first wait up to that
        many seconds for every change made before the call to be searchable."""
        caught_up = None
        if wait is not None:
            result = self.request_reconcile(timeout=wait)
            # deletions the guard refused are changes still to be made
            caught_up = bool(result) and not result.get("refused")
        waiting, oldest = self.queue
        indexer = self.indexer if self.ready.is_set() else None
        starting_store = {"store": None, "points": self.points}  # not opened yet
        data = fields(
            # the live version's model and strategy
            indexer.settings if indexer is not None else self.settings,
            # the engine's own report never waits for a busy store
            indexer.store_status(self.points) if indexer is not None else starting_store,
            documents=self.documents,
            files_seen=self.files_seen,
            failed=self.failed,
            last_sync=self.last_sync,
            phase=self.phase,
            reason=self.reason,
            embedding=indexer.embedding_status() if indexer is not None else {},
            versions=self.versions,
        ) | {
            "daemon": True,
            "build_blocked": self.build_blocked,
            "healthy": self.health()[0],
            "queue_paths": waiting,
            "oldest_wait_s": None if oldest is None else round(time.monotonic() - oldest, 3),
        }
        if caught_up is not None:
            data["caught_up"] = caught_up
        return data


def run_daemon(settings: Settings, reload: Callable[[], Settings] | None = None) -> int:
    return Daemon(settings, reload=reload).run()


class _DaemonTools:
    """The MCP tools' backend inside the daemon: its own search and status."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def search(self, query: Query) -> list[dict[str, Any]]:
        return self.daemon.serving_indexer().search(query)

    def status(self) -> dict[str, Any]:
        return self.daemon.status()

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        """Every change made before the call, searchable (or the timeout)."""
        return self.daemon.status(timeout_s)
