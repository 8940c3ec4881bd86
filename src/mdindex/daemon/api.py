"""What the daemon answers on its API's threads: health, search, status (and
waiting for freshness), reconcile, verify, versions; the same for its MCP tools; and
the endpoints it listens on (a Unix socket, a TCP port when set).

These run beside the main loop, so they only read what it publishes (the
gauges, the live version's sync core once the model is loaded) and hand
anything that writes to it through the mailbox.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from mdindex.daemon.http import LOOPBACK, Api, HttpServer
from mdindex.daemon.mcp_http import McpBridge
from mdindex.daemon.shared import Shared
from mdindex.daemon.token import load_token, write_token
from mdindex.errors import MdindexError, StoreError
from mdindex.index.indexer import Indexer
from mdindex.index.lock import socket_path, token_path
from mdindex.index.search import Query
from mdindex.query.mcp_server import build_server
from mdindex.query.status import fields

log = logging.getLogger(__name__)

SOCKET_PATH_MAX = 100
# How long a search waits for a first index to be complete before saying so.
FIRST_INDEX_WAIT_S = 5.0


class DaemonApi:
    """The daemon as its API's threads and its MCP tools see it: what it shares."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def health(self) -> tuple[bool, str]:
        d = self.shared
        if not d.ready.is_set():
            return False, "starting"
        if not d.watcher.alive():
            return False, "file observer is not running"
        return (not d.health.reason), d.health.reason or "watching"

    def serving(self, timeout: float | None = None) -> Indexer:
        """The live version's sync core, once the daemon can answer: a request
        that arrives while it loads its model waits for it (``timeout``, by
        default the daemon's ``starting_wait_s``), and while it builds a first
        index, up to FIRST_INDEX_WAIT_S of that."""
        d = self.shared
        wait = d.timings.starting_wait_s if timeout is None else timeout
        deadline = time.monotonic() + wait
        if not d.ready.wait(wait) or d.builds.live is None:
            raise StoreError("the daemon is still starting (loading its model); try again")
        # A first index answers once its first pass is complete: a search while
        # it ran answered from a half-built index ("no results", exit 0). The
        # wait is short: a waiting request holds one of the server's slots, and
        # a first pass over a large tree takes hours.
        deadline = min(deadline, time.monotonic() + FIRST_INDEX_WAIT_S)
        while d.rollout.live is None:
            if time.monotonic() >= deadline:
                done, seen = d.health.gauges.documents, d.files_seen
                raise StoreError(
                    f"the daemon is still building the first index ({done} of {seen} files "
                    "so far); try again, or wait for it with `mdindex status --wait`"
                )
            time.sleep(0.05)
        return d.builds.live

    def search(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A search from the API's parameters; ValueError for a bad one."""
        s = self.shared.settings
        try:
            return self.serving().search(Query.from_params(params, s.search_mode, s.fusion))
        finally:
            self.shared.last_search = time.monotonic()

    def reconcile(self, timeout: float | None = None, force: bool = False) -> dict[str, Any]:
        """A whole reconcile on the main loop, and its summary; {} when ``timeout``
        passes first. ``force``: deletions the guard would refuse are made."""
        return self.shared.mailbox.ask("reconcile", timeout, force=force) or {}

    def verify(self, repair: bool = False, force: bool = False) -> dict[str, Any]:
        """`mdindex verify [--repair]` of the live version, on the main loop once
        it serves one: the report (``VerifyReport.as_dict``)."""
        self.serving()
        return self.shared.mailbox.ask("verify", join=True, repair=repair, force=force) or {}

    def caught_up(self, wait: float) -> tuple[dict[str, Any], str]:
        """Sync every change made before the call, within ``wait`` seconds: the
        summary ({} at the timeout) and how it was known. A barrier through the
        watcher ("events") costs the same on any tree (``watcher.Barrier``);
        where there can be none, or it does not pass in time, a stat-only
        reconcile of the whole tree ("scan") decides."""
        deadline = time.monotonic() + wait
        barrier_wait = min(wait, self.shared.timings.barrier_wait_s)
        # deletions refused: only a whole reconcile tells that the root is whole
        # again (a flush left status --wait at exit 4 until the next rescan)
        refused = bool(self.shared.health.refused)
        if self.shared.ready.is_set() and not refused and self._barriers(barrier_wait):
            left = max(0.0, deadline - time.monotonic())
            return self.shared.mailbox.ask("flush", left) or {}, "events"
        return self.reconcile(timeout=max(0.0, deadline - time.monotonic())), "scan"

    def _barriers(self, wait: float) -> bool:
        """Two barriers, the second set once the first has passed. Any open of the
        file passes a barrier, and an open made before the caller's edits (the
        daemon reading that file, another program) may reach the watcher after
        the first was set: it passes the first, but the second's own open comes
        after it in the stream. Two such opens in flight at once would be needed
        to pass both early."""
        deadline = time.monotonic() + wait
        for _ in range(2):
            barrier = self.shared.watcher.barrier()
            if barrier is None:
                return False
            # events lost (the kernel's queue overflowed) lose the barrier's too:
            # the wait gives up at once and the scan decides
            if not self.shared.watcher.wait(barrier, deadline - time.monotonic()):
                return False
        return True

    def versions(self, action: str, fingerprints: list[str]) -> dict[str, Any]:
        """`versions use|drop`, done on the main loop."""
        return self.shared.mailbox.ask(action, fingerprints=fingerprints) or {}

    def status(self, wait: float | None = None) -> dict[str, Any]:
        """The status fields. With ``wait``, first wait up to that many seconds
        for every change made before the call to be searchable."""
        d = self.shared
        caught_up, how, failure = None, "", ""
        if wait is not None:
            try:
                result, how = self.caught_up(wait)
            except MdindexError as exc:  # a store or embedder down: not caught up, and why
                result, failure = {}, str(exc)
            # deletions the guard refused are changes still to be made
            caught_up = bool(result) and not result.get("refused") and not d.health.refused
        gauges = d.health.gauges
        waiting, oldest = d.queue
        indexer = d.builds.live if d.ready.is_set() else None
        data = fields(
            # the live version's model and strategy
            indexer.settings if indexer is not None else d.settings,
            # the engine's own report never waits for a busy store
            indexer.store_status(gauges.points)
            if indexer is not None
            else {"store": None, "points": gauges.points},
            documents=gauges.documents,
            files_seen=d.files_seen,
            failed=gauges.failed,
            last_sync=gauges.last_sync,
            phase=d.phase,
            # a starting daemon said nothing of why it answered nothing yet
            reason=d.health.reason or failure or ("" if d.ready.is_set() else "loading the model"),
            embedding=indexer.embedding_status() if indexer is not None else {},
            versions=gauges.versions,
            unresolved_links=gauges.unresolved_links,
            languages=gauges.languages,
        ) | {
            "daemon": True,
            "build_blocked": d.builds.blocked,
            "healthy": self.health()[0],
            "queue_paths": waiting,
            "oldest_wait_s": None if oldest is None else round(time.monotonic() - oldest, 3),
        }
        if caught_up is not None:
            data["caught_up"] = caught_up
            data["caught_up_by"] = how  # "events": a barrier; "scan": a whole reconcile
        return data


class Tools:
    """The MCP tools' backend inside the daemon: its own search and status."""

    def __init__(self, api: DaemonApi) -> None:
        self.api = api

    def search(self, query: Query) -> list[dict[str, Any]]:
        return self.api.serving().search(query)

    def status(self) -> dict[str, Any]:
        return self.api.status()

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        """Every change made before the call, searchable (or the timeout)."""
        return self.api.status(timeout_s)


class Endpoints:
    """Where the API listens: the Unix socket other commands find through the
    lock file, the TCP port when ``http_port`` is set, and MCP at ``/mcp``."""

    def __init__(self) -> None:
        self.servers: list[HttpServer] = []
        self.mcp: McpBridge | None = None
        self.socket_dir: Path | None = None  # a private folder for a socket path too long
        self.token_file: Path | None = None

    def start(self, shared: Shared, api: DaemonApi) -> dict[str, Any]:
        """Start serving; returns the lock file's record of where."""
        s = shared.settings
        token = load_token()
        # absolute: stop removes this file, and the working folder may change
        self.token_file = token_path(s.state_dir, s.collection).absolute()
        write_token(self.token_file, token)
        allow = s.mcp_allow_refresh is True
        self.mcp = McpBridge(build_server(s, Tools(api), allow_refresh=allow)).start()
        routes = Api(
            shared.metrics,
            api.health,
            api.search,
            api.status,
            api.reconcile,
            token,
            mcp=self.mcp,
            versions=api.versions,
            verify=api.verify,
        )
        # absolute: a client in another folder reads it from the lock file
        path = socket_path(s.state_dir, s.collection).absolute()
        if len(os.fsencode(path)) >= SOCKET_PATH_MAX:  # sun_path is 108 bytes
            self.socket_dir = Path(tempfile.mkdtemp(prefix="mdindex-"))  # 0700
            path = self.socket_dir / "api.sock"
        timeout = shared.timings.request_timeout_s
        self.servers.append(HttpServer(routes, timeout, path=path))
        record: dict[str, Any] = {"socket": str(path)}
        if s.http_port is not None:
            if s.http_host not in LOOPBACK:
                log.warning(
                    "http_host %s is not a loopback address: anyone who can reach it and "
                    "holds the token can read every indexed document",
                    s.http_host,
                )
            tcp = HttpServer(routes, timeout, host=s.http_host, port=s.http_port)
            self.servers.append(tcp)
            record |= {"http_host": s.http_host, "http_port": tcp.port}
            log.info("http endpoint on http://%s:%d", s.http_host, tcp.port)
        for server in self.servers:
            server.start()
        log.info("api on %s", path)
        return record

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        if self.mcp is not None:
            self.mcp.stop()
        # What is left behind is only logged: a folder put in the token's place
        # (or a file in the socket's folder) raised out of the daemon's
        # shutdown, and its stores were never closed nor its lock released.
        if self.socket_dir is not None:
            try:
                self.socket_dir.rmdir()
            except OSError as exc:
                log.warning("the socket's folder is left: %s", exc)
        if self.token_file is not None:  # a secret that opens nothing once stopped
            try:
                self.token_file.unlink(missing_ok=True)  # a link, not what it names
            except OSError as exc:
                log.warning("the API token file is left: %s", exc)
