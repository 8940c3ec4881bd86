"""File events to work: a watchdog observer feeding debounced batches of paths.

Events only say where to look. Each is reduced to the paths it touches (both
ends of a move); the batcher waits until a path has been quiet, and its size
and mtime stable, for the quiet period, then hands the path on. What the path
holds at that moment decides between index and delete, so atomic saves,
vim-style saves and rename chains need no special cases.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver

from mdindex.config import Root
from mdindex.index import guard

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Change:
    """One path an event touched; ``is_dir`` for folder events (covers everything below)."""

    path: str
    is_dir: bool = False


@dataclass
class Batch:
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.files or self.dirs)


class Watcher:
    """A recursive watchdog observer on every root, with a bounded event queue.

    When the queue overflows, events are dropped and ``overflowed`` is set so
    the daemon runs a rescan instead.
    """

    def __init__(self, roots: Sequence[Root], max_queue: int = 10_000) -> None:
        self.roots = list(roots)
        self.events: queue.Queue[Change] = queue.Queue(maxsize=max_queue)
        self.overflowed = threading.Event()
        self._observer: BaseObserver | None = None
        self._watched = 0  # roots the observer was started on
        self.root_ids: dict[str, str] = {}  # their folders' identities (index.guard)
        self._lock = threading.Lock()

    def start(self) -> None:
        """Watch every root that is a folder now (one that is gone is watched again
        once ``follow_roots`` sees it back)."""
        self.root_ids = guard.identities(self.roots)
        from watchdog.observers import Observer

        observer = Observer()
        handler = _Handler(self)
        watched = [root for root in self.roots if root.path.is_dir()]
        for root in watched:
            observer.schedule(handler, str(root.path), recursive=True)
        observer.daemon = True
        observer.start()
        with self._lock:
            self._observer, self._watched = observer, len(watched)

    def follow_roots(self) -> bool:
        """A root replaced by another folder (``mv docs docs.bak; mkdir docs``),
        gone, or back: an observer follows the folder it was started on, so it is
        started again on what is there now. True when a root changed."""
        now = guard.identities(self.roots)
        if now == self.root_ids:
            return False
        changed = sorted(set(now.items()) ^ set(self.root_ids.items()))
        labels = ", ".join(sorted({label for label, _ in changed}))
        log.warning("root %s replaced, gone or back; watching what is there now", labels)
        self.stop(timeout=2.0)
        try:
            self.start()
        except Exception as exc:  # a root that is gone cannot be watched until it is back
            log.error("cannot watch the roots (%s); rescanning until they are back", exc)
            self.root_ids = now
        return True

    def alive(self) -> bool:
        """The observer thread and every per-root emitter thread are running."""
        obs = self._observer
        if obs is None or not obs.is_alive():
            return False
        emitters = obs.emitters
        return len(emitters) == self._watched and all(e.is_alive() for e in emitters)

    def restart(self) -> None:
        self.stop(timeout=2.0)
        self.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            obs, self._observer = self._observer, None
        if obs is None:
            return
        try:
            obs.stop()
            obs.join(timeout)
        except Exception as exc:  # a dead observer may fail to stop; it is gone either way
            log.debug("stopping observer: %s", exc)

    def put(self, change: Change) -> None:
        try:
            self.events.put_nowait(change)
        except queue.Full:
            if not self.overflowed.is_set():
                log.warning("event queue full (%d); a rescan will catch up", self.events.maxsize)
            self.overflowed.set()


class _Handler(FileSystemEventHandler):
    """watchdog calls ``dispatch`` from its thread; it must never block or raise."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        kind = getattr(event, "event_type", "")
        if kind in ("opened", "closed_no_write"):
            return  # reads do not change anything
        is_dir = bool(getattr(event, "is_directory", False))
        if is_dir and kind == "modified":
            return  # a folder's mtime moves with every file event inside it
        for attr in ("src_path", "dest_path"):
            path = getattr(event, attr, "")
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if path:
                self.watcher.put(Change(path, is_dir))


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class Debouncer:
    """Coalesces changes per path and releases them together once things are quiet.

    Paths are released when no event at all has arrived for ``quiet`` seconds,
    so the two ends of a move (or a whole ``git checkout``) land in one batch;
    a path waiting ``max_wait`` is released even while other paths keep
    changing. A file whose size or mtime moved since its last event is still
    being written and waits another quiet period.
    """

    def __init__(
        self,
        quiet: float,
        max_wait: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quiet = quiet
        self.max_wait = max_wait if max_wait is not None else max(2.0, 10 * quiet)
        self.clock = clock
        self.latest = 0.0  # time of the newest event of any path
        # path -> (is_dir, not ready before, stat seen at its last event, first event time)
        self.pending: dict[str, tuple[bool, float, tuple[int, int] | None, float]] = {}

    def add(self, change: Change) -> None:
        now = self.clock()
        self.latest = now
        old = self.pending.get(change.path)
        first = old[3] if old else now
        is_dir = change.is_dir or (old[0] if old else False)
        self.pending[change.path] = (is_dir, now, _stat(change.path), first)

    def take(self, events: queue.Queue[Change], timeout: float) -> None:
        """Add the queued events; wait up to ``timeout`` for the first, but never
        past the moment a waiting path is due."""
        deadline = self.next_deadline()
        wait = timeout if deadline is None else max(0.0, min(timeout, deadline - self.clock()))
        try:
            self.add(events.get(timeout=wait))
        except queue.Empty:
            return
        while True:
            try:
                self.add(events.get_nowait())
            except queue.Empty:
                return

    def add_path(self, path: str, is_dir: bool, delay: float) -> None:
        """Queue a path again, ready no sooner than ``delay`` seconds from now."""
        now = self.clock()
        self.pending[path] = (is_dir, now + max(0.0, delay - self.quiet), _stat(path), now)

    def __len__(self) -> int:
        return len(self.pending)

    def oldest(self) -> float | None:
        """Clock time of the first event of the path waiting longest; None when none waits."""
        return min((first for _, _, _, first in self.pending.values()), default=None)

    def next_deadline(self) -> float | None:
        if not self.pending:
            return None
        quiet_at = self.latest + self.quiet
        oldest = min(first for _, _, _, first in self.pending.values()) + self.max_wait
        not_before = min(t for _, t, _, _ in self.pending.values()) + self.quiet
        return max(not_before, min(quiet_at, oldest))

    def ready(self, limit: int = 1000) -> Batch:
        """Pop the paths that may go now; restart the clock of files still being written."""
        now = self.clock()
        all_quiet = now - self.latest >= self.quiet
        batch = Batch()
        for path, (is_dir, last, seen, first) in list(self.pending.items()):
            if now - last < self.quiet or not (all_quiet or now - first >= self.max_wait):
                continue
            current = _stat(path)
            if not is_dir and current != seen:
                # still being written (size or mtime moved without an event reaching us yet)
                self.pending[path] = (is_dir, now, current, first)
                continue
            del self.pending[path]
            (batch.dirs if is_dir else batch.files).append(path)
            if len(batch.files) + len(batch.dirs) >= limit:
                break
        return batch
