"""What the daemon's main loop does with what it hears: a batch of paths to the
sync core, a reconcile (periodic, after a lost event, or asked for), the
API's requests, a step of a version's build, the store's housekeeping; and
what it publishes after each."""

from __future__ import annotations

import contextlib
import logging
import time

from mdindex.daemon import coverage, heap
from mdindex.daemon.debouncer import Batch
from mdindex.daemon.shared import Shared
from mdindex.errors import (
    ConfigError,
    PruneRefused,
    StateError,
    StoreError,
    StoreMismatch,
)
from mdindex.index.summary import Summary
from mdindex.outside import shown
from mdindex.versions.catalog import Catalog

log = logging.getLogger(__name__)

# Failures of the system's to read a file or folder (a permission, a disk), as
# mdindex.documents words them: they may pass with no event for the file (a
# chmod of its folder), so a rescan tries them again, with the same backoff.
UNREADABLE = (
    "cannot stat:",
    "cannot list folder:",
    "permission denied",
    "cannot open:",
    "read failed:",
)


class Work:
    """The main loop's jobs, and what they leave for the next one."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.next_rescan = 0.0
        self.rollout_pending = False  # the versions' opening waits for the store
        self.force_next = False  # the next reconcile deletes what the guard would refuse
        self.settle_due = True  # housekeeping once quiet; at the start too, for a build owed
        self.last_work = time.monotonic()  # an owed build waits for quiet after the start too
        self.next_unwatched_scan = 0.0
        self.watch_limit = coverage.limit()  # as it was when the watches were added
        self.unreadable_tries = 0  # rescans in a row that found files unreadable

    def backoff(self) -> float:
        """How long to wait after the latest of the failures in a row."""
        return self.shared.timings.backoff(self.shared.health.failures)

    def rescan_due(self) -> bool:
        return time.monotonic() >= self.next_rescan

    def settle_time(self) -> bool:
        """Housekeeping is due and things have been quiet long enough: no writes
        and no searches. A build closes the store and gives way to a search
        that comes; tried again 5 s after the last write while searches went on,
        it closed the store under them again and again."""
        quiet_since = max(self.last_work, self.shared.last_search)
        return (
            self.settle_due and time.monotonic() - quiet_since >= self.shared.timings.settle_after_s
        )

    def build_step(self) -> None:
        """Go on building while nothing else waits; switch once it is complete."""
        if self.shared.busy():
            return
        self.shared.health.status(f"building version {self.shared.builds.building}")
        if self.shared.builds.step(on_embedded=self.shared.metrics.embedded.inc):
            self.promoted()

    def promoted(self) -> None:
        """A new version answers from now on."""
        self.settle_due = True
        self.update_gauges()
        self.shared.health.status("watching")

    def reconcile(self, why: str) -> Summary | None:
        indexer = self.shared.builds.live
        assert indexer is not None
        self.shared.health.started = self.shared.health.reconciling = True
        self.shared.health.status(f"{why}: reconciling")
        self.next_rescan = time.monotonic() + self.shared.settings.rescan_interval_s
        if why == "rescan":
            self.shared.metrics.rescans.inc()
        force, self.force_next = self.force_next, False
        try:
            if self.rollout_pending:
                self.open_rollout()
                indexer = self.shared.builds.live
                assert indexer is not None
            summary = indexer.backfill(prune=True, force=force, keep_going=True)
        except StoreMismatch:
            raise
        except Exception as exc:  # PASSING, or a fault of our own: degraded, never down
            self.shared.health.reconciling = False
            self.shared.health.store_failed(exc)
            self.next_rescan = time.monotonic() + self.backoff()
            return None
        self.shared.health.reconciling = False
        self.shared.files_seen = summary.files_seen
        self.shared.health.refused = summary.refused  # a whole reconcile says if it holds
        self.account(summary)
        self.shared.health.unreadable = ""  # a whole scan says which still are
        self.note_unreadable(summary)
        log.info("%s: %s", why, summary.line())
        self.check_coverage(whole=True)
        self.after_sync(summary)
        heap.give_back()  # the whole scan's lists, freed but held by malloc
        indexer.read_ahead()  # after the scan: beside it, the start at 200k files took 2.5x
        return summary

    def open_rollout(self) -> None:
        """The versions' opening (adoption, a crash's leftovers), once the store
        answers; an adopted index is what is served from then on."""
        self.shared.rollout.open()
        self.rollout_pending = False
        live = self.shared.rollout.live
        if live is not None and live != self.shared.builds.serving:
            self.shared.builds.serve(self.shared.builds.indexer(live), live)
            self.promoted()

    def after_sync(self, summary: Summary) -> None:
        """A first version is live once complete; any other the settings ask
        for is built beside it."""
        indexer, serving = self.shared.builds.live, self.shared.builds.serving
        assert indexer is not None
        if summary.interrupted:
            return
        try:
            if serving != self.shared.rollout.live:
                self.shared.rollout.complete(serving, indexer, summary.chunks_embedded)
                self.shared.rollout.switch(serving, indexer)
            else:
                self.shared.rollout.record(serving, indexer)
        except PruneRefused as exc:
            log.error("version %s: %s", serving, exc)
            return
        except (StoreError, StateError) as exc:  # the alias or the catalog refused
            self.shared.health.store_failed(exc)
            self.next_rescan = time.monotonic() + self.backoff()
            # what is in memory may have moved ahead of the file (a switch it lacks)
            rollout = self.shared.rollout
            with contextlib.suppress(ConfigError):
                rollout.catalog = Catalog.load(rollout.settings)
            return
        self.shared.builds.plan()
        self.update_gauges()

    def process(self, batch: Batch, events: bool = True) -> Summary | None:
        """Event handling: the paths a batch names go to the sync core. None when
        the store failed (the paths wait and are tried again). ``events``: the
        paths came from file events (not from the folders rescanned unwatched)."""
        indexer = self.shared.builds.live
        assert indexer is not None
        # new folders; or any file while deletions are refused: one back may end
        # the refusal, which only a whole reconcile tells (and it counts the files
        # seen again: status said "4 of 2" until the next rescan, 10 minutes on)
        if (batch.dirs and events) or self.shared.health.refused:
            self.next_rescan = min(
                self.next_rescan, time.monotonic() + self.shared.timings.dir_rescan_delay_s
            )
        if self.shared.check_roots():
            # the paths may name the old folder's files: the rescan decides
            for path in batch.files + batch.dirs:
                log.debug("dropped with a replaced root: %s", path)
            return Summary()  # the rescan it asked for comes next
        try:
            indexer.open_store()  # before the state is read: opening may rebuild it
            changes = indexer.changes(batch.files, batch.dirs)
            summary = indexer.apply(changes)
        except StoreMismatch:
            raise
        except Exception as exc:  # PASSING, or a fault of our own: degraded, never down
            self.shared.health.store_failed(exc)
            wait = self.backoff()
            self.shared.debouncer.requeue(batch, delay=wait)  # try these paths again later
            return None
        if batch.dirs:  # new folders: does the kernel watch them?
            self.check_coverage(whole=False)
        self.shared.files_seen += changes.new - summary.files_deleted
        if summary.refused:
            self.shared.health.refused = summary.refused
        self.account(summary)
        self.note_unreadable(summary)
        if summary.files_changed or summary.files_deleted or summary.files_failed:
            log.info("%s", summary.line())
        return summary

    # -- folders the kernel does not watch ---------------------------------

    def check_coverage(self, whole: bool) -> None:
        """The folders the last look at the files listed, against the watches the
        kernel holds: those not watched are rescanned (every ``Timings.unwatched_rescan_s``
        and for each `status --wait`), and status says why."""
        indexer = self.shared.builds.live
        watched = coverage.watched_inodes()
        watcher = self.shared.watcher
        if indexer is None or watched is None or not watcher.alive():
            log.debug("watch coverage not checked (no inotify, or the observer is down)")
            return
        roots = [str(r.path) for r in self.shared.roots]
        missing = coverage.uncovered(indexer.scanned_folders(), watched, roots)
        before = watcher.unwatched
        watcher.unwatched = coverage.topmost(missing if whole else [*before, *missing])
        reason = coverage.reason(
            len(watcher.unwatched), coverage.limit(), self.shared.timings.unwatched_rescan_s
        )
        if watcher.unwatched and watcher.unwatched != before:
            log.error("%s", reason)
        elif before and not watcher.unwatched:
            log.info("every folder is watched again")
        self.shared.health.unwatched = reason if watcher.unwatched else ""

    def unwatched_due(self) -> bool:
        return bool(self.shared.watcher.unwatched) and time.monotonic() >= self.next_unwatched_scan

    def rescan_unwatched(self) -> None:
        """The folders that cannot be watched, looked at again; a limit raised
        since watches them (the observer starts again and adds its watches)."""
        self.next_unwatched_scan = time.monotonic() + self.shared.timings.unwatched_rescan_s
        if coverage.limit() != self.watch_limit:
            log.info("the inotify watch limit changed; watching the roots again")
            self.watch_limit = coverage.limit()
            self.shared.watcher.restart()
            self.shared.watcher.overflowed.set()  # a whole reconcile, then coverage again
            return
        self.process(Batch(dirs=list(self.shared.watcher.unwatched)), events=False)

    def settle(self) -> None:
        """Let the store do its housekeeping while nothing else waits; it gives way
        (and is tried again later) as soon as an event, a request or a stop arrives."""
        indexer = self.shared.builds.live
        assert indexer is not None

        def idle() -> bool:
            self.shared.ping()  # the main loop is busy here; systemd must still hear from it
            return not self.shared.busy()

        self.shared.health.status("building the search index")
        try:
            self.settle_due = not indexer.settle(idle)
            indexer.read_ahead()  # a build made new segments (once for each set of them)
        except StoreError as exc:
            self.shared.health.store_failed(exc)
        heap.give_back()
        self.last_work = time.monotonic()
        self.shared.health.status("watching")

    def account(self, summary: Summary) -> None:
        if summary.points_upserted or summary.points_deleted:
            self.settle_due = True
            self.last_work = time.monotonic()
        self.shared.health.account(summary)
        self.update_gauges()
        self.shared.health.status("watching")

    def note_unreadable(self, summary: Summary) -> None:
        """Files or folders the system refused to read: degraded, naming the
        first, and a rescan after the backoff (until one reads them all)."""
        refused = [e for e in summary.errors if e["reason"].startswith(UNREADABLE)]
        if not refused:
            if not self.shared.health.unreadable:
                self.unreadable_tries = 0
            return
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        where = shown(f"{first['root']}:{first['path']}: {first['reason']}")
        self.shared.health.unreadable = f"reader: {where}{more}"
        self.unreadable_tries += 1
        wait = self.shared.timings.backoff(self.unreadable_tries)
        self.next_rescan = min(self.next_rescan, time.monotonic() + wait)

    def update_gauges(self) -> None:
        """What the API's threads read, refreshed on the main thread."""
        assert self.shared.builds.live is not None
        self.shared.health.publish(
            self.shared.builds.live,
            self.shared.rollout.catalog.rows(
                self.shared.rollout.settings, self.shared.builds.progress(self.shared.files_seen)
            ),
        )
