"""Calls that may fail for a moment (a store restarting, a server busy), tried
again with exponential backoff and jitter until a time budget is spent.

The stores and the embedding server share this loop; each says which failures
are transient and which of mdindex's errors the rest become, so a third-party
exception never leaves the boundary untranslated.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from mdindex.errors import MdindexError
from mdindex.outside import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_DELAY_S = 0.2
MAX_DELAY_S = 10.0


def retry(
    call: Callable[[], T],
    *,
    what: str,
    budget_s: float,
    transient: Callable[[BaseException], bool],
    failed: Callable[[BaseException], MdindexError],
    gave_up: Callable[[BaseException, int], MdindexError],
) -> T:
    """``call()``, tried again while it fails with a ``transient`` error and the
    budget lasts. A lasting failure raises ``failed(exc)``; transient ones past
    the budget raise ``gave_up(exc, attempts)``; mdindex's own errors pass as
    they are."""
    deadline = time.monotonic() + budget_s
    delay = FIRST_DELAY_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except MdindexError:
            raise
        except Exception as exc:
            if not transient(exc):
                raise failed(exc) from exc
            left = deadline - time.monotonic()
            if left <= 0:
                raise gave_up(exc, attempt) from exc
            sleep = min(left, delay * (0.5 + random.random()))
            log.warning("%s failed (%s); retry %d in %.1fs", what, short(exc), attempt, sleep)
            time.sleep(sleep)
            delay = min(delay * 2, MAX_DELAY_S)


def short(exc: BaseException) -> str:
    """An exception in one line, credentials in URLs masked."""
    text = redact(str(exc) or type(exc).__name__)
    return " ".join(text.split())[:300]
