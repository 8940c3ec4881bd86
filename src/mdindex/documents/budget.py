"""A time budget for reading, parsing and chunking one file.

Every step is linear in the file's size, but a shape nobody has tried yet
must cost one file, not the daemon: the loops of parsing and chunking call
``check()``, which raises ``FileTimeout`` once the file's budget is spent.
The budget lives in a thread-local, so the code in between needs no extra
argument; time spent embedding (semantic chunking) is not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mdindex.errors import FileTimeout

_local = threading.local()


@contextmanager
def budget(seconds: float | None) -> Iterator[None]:
    """Run the block under a budget of ``seconds`` (None: no budget)."""
    saved = getattr(_local, "deadline", None), getattr(_local, "seconds", None)
    _local.deadline = None if seconds is None else time.monotonic() + seconds
    _local.seconds = seconds
    try:
        yield
    finally:
        _local.deadline, _local.seconds = saved


@contextmanager
def paused() -> Iterator[None]:
    """Time spent in the block (embedding) does not count against the budget."""
    started = time.monotonic()
    try:
        yield
    finally:
        deadline = getattr(_local, "deadline", None)
        if deadline is not None:
            _local.deadline = deadline + time.monotonic() - started


def check() -> None:
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise FileTimeout(
            f"took over {_local.seconds:g} s to parse and chunk (file_time_budget_s); skipped"
        )
