"""The versions a running daemon holds: the live one that answers, the one the
settings ask for while it is built beside it, and those switched away from.

A build goes on only in the daemon's quiet moments (``step`` is called when no
event, request or stop waits, and a build pass stops between groups as soon
as one arrives); each pass rescans, so whatever changed meanwhile is caught up
before the switch. A version switched away from is closed a while later
(``Timings.retire_after_s``), so a search that took it just before the
switch still finishes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mdindex.config import Timings
from mdindex.daemon.health import PASSING
from mdindex.errors import (
    LockError,
    PruneRefused,
    SpaceRefused,
    StateError,
    StoreError,
)
from mdindex.index.indexer import Hooks, Indexer
from mdindex.runtime import version_of
from mdindex.versions.catalog import Progress
from mdindex.versions.rollout import Rollout

log = logging.getLogger(__name__)

# Small groups keep the time between stop checks short (about a second of embedding on CPU).
DAEMON_GROUP_CHARS = 64_000


class Builds:
    """The live version's sync core, and the build of the one the settings ask for."""

    def __init__(
        self, rollout: Rollout, hooks: Hooks, rescan_interval_s: float, timings: Timings
    ) -> None:
        self.rollout = rollout
        self.hooks = hooks
        self.rescan_interval_s = rescan_interval_s  # a build refused for a missing root waits
        self.timings = timings
        self.live: Indexer | None = None  # the live version's, which searches use
        self.serving = ""  # its fingerprint
        self.build: Indexer | None = None
        self.building = ""  # its fingerprint
        self.now = False  # inside a build step (its writes are not what users wait for)
        self.blocked = ""  # why a build waits (the disk, a missing root)
        self.retry_at = 0.0
        self.siblings: list[Indexer] = []  # old versions the build takes vectors from
        self.embedded = 0  # chunks the build embedded so far
        self.retired: list[tuple[Indexer, float]] = []  # switched away from, closing soon

    def indexer(self, fp: str) -> Indexer:
        """The sync core on version ``fp``, with the daemon's hooks and group size."""
        return self.rollout.indexer(fp, hooks=self.hooks, group_chars=DAEMON_GROUP_CHARS)

    def serve(self, indexer: Indexer, fp: str) -> None:
        """Searches and events go to ``indexer`` from now on; the one before
        closes soon."""
        old = self.live
        indexer.release_siblings()
        for sibling in self.siblings:
            sibling.close()
        self.siblings = []
        self.live, self.serving = indexer, fp
        if old is not None and old is not indexer:
            self.retired.append((old, time.monotonic()))

    # -- building ----------------------------------------------------------

    def retarget(self) -> None:
        """Build what the settings (or a rollback) ask for now, if it is not live."""
        target = self.rollout.target()
        log.info("the settings ask for version %s (live: %s)", target, self.serving)
        if self.build is not None and self.building != target:
            log.info("version %s is no longer asked for; its build stops", self.building)
            self._stop_build()
        self.blocked = ""
        self.plan()

    def plan(self) -> None:
        """Start building the version the settings ask for, when it is not live."""
        target = self.rollout.target()
        if target == self.serving or self.build is not None:
            return
        assert self.live is not None
        self.close_retired(wait=False)  # a retired version may be the one asked for
        try:
            self.rollout.begin(target)
            self.siblings = self.rollout.siblings(target, opened=[self.serving])
            self.build = self.rollout.indexer(
                target,
                hooks=self.hooks,
                group_chars=DAEMON_GROUP_CHARS,
                siblings=[self.live, *self.siblings],
            )
        except (SpaceRefused, StoreError, StateError, LockError) as exc:
            log.error("version %s cannot be built now: %s", target, exc)
            self.blocked = str(exc)
            for sibling in self.siblings:
                sibling.close()
            self.siblings = []
            return
        self.building = target
        self.embedded = 0
        log.info("serving version %s while version %s is built", self.serving, target)

    def due(self) -> bool:
        """A build waits to go on."""
        return self.build is not None and time.monotonic() >= self.retry_at

    def step(self, on_embedded: Callable[[int], None]) -> bool:
        """One pass of the build (it stops between groups when the daemon has
        other work); True when it completed and the new version is live."""
        assert self.build is not None
        self.now = True
        try:
            # A daemon pays the load once: the fastest backend, not one chosen for
            # the first pass's count (it also stops whenever the daemon is busy).
            self.build.load_model()
            summary = self.build.backfill(prune=True, force=True)
            on_embedded(summary.chunks_embedded)
            self.embedded += summary.chunks_embedded
            if summary.interrupted:
                return False
            self.rollout.complete(self.building, self.build, self.embedded)
            self.rollout.switch(self.building, self.build)
        except Exception as exc:  # a store, an embedder, a root, or a fault of our own
            ours = not isinstance(exc, (PruneRefused, *PASSING))  # a fault: its traceback too
            log.error("version %s: %s; trying again later", self.building, exc, exc_info=ours)
            self.blocked = str(exc)
            # a store or server error may pass soon; a missing root waits for the next rescan
            missing = isinstance(exc, PruneRefused)
            wait = self.rescan_interval_s if missing else self.timings.store_retry_s
            self.retry_at = time.monotonic() + wait
            return False
        finally:
            self.now = False
        self.serve(self.build, self.building)
        self.build, self.building, self.blocked = None, "", ""
        return True

    def progress(self, files_seen: int) -> Progress | None:
        if self.build is None:
            return None
        return Progress(self.building, self.build.counts()[0], files_seen)

    # -- versions use | drop -------------------------------------------------

    def use(self, fingerprints: list[str]) -> dict[str, str]:
        """Roll back (or forward): pin a complete version; it is caught up and
        switched to like any build, while the live one answers."""
        fp = self.rollout.catalog.to_use(fingerprints)
        self.rollout.catalog.pin(fp, self.rollout.settings)
        self.retarget()
        return {"live": self.serving, "target": fp}

    def drop(self, fingerprints: list[str]) -> dict[str, list[str]]:
        busy = [self.serving, self.building, *(version_of(s.settings) for s in self.siblings)]
        fps = self.rollout.catalog.to_drop(self.rollout.settings, fingerprints, busy)
        self.close_retired(wait=False)
        for fp in fps:
            self.rollout.drop(fp)
        return {"dropped": fps}

    # -- closing -------------------------------------------------------------

    def close_retired(self, wait: bool = True) -> bool:
        """Close versions switched away from a while ago (or now: not ``wait``),
        then apply keep_versions; True when any was closed."""
        if not self.retired:
            return False
        if wait and time.monotonic() - self.retired[0][1] < self.timings.retire_after_s:
            return False
        for indexer, _ in self.retired:
            indexer.close()
        self.retired = []
        try:
            self.rollout.retain()
        except (StoreError, StateError) as exc:
            log.error("dropping old versions failed (tried again after the next switch): %s", exc)
        return True

    def _stop_build(self) -> None:
        if self.build is not None:
            self.build.close()
        for sibling in self.siblings:
            sibling.close()
        self.build, self.building, self.siblings = None, "", []

    def close(self) -> None:
        for indexer, _ in self.retired:
            indexer.close()
        self.retired = []
        self._stop_build()
        if self.live is not None:
            self.live.close()
