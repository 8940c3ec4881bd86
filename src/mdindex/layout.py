"""Copying points between stores, and rebuilding an embedded store in a new layout.

Nothing here embeds: dense vectors are copied as stored, and sparse vectors
are computed from each point's payload (mdindex.sparse) where the target
keeps them.

A collection built before sparse vectors existed cannot gain one in place
(Qdrant adds no vector to an existing collection: qdrant-client says "Vector
bm25 does not exist in the collection"). An embedded store is therefore
rebuilt beside itself, in ``<folder>.relayout``, and switched in by two
renames; a crash between them is undone on the next open (``recover``), and
a crash before them leaves the old store as it was. Nobody searches the
store meanwhile: an embedded store is open in one process only, this one.
A server's collection is not rebuilt here; the error says what to do
(a switch by alias is for versioned collections).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from mdindex.errors import LayoutMismatch, StoreError
from mdindex.sparse import SparseEncoder, sparse_text
from mdindex.stores import Point, Store

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
            vectors = encoder.document(sparse_text(payload, prepend_context))
        batch.append(Point(pid, vector, payload, vectors))
        seen.add(pid)
        if len(batch) >= PAGE:
            copied += target.upsert(batch)
            batch = []
    if batch:
        copied += target.upsert(batch)
    return copied, seen


def side(folder: Path, what: str) -> Path:
    return folder.with_name(f"{folder.name}.{what}")


def recover(folder: Path) -> None:
    """Finish or undo a switch a crash interrupted: the old folder back in place
    when the new one never arrived, and leftovers removed."""
    old, new = side(folder, "old"), side(folder, "relayout")
    if not folder.exists() and old.exists():
        log.warning("a store rebuild was interrupted; putting %s back", folder)
        old.rename(folder)
    if folder.exists():
        for leftover in (old, new):
            if leftover.exists():
                shutil.rmtree(leftover)


def relayout(
    store: Store,
    folder: Path,
    make: Callable[[Path], Store],
    dimension: int,
    prepend_context: bool,
) -> int:
    """Rebuild the embedded ``store`` (its files in ``folder``) with the sparse
    vector, beside it, and switch it in; ``make(path)`` gives a store of the
    same kind at another folder. Returns the points copied."""
    started = time.monotonic()
    new_folder, old_folder = side(folder, "relayout"), side(folder, "old")
    if new_folder.exists():
        shutil.rmtree(new_folder)  # an earlier attempt that did not finish
    target = make(new_folder)
    try:
        target.open()
        target.ensure_collection(dimension, sparse=True)
        copied, _ = copy_points(store.open(), target, prepend_context)
        if target.count() != store.count():
            raise StoreError(
                f"rebuilding {folder}: copied {target.count()} of {store.count()} points"
            )
    finally:
        target.close()
        store.close()
    folder.rename(old_folder)
    new_folder.rename(folder)
    shutil.rmtree(old_folder)
    log.info(
        "rebuilt %s with sparse vectors: %d points copied in %.1fs, nothing embedded",
        folder,
        copied,
        time.monotonic() - started,
    )
    return copied


def upgrade(store: Store, exc: LayoutMismatch, dimension: int, prepend_context: bool) -> None:
    """Give an embedded store the sparse vector (``relayout``), or say why not."""
    from mdindex.stores.edge import EdgeStore
    from mdindex.stores.qdrant import QdrantStore

    if isinstance(store, EdgeStore):
        edge = store

        def make_edge(path: Path) -> Store:
            return EdgeStore(edge.collection, path=path, index_min_points=edge.index_min_points)

        relayout(store, store.path, make_edge, dimension, prepend_context)
        return
    if isinstance(store, QdrantStore) and store.path is not None:
        folder = store.path
        others = sorted(
            p.name
            for p in (folder / "collection").glob("*")
            if p.is_dir() and p.name != store.collection
        )
        if others:
            raise LayoutMismatch(
                f"{exc}; it cannot be rebuilt here because {folder} also holds "
                f"{', '.join(others[:3])}: set sparse_vectors = false, or give mdindex a "
                "qdrant_path of its own"
            )
        collection = store.collection

        def make_client(path: Path) -> Store:
            return QdrantStore(collection, path=path)

        relayout(store, folder, make_client, dimension, prepend_context)
        return
    raise LayoutMismatch(
        f"{exc}: a server collection cannot gain one in place. Set sparse_vectors = false "
        f"to keep searching {store.collection!r} densely, or index into a new --collection"
    )
