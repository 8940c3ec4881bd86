"""The `mdindex` command line."""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import socket
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdindex import __version__
from mdindex.config import Settings, load_settings
from mdindex.daemon.http import token_path
from mdindex.document import decode, read_bytes
from mdindex.errors import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_STORE,
    EXIT_USAGE,
    InputError,
    LockError,
    MdindexError,
    StoreUnavailable,
)
from mdindex.lock import WriterLock, lock_path, read_holder
from mdindex.pipeline import Planner, Summary, check_roots, public
from mdindex.runtime import make_indexer, make_pipeline, make_sink, setup_logging, state_path

log = logging.getLogger("mdindex")


def _common(parser: argparse.ArgumentParser, roots: bool) -> None:
    parser.add_argument("--config", type=Path, help="TOML config file (or MDINDEX_CONFIG)")
    if roots:
        parser.add_argument(
            "roots", nargs="*", metavar="ROOT", help="folders to index, optionally label=path"
        )
    else:
        parser.add_argument(
            "--root",
            dest="roots",
            action="append",
            metavar="ROOT",
            help="a root folder, optionally label=path (repeatable)",
        )
    parser.add_argument("--collection", help="Qdrant collection (default mdindex)")
    parser.add_argument("--qdrant-path", type=Path, help="embedded Qdrant folder")
    parser.add_argument(
        "--qdrant-url", help="Qdrant server URL; API key from MDINDEX_QDRANT_API_KEY"
    )
    parser.add_argument("--store", choices=["client", "edge"], help="embedded engine")
    parser.add_argument(
        "--strategy", choices=["heading", "token", "semantic"], help="chunking strategy"
    )
    parser.add_argument("--state-dir", type=Path, help="local state, locks and the embedded store")
    parser.add_argument("--model", help="sentence-transformers model name or path")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdindex", description="Keep a Qdrant vector index identical to folders of markdown."
    )
    parser.add_argument("--version", action="version", version=f"mdindex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("backfill", help="make the collection equal to the files, once")
    _common(p, roots=True)
    p.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    p.add_argument("--no-prune", action="store_true", help="keep points of files that are gone")
    p.add_argument("--force", action="store_true", help="prune even when the guard would refuse")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="read, chunk and embed on a Ray cluster (a local one without ADDRESS); "
        "needs the ray extra",
    )
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("watch", help="reconcile, then follow file events until stopped")
    _common(p, roots=True)
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("search", help="nearest chunks to a query")
    _common(p, roots=False)
    p.add_argument("query", metavar="QUERY")
    p.add_argument("-k", type=int, default=5, help="number of hits (default 5)")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("chunk", help="show the chunks of one file; embeds and writes nothing")
    _common(p, roots=False)
    p.add_argument("file", type=Path, metavar="FILE")
    p.set_defaults(func=cmd_chunk)

    p = sub.add_parser("status", help="collection, model, counts and last sync")
    _common(p, roots=True)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("verify", help="compare the collection with the files")
    _common(p, roots=True)
    p.add_argument("--repair", action="store_true", help="fix missing, stale and duplicate points")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("migrate", help="copy the collection, vectors included, to another store")
    _common(p, roots=False)
    p.add_argument(
        "--to",
        required=True,
        metavar="{client,edge,URL}",
        help="embedded qdrant-client, embedded qdrant-edge, or a Qdrant server URL",
    )
    p.set_defaults(func=cmd_migrate)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    keys = (
        "collection",
        "qdrant_path",
        "qdrant_url",
        "store",
        "strategy",
        "state_dir",
        "model",
        "log_level",
    )
    overrides: dict[str, Any] = {k: getattr(args, k, None) for k in keys}
    roots = getattr(args, "roots", None)
    if roots:
        overrides["roots"] = list(roots)
    return load_settings(overrides, args.config)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        # One dumps, not dump: json.dump streams through the pure-Python
        # encoder (0.7 s for the chunks of a 1 MB file, against 0.05 s).
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        print(text)


# -- commands -------------------------------------------------------------


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    check_roots(settings.root_list())
    daemon = find_daemon(settings, required=False) if args.ray is None else None
    if daemon is not None:
        return _backfill_through_daemon(args, daemon)
    with WriterLock(settings.state_dir, settings.collection, "backfill"):
        indexer = make_indexer(settings)
        bar = _progress(args)
        if bar is not None:
            indexer.on_progress = lambda n: bar.update(1)
        try:
            if args.ray is not None and not args.dry_run:
                from mdindex import distributed

                summary = distributed.backfill(
                    indexer, args.ray or None, prune=not args.no_prune, force=args.force
                )
            else:
                summary = indexer.backfill(
                    dry_run=args.dry_run, prune=not args.no_prune, force=args.force
                )
            if not args.dry_run:
                indexer.settle()
        finally:
            if bar is not None:
                bar.close()
            indexer.finish()
            indexer.state.close()
    emit(args, summary.as_dict(), summary.line())
    for err in summary.errors if not args.json else []:
        print(f"  failed: {err['root']}:{err['path']}: {err['reason']}", file=sys.stderr)
    return EXIT_PARTIAL if summary.errors else EXIT_OK


def _backfill_through_daemon(args: argparse.Namespace, daemon: DaemonClient) -> int:
    """The daemon holds the store: ask it to reconcile and report its summary."""
    if args.dry_run or args.no_prune or args.force:
        raise LockError(
            "the watch daemon holds the store; --dry-run, --no-prune and --force need it stopped"
        )
    log.info("the watch daemon holds the store; asking it to reconcile")
    data = daemon.ask("/reconcile", post=True)
    summary = Summary(**{k: data[k] for k in Summary.__dataclass_fields__ if k in data})
    emit(args, data, summary.line() + " (reconciled by the watch daemon)")
    return EXIT_PARTIAL if data.get("errors") else EXIT_OK


def _progress(args: argparse.Namespace) -> Any:
    if args.json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(desc="files", unit="file", file=sys.stderr, leave=False)


def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from mdindex.daemon.service import run_daemon

    check_roots(settings.root_list())
    return run_daemon(settings)


@dataclass(frozen=True)
class DaemonClient:
    """How to ask the running daemon: its Unix socket (or TCP endpoint) and token."""

    socket: str
    url: str
    token: str

    def ask(self, path: str, post: bool = False) -> Any:
        """GET (or POST, for a reconcile that may run for hours) one endpoint."""
        timeout = 24 * 3600 if post else 30
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
            body = resp.read().decode()
        except OSError as exc:
            raise StoreUnavailable(f"the daemon at {self.where} did not answer: {exc}") from exc
        finally:
            conn.close()
        try:
            data = json.loads(body or "null")
        except ValueError:
            data = None
        if resp.status != 200:
            detail = data.get("error") if isinstance(data, dict) else body[:200]
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


def find_daemon(settings: Settings, required: bool = True) -> DaemonClient | None:
    """The running daemon when it holds this state dir and collection: found
    through the lock file, with the token it wrote beside it."""
    holder = read_holder(lock_path(settings.state_dir, settings.collection))
    if not holder or holder.get("command") != "watch":
        return None
    sock = str(holder.get("socket") or "")
    url = (
        f"http://{holder.get('http_host')}:{holder['http_port']}" if holder.get("http_port") else ""
    )
    if not (sock or url):
        if settings.qdrant_url or not required:
            return None  # a server store can be shared; go to it directly
        raise StoreUnavailable(
            f"the daemon (pid {holder.get('pid')}) holds the embedded store but is still "
            "starting; try again in a moment"
        )
    path = token_path(settings.state_dir, settings.collection)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise StoreUnavailable(
            f"the daemon (pid {holder.get('pid')}) holds the store, and its token {path} "
            f"cannot be read ({exc.strerror}); run this as the daemon's user"
        ) from exc
    return DaemonClient(sock, url, token)


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    daemon = find_daemon(settings)
    if daemon is not None:
        hits = daemon.ask("/search?" + urllib.parse.urlencode({"q": args.query, "k": args.k}))
    else:
        hits = search(settings, args.query, args.k)
    lines = []
    for hit in hits:
        where = f"{hit.get('doc_path')}:{hit.get('line_start')}-{hit.get('line_end')}"
        lines.append(f"{hit['score']:.3f}  {where}  {hit.get('title')} › {hit.get('section')}")
        if hit.get("url"):
            lines.append(f"       {hit['url']}")
        snippet = " ".join(str(hit.get("text", "")).split())[:160]
        lines.append(f"       {snippet}")
    emit(args, hits, "\n".join(lines) or "no results")
    return EXIT_OK


def search(settings: Settings, query: str, k: int) -> list[dict[str, Any]]:
    pipeline = make_pipeline(settings)
    sink = make_sink(settings)
    try:
        if not sink.open().exists():
            return []
        vector = pipeline.embedder.embed([query])[0]
        return [{"score": h.score, **public(h.payload)} for h in sink.search(vector.tolist(), k)]
    finally:
        sink.close()


def cmd_chunk(args: argparse.Namespace, settings: Settings) -> int:
    pipeline = make_pipeline(settings)
    path: Path = args.file
    rel, root = path.name, path.resolve().parent.name or "root"
    for r in settings.root_list():
        try:
            rel = path.resolve().relative_to(r.path.resolve()).as_posix()
            root = r.label
            break
        except ValueError:
            continue
    planner = Planner(settings, pipeline.info, pipeline.counter, pipeline.chunker)
    try:
        text = decode(read_bytes(path, settings.max_file_bytes))
    except InputError as exc:
        log.error("%s: %s", path, exc)
        return EXIT_PARTIAL
    doc = planner.parse(rel, text)
    for warning in doc.warnings:
        log.warning("%s: %s", path, warning)
    planned = planner.plan_points(root, rel, doc, pipeline.chunker.chunk(doc))
    payloads = [public(p.payload) for p in planned]
    text_out = "\n".join(
        f"[{p['chunk_index']}] lines {p['line_start']}-{p['line_end']} chars {p['char_start']}-"
        f"{p['char_end']} tokens {p['token_count']}  "
        f"{' > '.join(p['heading_path']) or '(preamble)'}"
        f"\n{_indent(p['text'])}"
        for p in payloads
    )
    emit(args, payloads, text_out or "no chunks")
    return EXIT_OK


def _indent(text: str, limit: int = 400) -> str:
    shown = text if len(text) <= limit else text[:limit] + " …"
    return "\n".join("    " + line for line in shown.splitlines())


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    daemon = find_daemon(settings)
    data = daemon.ask("/status") if daemon is not None else status(settings)
    text = "\n".join(f"{k}: {v}" for k, v in data.items())
    emit(args, data, text)
    return EXIT_OK


def status(settings: Settings) -> dict[str, Any]:
    from mdindex.state import State

    sink = make_sink(settings)
    state = State(state_path(settings))
    try:
        points = sink.open().count()
        return {
            "collection": settings.collection,
            "store": sink.where,
            **sink.describe(),
            "model": settings.model,
            "strategy": settings.strategy,
            "documents": state.doc_count(),
            "points": points,
            "last_sync": state.get("last_sync"),
            "daemon": False,
        }
    finally:
        sink.close()
        state.close()


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    check_roots(settings.root_list())
    with WriterLock(settings.state_dir, settings.collection, "verify"):
        indexer = make_indexer(settings)
        try:
            report = indexer.verify(repair=args.repair)
        finally:
            indexer.finish()
            indexer.state.close()
    data = report.as_dict()
    lines = [
        f"missing: {len(report.missing)}, stale: {len(report.stale)}, "
        f"duplicates: {len(report.duplicates)}, in sync: {report.in_sync}"
        + (" (repaired)" if report.repaired else "")
    ]
    for kind in ("missing", "stale", "duplicates"):
        for e in data[kind][:50]:
            lines.append(f"  {kind}: {e['root']}:{e['doc_path']} #{e['chunk_index']} {e['id']}")
    emit(args, data, "\n".join(lines))
    if report.in_sync or report.repaired:
        return EXIT_OK
    return EXIT_DRIFT


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from mdindex.migrate import migrate

    with WriterLock(settings.state_dir, settings.collection, "migrate"):
        report = migrate(settings, args.to)
    hint = "" if args.json else f"\nnow run mdindex with the target's settings ({args.to})"
    emit(args, report.as_dict(), report.line() + hint)
    return EXIT_OK


Command = Callable[[argparse.Namespace, Settings], int]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Everything mdindex creates (state, locks, the embedded store, the socket)
    # is for its own user alone: directories 0700, files 0600.
    os.umask(0o077)
    debug = str(args.log_level or "").upper() == "DEBUG"
    try:
        settings = settings_from(args)
        setup_logging(settings.log_level, settings.log_format)
        func: Command = args.func
        return func(args, settings)
    except MdindexError as exc:
        return _fail(str(exc), exc.exit_code, debug)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_USAGE
    except OSError as exc:  # the local filesystem refused (an unwritable state dir, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(
            f"{where}{exc.strerror or exc} (check state_dir and qdrant_path)", EXIT_USAGE, debug
        )
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300]
        return _fail(f"internal error: {type(exc).__name__}: {reason}", EXIT_STORE, debug)


def _fail(message: str, code: int, debug: bool) -> int:
    """One line on stderr; the traceback too with --log-level DEBUG."""
    if debug:
        traceback.print_exc()
    print(f"mdindex: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
