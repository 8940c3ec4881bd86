"""qdrant-client's clients: one per server URL call, and one per local-mode
folder however many collections in it are open (it locks the folder), closed
when the last one lets go or at exit."""

from __future__ import annotations

import atexit
import gc
import logging
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from mdindex.errors import LockError, StoreError
from mdindex.jsonfile import private_dir
from mdindex.sinks.folder import left_open

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

log = logging.getLogger(__name__)

# One local-mode folder is one QdrantClient (it locks the folder), however many
# collections in it are open: the versions of a collection live side by side.
_LOCAL_CLIENTS: dict[Path, tuple[QdrantClient, int]] = {}
_LOCAL_LOCKS: dict[Path, threading.RLock] = {}


@atexit.register
def _close_local_clients() -> None:
    """Clients a caller never closed, closed while the interpreter still can."""
    for folder, (client, _) in list(_LOCAL_CLIENTS.items()):
        if left_open(client, folder):
            continue
        try:
            client.close()
        except Exception as exc:  # exiting anyway
            log.debug("closing qdrant client at exit: %s", exc)
    _LOCAL_CLIENTS.clear()


def transient(exc: BaseException) -> bool:
    """A failure worth a retry: the connection, a server's 5xx or 429, a busy or
    refusing local folder."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, ResponseHandlingException):
        return True  # connection refused, reset, timeout
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code is not None and (exc.status_code >= 500 or exc.status_code == 429)
    if isinstance(exc, sqlite3.OperationalError | OSError | TimeoutError):
        return True  # local store: read-only folder, disk full, busy
    return type(exc).__name__ in ("RpcError", "_InactiveRpcError", "AioRpcError")


def folder_lock(path: Path) -> threading.RLock:
    """Local mode is not thread-safe: one lock per folder, for every store in it."""
    return _LOCAL_LOCKS.setdefault(path.resolve(), threading.RLock())


def connect_server(
    url: str, api_key: str | None, prefer_grpc: bool, timeout_s: float
) -> QdrantClient:
    from qdrant_client import QdrantClient

    return QdrantClient(
        url=url,
        api_key=api_key,
        prefer_grpc=prefer_grpc,
        timeout=int(timeout_s),
        # Its background version probe dies noisily on an unreachable
        # server; reachability is checked, with retries, by our first call.
        check_compatibility=False,
    )


def local_made(path: Path) -> bool:
    """Whether local mode has ever opened the folder: it writes ``meta.json``
    (its list of collections) at once, so without one there is no collection.
    A folder that cannot be looked into counts as made, for opening to say why."""
    try:
        return (path / "meta.json").exists()
    except OSError:
        return True


def connect_local(path: Path) -> QdrantClient:
    """The folder's client, shared with the other stores open in it."""
    from qdrant_client import QdrantClient

    private_dir(path)  # 0700 whatever the umask: the engine's files take it
    key = path.resolve()
    if key in _LOCAL_CLIENTS:
        client, users = _LOCAL_CLIENTS[key]
        _LOCAL_CLIENTS[key] = (client, users + 1)
        return client
    try:
        client = QdrantClient(path=str(path))
        _LOCAL_CLIENTS[key] = (client, 1)
        return client
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise StoreError(f"cannot open embedded store {path}: {exc}") from exc
    # qdrant-client leaves its lock file open on that path. Out here the
    # traceback that held the half-built client is gone, so it can be
    # closed now, quietly, rather than at some later garbage collection.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    raise LockError(
        f"embedded store {path} is open in another process; "
        "stop it or ask the running daemon (mdindex search/status use it)"
    )


def release(client: QdrantClient, path: Path | None) -> None:
    """A store lets go of its client: a local folder's stays while another uses it."""
    if path is not None:
        key = path.resolve()
        _, users = _LOCAL_CLIENTS.pop(key, (None, 1))
        if users > 1:  # another version in the folder still uses it
            _LOCAL_CLIENTS[key] = (client, users - 1)
            return
        if left_open(client, path):
            return
    try:
        client.close()
    except Exception as exc:  # closing must never mask the real outcome
        log.debug("closing qdrant client: %s", exc)


def said(caught: list[warnings.WarningMessage]) -> None:
    """What qdrant-client warned of while opening, logged, with what to do about
    a local store grown too large for it."""
    for warning in caught:
        text = str(warning.message).splitlines()[0]
        log.warning("qdrant-client: %s", text)
        if "not recommended" in text:
            log.warning(
                "a store this size is better on qdrant-edge (bench/stores.py: edits 6-10x "
                "faster, reopening 8-16x, a sixth of the memory); `mdindex migrate --to edge` "
                "moves it without embedding, then use --store edge"
            )
