"""qdrant-client's clients: one per local folder however many of its collections
are open (the versions of an index live side by side), kept while any store
uses it; and which failures are worth a retry."""

from __future__ import annotations

import multiprocessing
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from mdindex.errors import LockError
from mdindex.sinks import Point
from mdindex.sinks.qdrant import QdrantStore
from mdindex.sinks.qdrant.clients import connect_local, folder_lock, release, transient
from tests.conftest import umask


def _open_from_another_process(folder: str, collection: str, results: Any, again: Any) -> None:
    """Open the folder's client twice: now, and once ``again`` is set."""
    for _ in range(2):
        try:
            client = connect_local(Path(folder))
        except LockError:
            results.put("locked")
        else:
            results.put(client.count(collection, exact=True).count)
            release(client, Path(folder))
        again.wait(60)


def point(n: int) -> Point:
    return Point(str(uuid.UUID(int=n + 1)), [1.0, float(n)], {"doc_path": f"{n}.md"})


def test_versions_in_one_folder_share_its_client_until_the_last_lets_go(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    a, b = QdrantStore("a", path=folder), QdrantStore("b", path=folder)
    a.open()
    b.open()
    assert a.client is b.client  # one client holds the folder's lock
    for store, n in ((a, 1), (b, 2)):
        store.ensure_collection(2)
        store.upsert([point(i) for i in range(n)])
    a.close()
    # the other version goes on with the same client
    b.upsert([point(5)])
    assert b.count() == 3 and b.client.count("a", exact=True).count == 1
    ctx = multiprocessing.get_context("spawn")
    results, again = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_open_from_another_process, args=(str(folder), "b", results, again))
    child.start()
    try:
        assert results.get(timeout=60) == "locked"  # b still holds the folder
        b.close()
        again.set()
        assert results.get(timeout=60) == 3  # the last store let go: the lock with it
    finally:
        again.set()
        child.join(60)
    reopened = QdrantStore("a", path=folder).open()
    try:
        assert reopened.count() == 1
    finally:
        reopened.close()


def test_the_store_folder_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """The Python API leaves the umask alone (the command line sets 077): under
    umask 002 the embedded store's folders came out group-writable and
    world-readable, the indexed text with them."""
    folder = tmp_path / "state" / "qdrant"
    with umask(0o002):
        client = connect_local(folder)
    release(client, folder)
    for made in (tmp_path / "state", folder):
        assert made.stat().st_mode & 0o777 == 0o700, made


def test_a_store_reopened_beside_another_gets_the_shared_client(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    a = QdrantStore("a", path=folder).open()
    b = QdrantStore("b", path=folder).open()
    try:
        a.close()
        a.open()
        assert a.client is b.client
        b.close()
        b.close()  # closing twice lets go once
        assert a.client.collection_exists("a") is False  # still open for a
    finally:
        a.close()
        b.close()


def test_one_lock_per_folder_whatever_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "qdrant"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    lock = folder_lock(folder)
    assert folder_lock(folder) is lock
    assert folder_lock(tmp_path / "link") is lock
    assert folder_lock(folder / "sub" / "..") is lock
    assert folder_lock(tmp_path / "other") is not lock


class RpcError(Exception):
    """What gRPC raises, by its name (grpc is not imported for it)."""


def http_error(status: int | None) -> UnexpectedResponse:
    return UnexpectedResponse(status, "reason", b"", httpx.Headers())


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (ResponseHandlingException(ConnectionRefusedError("refused")), True),
        (http_error(500), True),
        (http_error(503), True),
        (http_error(429), True),  # too many requests
        (http_error(404), False),
        (http_error(400), False),
        (http_error(None), False),
        (sqlite3.OperationalError("database is locked"), True),  # a busy local folder
        (OSError(28, "No space left on device"), True),
        (TimeoutError("timed out"), True),
        (RpcError("unavailable"), True),
        (ValueError("wrong vector size"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_which_failures_are_retried(exc: BaseException, retried: bool) -> None:
    assert transient(exc) is retried
