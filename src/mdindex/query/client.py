"""Ask the running daemon, or open the store here: how the CLI and `mdindex mcp`
reach the index, for search, status, waiting, versions, verify and refresh.

A daemon that holds the store is found (query.daemon) again for every call:
a long-lived client (an assistant's MCP session) follows a daemon that
restarted with a new token, and falls back to the store when none runs.
Without a daemon, a search uses the live version's settings (its model, its
collection), read again whenever the catalog changes, so a session follows a
switch and never searches a dropped version.

A daemon that is still starting (loading its model) is waited for, up to the
call's timeout: its socket appears as soon as it holds the lock, and it
answers once it can.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.config import Settings
from mdindex.errors import (
    ConfigError,
    FreshnessUnknown,
    LockError,
    PruneRefused,
    StoreUnavailable,
)
from mdindex.index.lock import WriterLock
from mdindex.index.search import Query
from mdindex.index.summary import Summary
from mdindex.outside import shown
from mdindex.query.daemon import DaemonClient, DaemonGone, find_daemon
from mdindex.versions.catalog import Catalog, require_indexed

if TYPE_CHECKING:
    from mdindex.index.summary import VerifyReport
    from mdindex.runtime import Models

log = logging.getLogger(__name__)

SEARCH_TIMEOUT_S = 150.0  # a search may wait for a starting daemon's model load
# How long `status --wait` without roots looks for a daemon that is starting
# (its process takes about a second to import and take the lock).
DAEMON_GRACE_S = 10.0


def _named(roots: dict[str, Path]) -> str:
    return str(shown(", ".join(f"{label}={path}" for label, path in sorted(roots.items()))))


class IndexClient:
    """The index as a client sees it: through the daemon when one holds the
    store, else opened here. Every call finds the daemon (or its absence) anew."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._live: tuple[tuple[int, int, int], Settings] | None = None  # catalog stat, settings
        self._models: tuple[str, Models] | None = None  # fingerprint, its query models

    def daemon(self) -> DaemonClient | None:
        return find_daemon(self.settings)

    def ask(self, path: str, post: bool = False, timeout: float | None = None) -> Any:
        """One request to the daemon, found again (once) when the one found is gone;
        ``_NO_DAEMON`` when none holds the store."""
        for attempt in (1, 2):
            daemon = self.daemon()
            if daemon is None:
                return _NO_DAEMON
            try:
                return daemon.ask(path, post=post, timeout=timeout)
            except DaemonGone:
                if attempt == 2:
                    raise
                time.sleep(0.2)  # a restart: let the new one take the lock
        raise AssertionError("unreachable")

    # -- what the CLI and the MCP tools ask ------------------------------------

    def search(self, query: Query) -> list[dict[str, Any]]:
        hits = self.ask(
            "/search?" + urllib.parse.urlencode(query.as_params()), timeout=SEARCH_TIMEOUT_S
        )
        if hits is _NO_DAEMON:
            return self.search_here(query)
        return list(hits)

    def status(self, wait: float | None = None) -> dict[str, Any]:
        """The status fields; with ``wait``, once every change made before the call
        is searchable or ``wait`` seconds passed (``caught_up`` says which)."""
        data = self.ask("/status") if wait is None else self._wait(wait)
        if data is not _NO_DAEMON:
            return dict(data)
        if wait is not None and not self.settings.root_list():
            # `mdindex watch` may have been started a moment ago: wait a little
            # for it to take the lock before saying nothing can tell
            started = time.monotonic()
            while time.monotonic() - started < min(wait, DAEMON_GRACE_S):
                time.sleep(0.1)
                if self.daemon() is not None:
                    return self.status(max(0.0, wait - (time.monotonic() - started)))
            waited = time.monotonic() - started
            raise FreshnessUnknown(
                f"status --wait: no daemon holds the index (none came in {waited:.0f} s) and no "
                "roots are given, so nothing can tell whether it is caught up; give the roots "
                "(or the config) or start mdindex watch"
            )
        from mdindex.query.status import offline_status

        return offline_status(self.settings)

    def versions(self, action: str, fingerprints: list[str]) -> dict[str, Any]:
        """The daemon uses (builds, then switches to) or drops versions; for
        ``use`` it answers at once with the ``target`` it is switching to."""
        query = urllib.parse.urlencode({"action": action, "fingerprint": fingerprints}, doseq=True)
        data = self.ask(f"/versions?{query}", post=True)
        if data is _NO_DAEMON:
            raise DaemonGone("the watch daemon stopped before it answered; run the command again")
        return dict(data)

    def use(self, fingerprint: str, timeout: float) -> tuple[str, str | None]:
        """`versions use` while the daemon holds the store: it catches the version
        up and switches while it answers. Its fingerprint, and the live one's once
        it switched or ``timeout`` passed; StoreUnavailable when it cannot switch."""
        target = str(self.versions("use", [fingerprint])["target"])
        log.info("the watch daemon is switching to version %s", target)
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            live = self.live_version(status).get("fingerprint")
            if live == target:
                return target, live
            if status.get("build_blocked"):
                raise StoreUnavailable(f"the watch daemon cannot switch: {status['build_blocked']}")
            if time.monotonic() >= deadline:
                return target, live
            time.sleep(0.5)

    @staticmethod
    def live_version(status: dict[str, Any]) -> dict[str, Any]:
        """The live version's row of a status."""
        return next((r for r in status.get("versions") or [] if r.get("live")), {})

    def _wait(self, timeout_s: float) -> Any:
        """The daemon's answer once it has caught up (or ``timeout_s`` passed)."""
        query = urllib.parse.urlencode({"wait": 1, "timeout": timeout_s})
        return self.ask(f"/status?{query}", timeout=timeout_s + 30)

    def backfill(self, dry_run: bool, prune: bool, force: bool) -> Summary:
        """`mdindex backfill` while the daemon holds the store: it reconciles, if
        it keeps the version these settings ask for, and its summary is the answer."""
        if dry_run or not prune:
            raise LockError(
                "the watch daemon holds the store; --dry-run and --no-prune need it stopped"
            )
        rows = self.status().get("versions") or []
        theirs = next((r["fingerprint"] for r in rows if r.get("target")), None)
        wanted = Catalog.load(self.settings).target(self.settings)  # a rollback pin counts
        if theirs is not None and theirs != wanted:
            raise LockError(
                f"the watch daemon holds the store and keeps version {theirs}; these settings "
                f"ask for {wanted}: put them in its config and reload it "
                "(systemctl reload mdindex, or kill -HUP its pid), or stop it first"
            )
        self._same_roots()
        data = self.reconcile(force=force)
        if data is None:  # it stopped meanwhile
            raise LockError("the watch daemon stopped while asked to reconcile; run it again")
        if data.get("refused"):
            raise PruneRefused(f"{data['refused']} (the watch daemon indexed the rest)")
        known = {k: data[k] for k in Summary.__dataclass_fields__ if k in data}
        return Summary(**known, daemon=True)

    def _same_roots(self) -> None:
        """LockError when a root given is not the daemon's: it reconciles only
        its own, so a backfill of another root answered "0 changed" and left it
        unindexed. The daemon's are among those its last whole sync recorded
        (which keep a root left out of its config while the guard refuses to
        prune it, so fewer roots than recorded are no mismatch)."""
        from mdindex.query.links import recorded_roots

        given = {r.label: r.path.resolve() for r in self.settings.root_list()}
        if not given:  # Index.connect: the daemon's roots
            return
        theirs = recorded_roots(self.settings)
        recorded = {(label, path.resolve()) for label, path in theirs.items()}
        if theirs and not set(given.items()) <= recorded:
            raise LockError(
                f"the watch daemon holds the store and watches {_named(theirs)}, not "
                f"{_named(given)}; roots change only with a restart: put them in its "
                "config and restart it, or stop it first"
            )

    def reconcile(self, force: bool = False) -> dict[str, Any] | None:
        """The daemon reconciles now (`mdindex backfill` while it runs); None when
        no daemon holds the store."""
        data = self.ask("/reconcile?force=1" if force else "/reconcile", post=True)
        return None if data is _NO_DAEMON else dict(data)

    def verify(self, repair: bool, force: bool) -> VerifyReport:
        """`mdindex verify [--repair]`: by the daemon when one holds the store (its
        live version, on its main loop), else here under the writer lock."""
        from mdindex.index.summary import VerifyReport
        from mdindex.index.verify import verify
        from mdindex.runtime import make_indexer

        # a daemon in its first moments (the lock held, no socket yet) is waited for
        if find_daemon(self.settings) is not None:  # its roots, if none are given
            self._same_roots()
            query = urllib.parse.urlencode({"repair": int(repair), "force": int(force)})
            data = self.ask(f"/verify?{query}", post=True)
            if data is not _NO_DAEMON:
                try:
                    return VerifyReport.from_dict(data)
                except ValueError as exc:
                    raise StoreUnavailable(f"the daemon's verify answer: {exc}") from None
        s = self.settings
        s.require_roots()
        live = require_indexed(s)  # a verify creates no collection, nor state
        with WriterLock(s.state_dir, s.collection, "verify"), make_indexer(live) as indexer:
            return verify(indexer, repair=repair, force=force)

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        """Every change made before the call, searchable (or the timeout): the
        daemon waits for it; without one, a backfill here that stops between
        groups of documents once ``timeout_s`` has passed."""
        data = self._wait(timeout_s)
        if data is not _NO_DAEMON:
            return dict(data)
        from mdindex.index.indexer import Hooks
        from mdindex.versions.rollout import Rollout

        s = self.settings
        deadline = time.monotonic() + timeout_s
        hooks = Hooks(stop_requested=lambda: time.monotonic() >= deadline)
        try:
            with WriterLock(s.state_dir, s.collection, "mcp refresh"):
                summary = Rollout(s).open().backfill(hooks=hooks)
        except LockError as exc:  # another backfill or a verify: not this call's to wait for
            raise StoreUnavailable(str(exc)) from None
        return {"caught_up": not summary.interrupted, **summary.as_dict()}

    # -- without a daemon --------------------------------------------------------

    def live_settings(self) -> Settings:
        """The live version's settings, read again only when the catalog changed."""
        from mdindex.versions.catalog import catalog_path, reader_settings

        try:
            st = os.stat(catalog_path(self.settings))
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = (0, 0, 0)
        if self._live is None or self._live[0] != stamp:
            self._live = (stamp, reader_settings(self.settings))
        return self._live[1]

    def search_here(self, query: Query) -> list[dict[str, Any]]:
        """Search without a daemon: the live version's model and store, opened here."""
        from mdindex.index.state import store_reopened
        from mdindex.runtime import make_models, make_store, state_path, version_of
        from mdindex.versions.catalog import nothing_indexed, require_live

        live = self.live_settings()
        store = make_store(live)
        opened, before = False, ""
        try:  # closed on every way out: a local client left open holds its folder
            if not store.exists() and Catalog.load(self.settings).live is None:
                # "no results", exit 0, was all a mistyped --state-dir got; nothing
                # is opened (local mode would make its folder) and no model loaded
                log.warning("%s", nothing_indexed(self.settings))
                return []
            require_live(self.settings)  # before the model, and before opening (see above)
            fp = version_of(live)
            if self._models is None or self._models[0] != fp:
                self._models = (fp, make_models(live, queries_only=True))
            models = self._models[1]
            before = _signature(store)
            store.open()
            opened = True
            try:
                return models.search(store, query, state_path(live))
            except ValueError as exc:
                raise ConfigError(f"search: {exc}") from None
        finally:
            store.close()
            if opened:  # what its open and close rewrote, so the next no-op trusts it
                store_reopened(state_path(live), before, _signature(store))


def _signature(store: Any) -> str:
    """The store's files' signature; "" (nothing recorded) where its folder
    cannot be looked at (EACCES from is_dir), which must not fail a search."""
    try:
        return str(store.signature())
    except OSError:
        return ""


_NO_DAEMON: Any = object()
