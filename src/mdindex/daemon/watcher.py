"""File events to work: a watchdog observer feeding debounced batches of paths.

Events only say where to look. Each is reduced to the paths it touches (both
ends of a move); the batcher waits until a path has been quiet, and its size
and mtime stable, for the quiet period, then hands the path on. What the path
holds at that moment decides between index and delete, so atomic saves,
vim-style saves and rename chains need no special cases.

A barrier marks "now" in the event stream, for `status --wait`: the watcher
opens one file in each root (read-only, nothing read) and waits for watchdog
to hand on that open. inotify keeps one ordered queue and watchdog one ordered
path per root, so once the opens are through, every event the kernel queued
before them is in ``events``: the wait costs the same on a tree of any size.
Opens are asked of the kernel only in the folders that hold a barrier's file
(``_Observer``): asked everywhere, one scan of a 100,000-file tree (9,000
folders, each open an event) overflowed the kernel's queue of 16,384 events,
and watchdog then re-added every watch, opening every folder again.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from mdindex.config import Root
from mdindex.daemon.barrier import Barrier, file_to_open, is_file, open_and_close
from mdindex.daemon.debouncer import Change
from mdindex.index import guard

log = logging.getLogger(__name__)

# What the observer reports: not reads' closes, nor a folder's mtime moving
# with every file event inside it (half the events of a tree being read).
EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    DirCreatedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
    FileModifiedEvent,
    FileAttribEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileOpenedEvent,  # the barrier's
]
REARM_S = 0.5  # a barrier's opens, asked again (a folder watched anew drops them)
# watchdog watches a folder moved into a root a moment after the move (1.3 ms
# at most of 100 moves here, both cores busy): a barrier asks again until then
WATCHED_WAIT_S = 1.0


class Watcher:
    """A recursive watchdog observer on every root, with a bounded event queue.

    When the queue overflows, events are dropped and ``overflowed`` is set so
    the daemon runs a rescan instead.
    """

    def __init__(self, roots: Sequence[Root], max_queue: int = 10_000) -> None:
        self.roots = list(roots)
        # an item per event: a move's two ends reach the debouncer together
        self.events: queue.Queue[tuple[Change, ...]] = queue.Queue(maxsize=max_queue)
        self.overflowed = threading.Event()
        self._observer: BaseObserver | None = None
        self._watched: list[Root] = []  # roots the observer watches
        self.root_ids: dict[str, str] = {}  # their folders' identities (index.guard)
        # roots or folders the kernel does not watch (mdindex.daemon.coverage)
        self.unwatched: list[str] = []
        self._barriers: list[Barrier] = []
        self._marks: dict[str, str] = {}  # root label: the file its barriers open
        self._lock = threading.Lock()

    def start(self) -> None:
        """Watch every root that is a folder now (one that is gone is watched again
        once ``follow_roots`` sees it back). A root the kernel will not watch
        (no inotify watches left) is left to the daemon's coverage check."""
        self.root_ids = guard.identities(self.roots)
        observer = _observer(self.overflowed.set)
        observer.daemon = True
        observer.start()  # first, so that each root's watch fails on its own
        handler = _Handler(self)
        watched = []
        for root in self.roots:
            if not root.path.is_dir():
                continue
            try:
                observer.schedule(handler, str(root.path), recursive=True, event_filter=EVENTS)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EMFILE):
                    observer.stop()
                    raise
                # the daemon's coverage check finds it unwatched, says why, rescans it
                log.warning("cannot watch root %s: %s", root.label, exc)
                continue
            watched.append(root)
        with self._lock:
            self._observer, self._watched = observer, watched

    def barrier(self) -> Barrier | None:
        """Open one file in each watched root to mark "now" in the event stream;
        None when that cannot be done (no inotify, a root with no file to open):
        the caller then looks at the files themselves."""
        with self._lock:
            observer, roots = self._observer, list(self._watched)
        if sys.platform != "linux" or not isinstance(observer, _Observer):
            return None  # other observers report no opens
        paths = []
        for root in roots:
            kept = self._marks.get(root.label, "")
            found = kept if is_file(kept) else file_to_open(str(root.path))
            # asked each time: watchdog sets a folder's whole mask when it watches
            # it again (a folder moved back, an overflow), which drops the opens
            if found is None or not observer.watch_opens(os.path.dirname(found)):
                return None
            paths.append(found)
            self._marks[root.label] = found
        barrier = Barrier(paths)
        with self._lock:
            self._barriers.append(barrier)
        for path in paths:
            if not open_and_close(path):
                self.forget(barrier)
                return None
        return barrier

    def wait(self, barrier: Barrier, timeout: float) -> bool:
        """Up to ``timeout`` s for ``barrier`` to pass; False at once on an overflow
        (its opens are lost too). A folder watched anew (moved back) drops the
        opens: every ``REARM_S`` the files waited for are asked for and opened
        again, a later mark that still follows every event before the first."""
        deadline = time.monotonic() + timeout
        rearm = time.monotonic() + REARM_S
        while not barrier.passed.wait(0.05):
            now = time.monotonic()
            if self.overflowed.is_set() or now >= deadline:
                self.forget(barrier)
                return False
            if now >= rearm:
                rearm = now + REARM_S
                with self._lock:
                    observer, waiting = self._observer, list(barrier.waiting)
                if not isinstance(observer, _Observer):
                    continue  # stopped meanwhile: the deadline ends the wait
                for path in waiting:
                    # not waited for: the next rearm asks again, within the deadline
                    if observer.watch_opens(os.path.dirname(path), patience=0.0):
                        open_and_close(path)
        return True

    def opened(self, path: str) -> None:
        """An open reached the handler: the barriers waiting for it move on."""
        with self._lock:
            for barrier in list(self._barriers):
                barrier.waiting.discard(path)
                if not barrier.waiting:
                    barrier.passed.set()
                    self._barriers.remove(barrier)

    def forget(self, barrier: Barrier) -> None:
        """A barrier no one waits for any more."""
        with self._lock:
            if barrier in self._barriers:
                self._barriers.remove(barrier)

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
        return len(emitters) == len(self._watched) and all(e.is_alive() for e in emitters)

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

    def put(self, changes: tuple[Change, ...]) -> None:
        try:
            self.events.put_nowait(changes)
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
        is_dir = bool(getattr(event, "is_directory", False))
        if kind == "opened":  # reads change nothing; a barrier's open marks a moment
            if self.watcher._barriers:
                self.watcher.opened(_text(event.src_path))
            return
        if kind == "closed_no_write" or (is_dir and kind == "modified"):
            return  # a folder's mtime moves with every file event inside it
        paths = [_text(getattr(event, attr, "")) for attr in ("src_path", "dest_path")]
        changes = tuple(Change(path, is_dir) for path in paths if path)
        if changes:
            self.watcher.put(changes)


def _text(path: str | bytes) -> str:
    return os.fsdecode(path) if isinstance(path, bytes) else path


def _observer(on_overflow: Callable[[], None]) -> BaseObserver:
    """watchdog's observer for this platform: on Linux, ours, which calls
    ``on_overflow`` when the kernel dropped events."""
    if sys.platform != "linux":
        from watchdog.observers import Observer

        return Observer()  # no inotify: no barrier, a wait looks at the files
    return _Observer(on_overflow)


if sys.platform == "linux":
    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup
    from watchdog.observers.inotify_c import (
        InotifyConstants,
        Mask,
        inotify_add_watch,
        inotify_rm_watch,
    )

    @dataclass
    class _WatchGroup(InotifyWatchGroup):
        """watchdog's watches of one root, saying when the kernel's queue
        overflowed: watchdog itself only logs it, at a level that
        ``--log-level ERROR`` silences."""

        on_overflow: Callable[[], None] = lambda: None

        def on_queue_overflow(self) -> None:
            super().on_queue_overflow()
            self.on_overflow()

    class _Emitter(InotifyEmitter):
        """watchdog's inotify emitter, asking the kernel for no opens (the filter
        still lets through the opens a barrier's folder reports), its watches a
        ``_WatchGroup``."""

        def __init__(self, *args: Any, on_overflow: Callable[[], None], **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._on_overflow = on_overflow

        def get_event_mask_from_filter(self) -> Mask:
            return Mask(super().get_event_mask_from_filter() & ~InotifyConstants.IN_OPEN)

        def on_thread_start(self) -> None:  # watchdog's, with our group
            self._inotify = _WatchGroup(
                self._inotify_fd,
                os.fsencode(self.watch.path),
                is_recursive=self.watch.is_recursive,
                event_mask=self.get_event_mask_from_filter(),
                follow_symlink=self.watch.follow_symlink,
                on_overflow=self._on_overflow,
            )

    class _Observer(InotifyObserver):
        """watchdog's inotify observer (one kernel queue for every root), with
        opens asked for only in folders a barrier names."""

        def __init__(self, on_overflow: Callable[[], None]) -> None:
            super().__init__()
            self._emitter_class = _Emitter
            self._emitter_kwargs["on_overflow"] = on_overflow

        def watch_opens(self, folder: str, patience: float = WATCHED_WAIT_S) -> bool:
            """Opens in ``folder``, which watchdog watches, reach the handler from
            now on; False when it is gone or still not watched after
            ``patience`` s (the barrier is then not made, and a scan decides)."""
            deadline = time.monotonic() + patience
            while not self._add_opens(folder):
                if time.monotonic() >= deadline or not os.path.isdir(folder):
                    return False
                time.sleep(0.01)
            return True

        def _add_opens(self, folder: str) -> bool:
            inotify = self._inotify_fd
            if inotify is None:  # watchdog 7.1.1 types it optional: not started yet
                return False
            mask = InotifyConstants.IN_OPEN | InotifyConstants.IN_MASK_ADD
            with inotify._lock:  # watchdog adds and removes its watches under it
                wd = inotify_add_watch(inotify._inotify_fd, os.fsencode(folder), mask)
                if wd == -1:
                    return False
                if wd not in inotify._watch_for_wd:  # a watch of our own: take it back
                    inotify_rm_watch(inotify._inotify_fd, wd)
                    return False
            return True
