"""How the daemon is doing, as systemd, Prometheus and `status` hear it: the
phase, why it is degraded, the totals since it started, and the gauges the
API's threads read (refreshed on the main thread, which owns the state)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mdindex.daemon.metrics import Metrics
from mdindex.daemon.notify import Notifier
from mdindex.errors import EmbeddingError, StateError, StoreError
from mdindex.index.indexer import Indexer
from mdindex.index.summary import Summary
from mdindex.outside import shown
from mdindex.runtime import version_of

log = logging.getLogger(__name__)

# Failures that pass: the store down, the embedder down or answering garbage,
# the local state refusing writes. The daemon keeps what it was doing for
# later, shows why, and tries again with backoff. Anything else its loop meets
# is a fault of its own: shown the same way (with the traceback in the log),
# never the end of the daemon (an answer of `"index": Infinity` once was).
PASSING = (StoreError, EmbeddingError, StateError)


@dataclass
class Gauges:
    """What the API's threads read of the live version."""

    documents: int = 0
    points: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    last_sync: str | None = None
    versions: list[dict[str, Any]] = field(default_factory=list)
    unresolved_links: int = 0
    languages: dict[str, int] = field(default_factory=dict)  # documents per language

    @classmethod
    def of(cls, indexer: Indexer, versions: list[dict[str, Any]]) -> Gauges:
        documents, points = indexer.counts()
        # its own row counts as it does now: the catalog's counts are those of the
        # last whole reconcile (status said 6 documents, its versions row 3)
        fp = version_of(indexer.settings)
        versions = [
            v | {"documents": documents, "points": points} if v.get("fingerprint") == fp else v
            for v in versions
        ]
        failed, last_sync = indexer.failures(), indexer.last_sync()
        links, langs = indexer.unresolved_links(), indexer.languages()
        return cls(documents, points, failed, last_sync, versions, links, langs)


class Health:
    def __init__(self, metrics: Metrics, notify: Notifier) -> None:
        self.metrics = metrics
        self.notify = notify
        self.started = False  # the startup reconcile has begun
        self.reconciling = False
        self.unhealthy = ""  # why the store does not answer, when it does not
        self.failures = 0  # failures in a row, for the backoff
        self.refused = ""  # deletions the guard refused, until a reconcile is not refused
        self.unwatched = ""  # why some folders are rescanned instead of watched
        self.unreadable = ""  # files the system refused to read, until a rescan reads them
        self.totals = Summary()
        self.gauges = Gauges()

    @property
    def reason(self) -> str:
        """Why the daemon is degraded ("" when it is not)."""
        if self.unhealthy:
            return self.unhealthy
        if self.refused:
            return f"deletions refused: {self.refused}"
        return self.unwatched or self.unreadable

    def phase(self, ready: bool) -> str:
        if not ready:
            return "starting"
        if self.reason:
            return "degraded"
        if self.reconciling:
            return "reconciling"
        return "watching" if self.started else "starting"

    def line(self, phase: str) -> str:
        """One line for systemd's status: the phase and the totals."""
        t = self.totals
        return (
            f"{phase}; {self.gauges.documents} documents, "
            f"{t.files_changed} indexed, {t.files_deleted} deleted, {t.files_failed} failed, "
            f"{t.chunks_embedded} chunks embedded"
        )

    def status(self, phase: str) -> None:
        self.notify.status(self.line(phase))

    def account(self, summary: Summary) -> None:
        """A sync went through: its counts into the totals and the metrics; the
        store answers again."""
        self.metrics.embedded.inc(summary.chunks_embedded)
        self.metrics.upserted.inc(summary.points_upserted)
        self.metrics.deleted.inc(summary.points_deleted)
        self.metrics.errors.inc(summary.files_failed)
        for key in ("files_changed", "files_deleted", "files_failed", "chunks_embedded"):
            setattr(self.totals, key, getattr(self.totals, key) + getattr(summary, key))
        self.metrics.last_sync.set(time.time())
        if self.unhealthy:
            log.info("%s works again", self.unhealthy.split(":")[0])
        self.unhealthy = ""
        self.failures = 0

    def store_failed(self, exc: Exception) -> None:
        """The store, the embedder or the state failed (``PASSING``), or the
        loop met a fault of its own: degraded, with the cause in one line."""
        what = _what(exc)
        cause = shown(str(exc).strip().split("\n")[0][:500]) or type(exc).__name__
        if isinstance(exc, PASSING):
            log.error("%s error; will retry: %s", what, cause)
        else:
            log.error("%s; will retry: %s", what, cause, exc_info=exc)
        self.failures += 1
        self.metrics.errors.inc()
        self.unhealthy = f"{what}: {cause.removeprefix(what + ' ')}"  # not "store: store ..."
        self.metrics.healthy.set(0)
        self.status(f"{what} unavailable, retrying")

    def publish(self, indexer: Indexer, versions: list[dict[str, Any]]) -> None:
        """The gauges of the live version, for the API's threads and Prometheus."""
        self.gauges = Gauges.of(indexer, versions)
        self.metrics.documents.set(self.gauges.documents)
        self.metrics.points.set(self.gauges.points)
        self.metrics.healthy.set(1 if not self.reason else 0)


def _what(exc: Exception) -> str:
    """What failed, as the first word of the degraded reason."""
    if isinstance(exc, EmbeddingError):
        return "embedding server" if "embedding server" in str(exc) else "embedder"
    if isinstance(exc, StateError):
        return "state"
    if isinstance(exc, StoreError):
        return "store"
    return f"internal error ({type(exc).__name__})"
