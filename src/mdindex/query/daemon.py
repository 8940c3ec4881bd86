"""Find the running watch daemon and ask it: through the lock file, with the
token it wrote beside it, again for every call, so a client follows a daemon
that restarted with a new token. A daemon that holds the lock but has no
socket yet (its first moments), or no token any more (it is stopping), is
waited for."""

from __future__ import annotations

import errno
import http.client
import logging
import os
import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdindex.config import Settings
from mdindex.errors import (
    ConfigError,
    MdindexError,
    PruneRefused,
    RepairRefused,
    StoreUnavailable,
)
from mdindex.index.lock import lock_path, read_holder, token_path
from mdindex.jsonfile import open_regular, parse_json
from mdindex.outside import integer, shown

log = logging.getLogger(__name__)

# How long a call waits for a daemon that holds the lock but has no socket yet
# (the first milliseconds of its start).
START_WAIT_S = 30.0
# The daemon's answers are a status, search hits, or MCP's 2 MB reads: more is not an answer.
MAX_ANSWER_BYTES = 64 << 20


class DaemonGone(MdindexError):
    """The daemon found a moment ago does not answer any more (stopped, restarted)."""


@dataclass(frozen=True)
class DaemonClient:
    """How to ask the running daemon: its Unix socket (or TCP endpoint) and token."""

    socket: str
    url: str
    token: str

    def ask(self, path: str, post: bool = False, timeout: float | None = None) -> Any:
        """GET (or POST, for a reconcile that may run for hours) one endpoint."""
        timeout = timeout or (24 * 3600 if post else 30)
        conn: http.client.HTTPConnection
        if self.socket:
            conn = _UnixConnection(self.socket, timeout)
        else:
            parts = urllib.parse.urlsplit(self.url)
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        try:
            conn.request(
                "POST" if post else "GET", path, headers={"Authorization": f"Bearer {self.token}"}
            )
            resp = conn.getresponse()
            body = resp.read()
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ECONNRESET):
                raise DaemonGone(f"the daemon at {self.where} is gone: {exc}") from exc
            raise StoreUnavailable(f"the daemon at {self.where} did not answer: {exc}") from exc
        finally:
            conn.close()
        try:
            data = parse_json(body or b"null", MAX_ANSWER_BYTES)
        except ValueError:
            data = None
        if resp.status != 200:
            detail = (
                data.get("error")
                if isinstance(data, dict)
                else body[:200].decode("utf-8", "replace")
            )
            detail = shown(str(detail)[:500])
            if resp.status == 401:  # another daemon's token: it restarted
                raise DaemonGone(f"the daemon at {self.where} refused the token: {detail}")
            if resp.status == 400:  # our request, not the daemon, is at fault
                raise ConfigError(f"the daemon refused {path.split('?')[0]}: {detail}")
            if resp.status == 409:  # a guarded repair: exit 2 here, as without a daemon
                refused = data.get("refused") if isinstance(data, dict) else None
                raise (RepairRefused if refused == "repair" else PruneRefused)(detail)
            raise StoreUnavailable(f"the daemon at {self.where} refused {path}: {detail}")
        return data

    @property
    def where(self) -> str:
        return self.socket or self.url


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def find_daemon(
    settings: Settings, required: bool = True, wait_s: float = START_WAIT_S
) -> DaemonClient | None:
    """The running daemon when it holds this state dir and collection: found
    through the lock file, with the token it wrote beside it. One that holds
    the lock but has no endpoint yet, or no token any more (it is stopping),
    is waited for, up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = read_holder(lock_path(settings.state_dir, settings.collection))
        if not holder or holder.get("command") != "watch":
            return None
        sock = str(holder.get("socket") or "")
        url = ""
        if holder.get("http_port"):
            try:  # the lock file is anyone's to edit who can write the state dir
                port = integer(holder["http_port"], "the lock's http_port", 1, 65535)
                url = (
                    f"http://{urllib.parse.quote(str(holder.get('http_host')), safe='.:[]')}:{port}"
                )
            except ValueError as exc:
                log.warning("%s: ignored", exc)
        if sock or url:
            path = token_path(settings.state_dir, settings.collection)
            try:
                return DaemonClient(sock, url, _read_token(path))
            except FileNotFoundError as exc:
                # A daemon removes its token as it stops, and releases its lock
                # last: wait for that (then the store is opened here), as for
                # a daemon whose socket is not open yet. Failing at once told a
                # client racing a stop to "run this as the daemon's user".
                if time.monotonic() >= deadline:
                    raise _unreadable(holder, path, exc) from exc
            except OSError as exc:
                raise _unreadable(holder, path, exc) from exc
        elif settings.qdrant_url or not required:
            return None  # a server store can be shared; go to it directly
        elif time.monotonic() >= deadline:
            raise StoreUnavailable(
                f"the daemon (pid {holder.get('pid')}) holds the embedded store but did not "
                f"open its socket within {wait_s:.0f} s; see its log"
            )
        time.sleep(0.05)


def _unreadable(holder: dict[str, Any], path: Path, exc: OSError) -> StoreUnavailable:
    return StoreUnavailable(
        f"the daemon (pid {holder.get('pid')}) holds the store, and its token {path} "
        f"cannot be read ({exc.strerror}); run this as the daemon's user"
    )


def _read_token(path: Path) -> str:
    """The token file's token, or OSError: a FIFO in its place held every
    client in its open, a link to /dev/zero read for ever, and bytes that are
    not UTF-8 (or a token with a newline inside, refused by http.client as a
    header) raised ValueError out of every call."""
    with os.fdopen(open_regular(path), "rb") as f:
        raw = f.read(4097)
    token = raw.strip()
    if len(raw) > 4096 or not token or not all(0x20 <= b < 0x7F for b in token):
        raise OSError(errno.EINVAL, "not a token (printable ASCII, at most 4,096 bytes)")
    return token.decode("ascii")
