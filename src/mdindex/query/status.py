"""`mdindex status`: how fresh the index is. The daemon and the CLI answer with
the same fields; without a daemon they come from the state and a scan.

- ``phase``: ``starting``, ``reconciling``, ``watching``, ``degraded`` (with
  ``reason``), or ``stopped`` when no daemon runs;
- ``coverage``: documents indexed of files seen, and the ``failed`` files with why;
- ``queue_paths`` and ``oldest_wait_s``: changes seen but not yet searchable
  (without a daemon, ``pending`` counts what a backfill would change);
- ``embedding``: the backend and precision the embedder computes with, and why;
- ``versions``: every version of the index (``mdindex.versions.catalog``): the live
  one, the one the settings ask for, and a build's ``progress``;
- ``caught_up`` (with ``--wait``): every change made before the call is searchable.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.config import Settings
from mdindex.documents.files import printable
from mdindex.embedding.model import model_languages_of

if TYPE_CHECKING:
    from mdindex.index.indexer import Indexer

PHASES = ("starting", "reconciling", "watching", "degraded", "stopped")


def fields(
    settings: Settings,
    store: dict[str, Any],
    *,
    documents: int,
    files_seen: int,
    failed: list[dict[str, str]],
    last_sync: str | None,
    phase: str,
    reason: str = "",
    embedding: dict[str, Any] | None = None,
    versions: list[dict[str, Any]] | None = None,
    unresolved_links: int = 0,
    languages: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What every status says, daemon or not. ``store`` holds ``store`` (where),
    ``points`` and what the engine tells about itself."""
    return {
        "collection": settings.collection,
        **store,
        "model": settings.model,
        "strategy": settings.strategy,
        "embedding": embedding or {},
        "documents": documents,
        "last_sync": last_sync,
        "phase": phase,
        "reason": reason,
        "files_seen": files_seen,
        # a starting daemon has not scanned yet: "2 of 0" read as nonsense
        "coverage": f"{documents} of {files_seen}"
        if files_seen or not documents
        else f"{documents} indexed (the roots not scanned yet)",
        "failed": [{**f, "path": printable(f["path"])} for f in failed],
        # local links to no indexed document (`mdindex links --broken` lists them)
        "unresolved_links": unresolved_links,
        "versions": versions or [],
        # documents per language ("" unknown), and those the dense model reads
        "languages": languages or {},
        "model_languages": list(model_languages_of(settings)),
    }


def offline_status(settings: Settings) -> dict[str, Any]:
    """Status without a daemon: the state's counts and failures, and a scan of
    the roots for what has changed since (nothing is written)."""
    from mdindex.versions.catalog import Catalog, reader_settings, require_live

    require_live(settings)
    live = reader_settings(settings)
    if not settings.root_list():
        return _without_roots(settings, live)
    with _reading(live) as (indexer, empty):
        changes = indexer.changes()
        # size and mtime only say a file may have changed; its text decides
        changed, unreadable = indexer.confirm(changes)
        documents, _ = indexer.counts()
        # what the guard would refuse of the pending deletions (mdindex.index.guard)
        refused = indexer.deletion_refused(changes.deleted, changes.present)
        failed = {(f["root"], f["path"]): f for f in indexer.failures()}
        failed |= {  # keyed as the state keeps them: a name with ESC was counted twice
            (f.root, printable(f.rel)): {
                "root": f.root,
                "path": printable(f.rel),
                "reason": f.reason,
            }
            for f in changes.failures + unreadable
        }
        data = fields(
            live,
            indexer.store_status(indexer.known_points()),
            documents=documents,
            files_seen=changes.seen,
            failed=sorted(failed.values(), key=lambda f: (f["root"], f["path"])),
            last_sync=indexer.last_sync(),
            phase="stopped",
            reason=f"deletions refused: {refused}" if refused else empty,
            embedding=indexer.embedding_status(),
            versions=Catalog.load(settings).rows(settings),
            unresolved_links=indexer.unresolved_links(),
            languages=indexer.languages(),
        )
    return data | {
        "daemon": False,
        "pending": {"changed": len(changed), "deleted": len(changes.deleted)},
        "missing_roots": changes.missing_roots,
        "caught_up": not (changed or changes.deleted),
    }


@contextmanager
def _reading(live: Settings) -> Iterator[tuple[Indexer, str]]:
    """The sync core on the live version's state, and "" with it; where there
    is no state yet (nothing indexed, or a mistyped --state-dir), on an empty
    one in a temporary folder, with a reason that says so: status creates
    nothing."""
    from mdindex.index.state import State
    from mdindex.runtime import make_indexer, make_store, state_path

    path = state_path(live)
    if path.exists():
        with make_indexer(live) as indexer:
            yield indexer, ""
        return
    store = make_store(live)
    why = f"nothing indexed yet in {live.state_dir}"
    if store.exists():  # the state alone is gone: the store's counts stand
        why = f"no local state in {live.state_dir}: the next sync rebuilds it from the store"
    with (
        tempfile.TemporaryDirectory(prefix="mdindex-status-") as tmp,
        make_indexer(live, store=store, state=State(Path(tmp) / path.name)) as indexer,
    ):
        yield indexer, why


def _without_roots(settings: Settings, live: Settings) -> dict[str, Any]:
    """No daemon and no roots given: what the state and the store say, and that
    the files were not looked at (nothing is refused, nothing is pending)."""
    from mdindex.versions.catalog import Catalog

    with _reading(live) as (indexer, empty):
        documents, _ = indexer.counts()
        data = fields(
            live,
            indexer.store_status(indexer.known_points()),
            documents=documents,
            files_seen=0,
            failed=indexer.failures(),
            last_sync=indexer.last_sync(),
            phase="stopped",
            reason=empty or "no roots given: the files were not compared with the index",
            embedding=indexer.embedding_status(),
            versions=Catalog.load(settings).rows(settings),
            unresolved_links=indexer.unresolved_links(),
            languages=indexer.languages(),
        )
    return data | {
        "coverage": f"{documents} indexed (no roots given)",
        "daemon": False,
        "pending": None,
        "missing_roots": [],
        "caught_up": None,
    }
