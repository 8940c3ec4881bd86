"""What the daemon's parts share, as uvicorn's ``Server`` shares a ``ServerState``
with its protocols: the main loop (``service.Daemon``), its jobs
(``work.Work``) and the API's threads (``api.DaemonApi``) are each given this
object, never the daemon, so none of them imports another to reach it.

It holds the settings, the watcher and the debouncer, the mailbox, health and
metrics, the versions (``rollout`` and ``builds``, made at startup once the
writer lock is held) and the few values the main loop publishes for the
API's threads (``ready``, ``queue``, ``files_seen``); and the questions every
part asks of them (is anything waiting? did a root change?).
"""

from __future__ import annotations

import threading

from mdindex.config import Settings, Timings
from mdindex.daemon.builds import Builds
from mdindex.daemon.debouncer import Debouncer
from mdindex.daemon.health import Health
from mdindex.daemon.mailbox import Mailbox
from mdindex.daemon.metrics import Metrics
from mdindex.daemon.notify import Notifier
from mdindex.daemon.watcher import Watcher
from mdindex.versions.rollout import Rollout


class Shared:
    """The daemon's state, as its parts see it."""

    def __init__(self, settings: Settings, timings: Timings) -> None:
        self.settings = settings
        self.timings = timings  # how long the parts wait, retry and give way
        self.roots = settings.root_list()
        self.should_exit = False  # a signal asked the daemon to stop
        self.watcher = Watcher(self.roots, settings.queue_size)
        self.debouncer = Debouncer(settings.quiet_period_ms / 1000)
        self.mailbox = Mailbox(stopping=lambda: self.should_exit)
        self.notify = Notifier()
        self.metrics = Metrics()
        self.health = Health(self.metrics, self.notify)
        self.ready = threading.Event()  # the model is loaded: searches can be answered
        self.queue: tuple[int, float | None] = (0, None)  # paths waiting, oldest event
        self.files_seen = 0  # by the last look at the files
        # when the API last answered a search (monotonic): an index build waits
        # for quiet from searches too, as it closes the store and gives way to one
        self.last_search = 0.0
        # The catalog is read once the writer lock is held (startup): read before,
        # a backfill slipping in between could change it under the daemon.
        self.rollout: Rollout
        self.builds: Builds

    @property
    def phase(self) -> str:
        return self.health.phase(self.ready.is_set())

    def drain(self, timeout: float) -> None:
        """Move queued events into the debouncer; wait up to ``timeout`` for the first."""
        self.debouncer.take(self.watcher.events, timeout)

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
        """Whether a sync should stop between groups: a stop, or a build that
        gives way to what waits."""
        return self.should_exit or (self.builds.now and self.busy())

    def check_roots(self) -> bool:
        """A root replaced by another folder, gone, or back: the observer follows
        what is there now, the paths waiting are dropped, and a rescan (under the
        guard) catches up. True when that happened."""
        if not self.watcher.follow_roots():
            return False
        self.debouncer.clear()  # paths of the old folder say nothing about the new
        self.watcher.overflowed.set()  # rescan now
        return True

    def ping(self) -> None:
        """Tell systemd we are alive, but only while the observer is."""
        if self.watcher.alive():
            self.notify.watchdog()
