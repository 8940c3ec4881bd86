"""Paths that changed, held until things are quiet: the watcher's events
coalesced per path and handed to the main loop in batches (``Debouncer``).
What the path holds once it is handed on decides between index and delete."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field


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


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class Debouncer:
    """Coalesces changes per path and releases them together once things are quiet.

    Paths are released when no event at all has arrived for ``quiet`` seconds,
    so a whole ``git checkout`` lands in one batch; a path waiting
    ``max_wait`` is released even while other paths keep changing, and the
    two ends of a move always go together. A file whose size or mtime moved
    since its last event is still being written and waits another quiet period.
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
        # path -> every path of the moves it was an end of (one set, shared)
        self.moves: dict[str, set[str]] = {}

    def add(self, change: Change) -> None:
        now = self.clock()
        self.latest = now
        old = self.pending.get(change.path)
        first = old[3] if old else now
        is_dir = change.is_dir or (old[0] if old else False)
        self.pending[change.path] = (is_dir, now, _stat(change.path), first)

    def add_event(self, changes: tuple[Change, ...]) -> None:
        """The paths one event touched; a move's two ends are released together."""
        for change in changes:
            self.add(change)
        if len(changes) == 2:
            src, dst = (c.path for c in changes)
            group = self.moves.get(src, {src}) | self.moves.get(dst, {dst})
            for path in group:
                self.moves[path] = group

    def take(self, events: queue.Queue[tuple[Change, ...]], timeout: float) -> None:
        """Add the queued events (each the paths one event touched); wait up to
        ``timeout`` for the first, but never past the moment a waiting path is due."""
        deadline = self.next_deadline()
        wait = timeout if deadline is None else max(0.0, min(timeout, deadline - self.clock()))
        try:
            changes = events.get(timeout=wait)
        except queue.Empty:
            return
        while True:
            self.add_event(changes)
            try:
                changes = events.get_nowait()
            except queue.Empty:
                return

    def add_path(self, path: str, is_dir: bool, delay: float) -> None:
        """Queue a path again, ready no sooner than ``delay`` seconds from now."""
        now = self.clock()
        self.pending[path] = (is_dir, now + max(0.0, delay - self.quiet), _stat(path), now)

    def requeue(self, batch: Batch, delay: float) -> None:
        """A batch the sync core could not take, queued again (``add_path``) as one
        group, so that the ends of its moves go together again."""
        group = set(batch.files) | set(batch.dirs)
        for path in batch.files:
            self.add_path(path, False, delay)
        for path in batch.dirs:
            self.add_path(path, True, delay)
        for path in list(group):  # with the groups of events that came meanwhile
            group |= self.moves.get(path, set())
        for path in group:
            self.moves[path] = group

    def clear(self) -> None:
        """Forget every path waiting (a root replaced: they name the old folder)."""
        self.pending.clear()
        self.moves.clear()

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

    def take_all(self) -> Batch:
        """Every path waiting, due or not (a `status --wait` wants them now)."""
        batch = Batch()
        for path, (is_dir, _, _, _) in self.pending.items():
            (batch.dirs if is_dir else batch.files).append(path)
        self.clear()
        return batch

    def ready(self, limit: int = 1000) -> Batch:
        """Pop the paths that may go now, each with the rest of its moves' group;
        restart the clock of files still being written."""
        now = self.clock()
        all_quiet = now - self.latest >= self.quiet
        batch = Batch()
        for path, (_, last, _, first) in list(self.pending.items()):
            if path not in self.pending:  # gone with a group
                continue
            if now - last < self.quiet or not (all_quiet or now - first >= self.max_wait):
                continue
            if not self._settled(path, now):
                continue
            # The other ends of its moves go with it: the sync core reuses a moved
            # file's vectors only when its delete comes in the batch of its new path
            # (deletes run after writes); apart, the file was embedded again. They
            # must be settled too (a file appended after its move), up to 2 x max_wait.
            group = [p for p in self.moves.get(path, ()) if p != path and p in self.pending]
            if now - first < 2 * self.max_wait and not all(self._settled(p, now) for p in group):
                continue
            size = len(batch.files) + len(batch.dirs)
            if size and size + 1 + len(group) > limit:
                break  # a group larger than the room left goes first in the next batch
            for p in (path, *group):
                self.moves.pop(p, None)
                is_dir = self.pending.pop(p)[0]
                (batch.dirs if is_dir else batch.files).append(p)
            if size + 1 + len(group) >= limit:
                break
        return batch

    def _settled(self, path: str, now: float) -> bool:
        """Quiet for ``quiet`` and, a file, its size and mtime as at its last event;
        a file still being written starts another quiet period."""
        is_dir, last, seen, first = self.pending[path]
        if now - last < self.quiet:
            return False
        if not is_dir:
            current = _stat(path)
            if current != seen:  # moved without an event reaching us yet
                self.pending[path] = (is_dir, now, current, first)
                return False
        return True
