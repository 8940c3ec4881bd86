"""One channel for what the API's threads ask of the daemon's main loop.

A request (a reconcile, a flush of the paths waiting, a verify, `versions
use`, `versions drop`) is put in the mailbox
by the thread that serves it, which then waits for the answer, its timeout,
or the daemon stopping. The main loop, which alone owns the state and the
store's writes, takes everything that waits and answers each request.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mdindex.errors import MdindexError, StoreError

KINDS = ("reconcile", "flush", "verify", "use", "drop")


@dataclass(eq=False)
class Request:
    kind: str  # one of KINDS
    args: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)
    error: MdindexError | None = None
    done: threading.Event = field(default_factory=threading.Event)
    waiting: int = 0  # askers waiting for it (more than one: joined)

    @property
    def abandoned(self) -> bool:
        """Its askers stopped waiting: nobody reads the answer. (Put and its
        first asker counted under the mailbox's lock, so never a new one.)"""
        return self.waiting == 0

    def reply(
        self, answer: dict[str, Any] | None = None, error: MdindexError | None = None
    ) -> None:
        """The main loop's answer (or why there is none); the asking thread wakes."""
        self.answer |= answer or {}
        self.error = error
        self.done.set()


class Mailbox:
    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._queue: queue.Queue[Request] = queue.Queue()
        self._stopping = stopping
        self._lock = threading.Lock()
        self._asked: dict[tuple[str, tuple[tuple[str, Any], ...]], Request] = {}  # join=True

    def ask(
        self, kind: str, timeout: float | None = None, join: bool = False, **args: Any
    ) -> dict[str, Any] | None:
        """Put a request and wait for its answer (API thread); None when
        ``timeout`` passes first. The main loop's error is raised here. With
        ``join``, the same request (kind and arguments) still waiting or under
        way is waited for instead: a verify asked again after a Ctrl-C, or by
        16 clients, ran once each, one after another, holding the API's slots."""
        assert kind in KINDS
        key = (kind, tuple(sorted(args.items())))
        with self._lock:
            request = self._asked.get(key) if join else None
            if request is None or request.done.is_set():
                request = Request(kind, args)
                self._queue.put(request)
                if join:
                    self._asked[key] = request
            request.waiting += 1
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while not request.done.wait(max(0.0, min(1.0, deadline - time.monotonic()))):
            if self._stopping():
                raise StoreError(f"the daemon is stopping; {kind} not done")
            if time.monotonic() >= deadline:
                with self._lock:
                    request.waiting -= 1
                return None
        if request.error is not None:
            raise request.error
        return request.answer

    def take(self) -> list[Request]:
        """Every request still waited for (main loop)."""
        out: list[Request] = []
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return out
            with self._lock:  # never one a new asker has just joined
                if not request.abandoned:
                    out.append(request)
                else:
                    request.done.set()  # nobody waits; one asked again makes a new one

    def __bool__(self) -> bool:
        """Something waits."""
        return not self._queue.empty()
