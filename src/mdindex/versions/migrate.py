"""`mdindex migrate`: copy a collection's points, vectors included, to another store.

Nothing is embedded (sparse vectors are computed from the payloads where the
target keeps them). The copy is streamed page by page, then points the
target holds beyond the source are deleted, so a migration that was
interrupted, or repeated, ends with the target equal to the source. The
source is left as it was. The local state is pointed at the target, so the
next run with the new settings starts without rebuilding it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from mdindex.config import Settings
from mdindex.embedding.sparse import SparseEncoder, sparse_text
from mdindex.errors import ConfigError, StoreError
from mdindex.index.consistency import store_identity
from mdindex.index.state import State
from mdindex.outside import quoted
from mdindex.runtime import make_store, state_path
from mdindex.sinks import Point, Store
from mdindex.versions.catalog import Catalog

log = logging.getLogger(__name__)

PAGE = 512


def copy_points(
    source: Store, target: Store, prepend_context: bool, sparse: bool = True
) -> tuple[int, set[str]]:
    """Every point of ``source`` into ``target`` (created on the first point, with
    a sparse vector when ``sparse``): points copied, and their IDs."""
    encoder = SparseEncoder() if sparse else None
    copied = 0
    seen: set[str] = set()
    batch: list[Point] = []
    for pid, payload, vector in source.scroll(payload=True, with_vectors=True, page=PAGE):
        if vector is None:
            continue
        if not copied and not batch:
            target.ensure_collection(len(vector), sparse=sparse)
        vectors = None
        if encoder is not None and target.has_sparse:
            lang = str(payload.get("lang") or "")
            vectors = encoder.document(sparse_text(payload, prepend_context), lang)
        batch.append(Point(pid, vector, payload, vectors))
        seen.add(pid)
        if len(batch) >= PAGE:
            copied += target.upsert(batch)
            batch = []
            if target.seal_due():  # a whole segment written: built before the next
                target.settle()
    if batch:
        copied += target.upsert(batch)
    return copied, seen


@dataclass
class MigrateReport:
    source: str
    target: str
    points_copied: int
    points_deleted: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        return (
            f"{self.points_copied} points copied from {self.source} to {self.target}, "
            f"{self.points_deleted} extra deleted, in {self.seconds:.1f}s (nothing embedded)"
        )


def target_settings(settings: Settings, to: str) -> Settings:
    """The settings that describe the target: "client", "edge" or a server URL."""
    if to in ("client", "edge"):
        changes: dict[str, Any] = {"store": to, "qdrant_url": None}
        if settings.qdrant_url is None and settings.qdrant_path is not None:
            # one folder cannot hold both engines; the target takes the default place
            changes["qdrant_path"] = None
    elif to.startswith(("http://", "https://")):
        changes = {"qdrant_url": to}
    else:
        raise ConfigError(f"--to: {quoted(to)} is not client, edge or an http(s):// server URL")
    return settings.model_copy(update=changes)


def migrate(settings: Settings, to: str) -> MigrateReport:
    """The live version goes; the others stay in the source store, forgotten."""
    started = time.monotonic()
    catalog = Catalog.load(settings)
    settings = catalog.reader_settings(settings)
    source = make_store(settings)
    target = make_store(target_settings(settings, to))
    if (source.where, source.collection) == (target.where, target.collection):
        raise ConfigError(f"--to: the collection is already in {target.where}")
    state = State(state_path(settings))
    try:
        source.open()
        if not source.exists() or not source.count():
            raise ConfigError(f"nothing to migrate: {source.where} holds no points")
        target.open()
        copied, seen = copy_points(
            source, target, settings.prepend_context, sparse=settings.sparse_vectors
        )
        extra = [pid for pid, _, _ in target.scroll(payload=False) if pid not in seen]
        deleted = target.delete(extra)
        held, wanted = target.count(), source.count()
        if held != wanted:
            raise StoreError(
                f"migration incomplete: target holds {held} points, source {wanted}; run it again"
            )
        target.settle()
        target.point_alias(settings.collection)
        state.adopt_store(store_identity(target))
        if catalog.live is not None:
            left = [fp for fp in catalog.versions if fp != catalog.live]
            for fp in left:
                log.info("version %s stays in %s; it is not migrated", fp, source.where)
                del catalog.versions[fp]
            catalog.pinned = None
            catalog.commit()
        report = MigrateReport(
            source.where, target.where, copied, deleted, time.monotonic() - started
        )
        log.info("%s", report.line())
        return report
    finally:
        source.close()
        target.close()
        state.close()
