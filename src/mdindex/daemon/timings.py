"""The daemon's timers, in one place: how long it waits before trying again,
before housekeeping, before closing what it no longer serves. The defaults
are the product's; tests give the daemon short ones (``Daemon(timings=...)``).

The debounce (``quiet_period_ms``) and the periodic rescan
(``rescan_interval_s``) are settings users change, so they stay settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    # The first wait after the store, the embedder, the state or a reader failed
    # (and before a failed build goes on); doubled for each failure in a row.
    store_retry_s: float = 5.0
    # The longest wait between tries while failures go on (degraded: 5 s ... 120 s).
    max_retry_s: float = 120.0
    # Store housekeeping waits for this long a lull after the last write.
    settle_after_s: float = 5.0
    # watchdog can lose track of a folder that is moved and recreated quickly (its
    # inotify path map gets confused); a fast-path rescan this long after any
    # folder event catches whatever it missed.
    dir_rescan_delay_s: float = 2.0
    # A version switched away from is closed this long after, so a search that
    # took it just before the switch still finishes on it.
    retire_after_s: float = 5.0
    # Folders the kernel does not watch (the inotify limit) are rescanned this often.
    unwatched_rescan_s: float = 30.0
    # How long a barrier may take to come through the watcher before a whole
    # reconcile decides instead: its opens queue behind every event before them
    # (a checkout of 1,000 files is through in well under a second).
    barrier_wait_s: float = 10.0
    # A search that arrives while the daemon loads its model waits this long for
    # it (the first load on a machine also exports and measures: about 15 s here).
    starting_wait_s: float = 120.0
    # For a whole HTTP request to arrive on a connection (not per receive).
    request_timeout_s: float = 10.0
    # Of systemd's TimeoutStopSec=15s; the store closes after it.
    watcher_stop_s: float = 3.0

    def backoff(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row: ``store_retry_s``
        doubled each time, up to ``max_retry_s``."""
        return float(min(self.store_retry_s * 2 ** min(max(failures, 1) - 1, 16), self.max_retry_s))
