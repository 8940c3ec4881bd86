"""The `mdindex` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdindex.api import Index
from mdindex.cli.parser import settings_from
from mdindex.config import Root, Settings
from mdindex.documents.files import Failure, FileRef, stat_file
from mdindex.documents.reading import load_document
from mdindex.documents.types import Document
from mdindex.errors import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_PENDING,
    ConfigError,
)
from mdindex.index.lock import WriterLock
from mdindex.index.payload import public, titled
from mdindex.index.planning import DocWork
from mdindex.index.ranking import names, words
from mdindex.index.search import MAX_K, Query, parse_where
from mdindex.outside import integer, quoted, shown
from mdindex.runtime import make_models
from mdindex.versions.catalog import one_fingerprint

log = logging.getLogger("mdindex")


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        # One dumps, not dump: json.dump streams through the pure-Python
        # encoder (0.7 s for the chunks of a 1 MB file, against 0.05 s).
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        print(text)


# -- commands -------------------------------------------------------------


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    settings.require_roots()
    if args.ray_address and not args.ray:
        raise ConfigError("--ray-address: give --ray too")
    bar = _progress(args)
    try:
        summary = Index.from_settings(settings).backfill(
            progress=(lambda n: bar.update(1)) if bar is not None else None,
            dry_run=args.dry_run,
            prune=not args.no_prune,
            force=args.force,
            ray=(args.ray_address or True) if args.ray else False,
        )
    finally:
        if bar is not None:
            bar.close()
    if summary.daemon:
        emit(args, summary.as_dict(), summary.line() + " (reconciled by the watch daemon)")
        return EXIT_PARTIAL if summary.errors else EXIT_OK
    emit(args, summary.as_dict(), summary.line())
    for err in shown(summary.errors) if not args.json else []:
        print(f"  failed: {err['root']}:{err['path']}: {err['reason']}", file=sys.stderr)
    for note in shown(summary.warnings) if not args.json else []:
        print(f"  warning: {note['root']}:{note['path']}: {note['reason']}", file=sys.stderr)
    return EXIT_PARTIAL if summary.errors else EXIT_OK


def _progress(args: argparse.Namespace) -> Any:
    if args.json or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(desc="files", unit="file", file=sys.stderr, leave=False)


def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from mdindex.daemon.service import run_daemon

    settings.require_roots()
    return run_daemon(settings, reload=lambda: settings_from(args))


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    try:
        query = Query(
            text=args.query,
            k=integer(args.k, "k", 1, MAX_K),
            mode=args.mode or settings.search_mode,
            roots=tuple(args.filter_roots or ()),
            path=args.filter_path or "",
            where=parse_where(args.filter_where),
            tags=tuple(args.filter_tags or ()),
            fusion=settings.fusion,
            per_section=not args.all_chunks,
            lang=args.filter_lang or "",
        )
    except ValueError as exc:
        raise ConfigError(f"search: {exc}") from None
    hits = [hit.fields for hit in Index.from_settings(settings).search(query)]
    asked = words(query.text) if query.mode == "hybrid" else ""
    lines = []
    for hit in hits:  # every field escaped: a document's text must not drive the terminal
        where = shown(f"{hit.get('doc_path')}:{hit.get('line_start')}-{hit.get('line_end')}")
        # hybrid search puts a section the query names first, at the engine's score
        named = "  (its heading)" if asked and names(asked, hit.get("heading_path")) else ""
        lines.append(f"{hit['score']:.3f}  {where}  {shown(_section_label(hit))}{named}")
        if hit.get("url"):
            lines.append(f"       {shown(str(hit['url']))}")
        snippet = " ".join(str(hit.get("text", "")).split())[:160]
        lines.append(f"       {shown(snippet)}")
    emit(args, hits, "\n".join(lines) or "no results")
    return EXIT_OK


def _section_label(hit: dict[str, Any]) -> str:
    """The hit's title and its whole heading path (``payload.titled``)."""
    path = hit.get("heading_path")
    headings = [str(h) for h in path] if isinstance(path, list) else []
    return titled(str(hit.get("title") or hit.get("doc_path") or ""), headings)


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    rows = Index.from_settings(settings).eval(
        args.questions,
        headings=args.headings,
        seed=args.seed,
        versions=args.versions,
        modes=modes,
    )
    columns = ["version", "mode", "recall@1", "recall@3", "recall@5", "recall@10", "mrr@10"]
    asked = rows[0]["questions"] if rows else 0
    lines = [f"{asked} questions" + (" (heading paths)" if args.headings else "")]
    widths = [13, 7, 9, 9, 9, 9, 9, 9]
    lines.append(" ".join(f"{c:>{w}}" for c, w in zip([*columns, "gains"], widths, strict=True)))
    text_rows = shown(rows)  # a name may hold ESC; --json has JSON's own escapes
    for r in text_rows:
        cells = [r["version"] + ("*" if r["live"] else ""), r["mode"]]
        cells += [f"{r[c]:.3f}" for c in columns[2:]] + [f"{r['gains']:.3f}"]
        lines.append(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    lines.append(
        "(* live; gains: share of questions answered in the top 10 that the first row misses)"
    )
    if rows:
        first = text_rows[0]["question_languages"]
        langs = ", ".join(f"{k or 'unknown'} {n}" for k, n in first.items())
        lines.append(f"questions by language: {langs}")
        reads = {r["version"]: ", ".join(r["model_languages"]) for r in text_rows}
        reads = {v: "every language" if langs == "*" else langs for v, langs in reads.items()}
        lines += [f"{version}: the model reads {langs}" for version, langs in reads.items()]
    emit(args, rows, "\n".join(lines))
    return EXIT_OK


def cmd_links(args: argparse.Namespace, settings: Settings) -> int:
    from mdindex.query import links

    if args.file is not None and args.broken:
        raise ConfigError("links: give a FILE or --broken, not both")
    if args.file is None and not args.broken:
        raise ConfigError("links: give a FILE, or --broken for every broken link")
    from mdindex.query.daemon import find_daemon
    from mdindex.versions.catalog import require_live

    if find_daemon(settings, required=False, wait_s=0) is None:
        # as search, status and verify: the links of an index that is gone were
        # listed with exit 0; a daemon answering holds its store
        require_live(settings)
    if args.broken:
        found = Index.from_settings(settings).broken_links()
        emit(args, found, links.broken_text(found))
        if found and not args.json:
            print(f"{len(found)} broken links", file=sys.stderr)
        return EXIT_PARTIAL if found else EXIT_OK
    data = Index.from_settings(settings).links(args.file)
    emit(args, data, links.related_text(data))
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """An MCP server on stdin/stdout: through the daemon when one holds the
    store, else over the store itself. Logs go to stderr, never stdout."""
    Index.from_settings(settings).serve_mcp()
    return EXIT_OK


def cmd_chunk(args: argparse.Namespace, settings: Settings) -> int:
    models = make_models(settings)
    path: Path = args.file.absolute()
    root = Root(path.parent.resolve().name or "root", path.parent)
    for r in settings.root_list():
        if path.resolve().is_relative_to(r.path.resolve()):
            root = Root(r.label, r.path.resolve())
            break
    rel = path.resolve().relative_to(root.path.resolve()).as_posix()
    accept = lambda _rel: True  # noqa: E731  # the file named is shown, whatever the globs say
    found = stat_file(root, rel, accept, follow_symlinks=True)
    if found is None:  # a mistyped FILE is a usage error, as argparse's are
        raise ConfigError(f"chunk: no such file: {quoted(str(args.file))}")
    doc = found if isinstance(found, Failure) else load_document(found, settings)
    work: DocWork | Failure | None = doc if isinstance(doc, Failure) else None
    if isinstance(doc, Document) and isinstance(found, FileRef):
        for warning in doc.warnings:
            log.warning("%s: %s", path, warning)
        [work] = models.planner.plan([(found, doc)])
    if not isinstance(work, DocWork):  # no known hash: a file is always read, or failed
        assert work is not None
        log.error("%s: %s", path, work.reason)
        return EXIT_PARTIAL
    payloads = [public(p.payload) for p in work.points]
    text_out = "\n".join(
        f"[{p['chunk_index']}] lines {p['line_start']}-{p['line_end']} chars {p['char_start']}-"
        f"{p['char_end']} tokens {p['token_count']}  "
        f"{shown(' > '.join(p['heading_path'])) or '(preamble)'}"
        f"\n{_indent(p['text'])}"
        for p in payloads
    )
    emit(args, payloads, text_out or "no chunks")
    return EXIT_OK


def _indent(text: str, limit: int = 400) -> str:
    """The chunk's text cut, indented, each line escaped: a document's text must
    not drive the terminal."""
    cut = text if len(text) <= limit else text[:limit] + " …"
    return "\n".join("    " + shown(line) for line in cut.splitlines())


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    data = Index.from_settings(settings).status(args.timeout if args.wait else None).fields
    emit(args, data, _status_text(shown(data)))  # a root's or file's name, a reason
    if args.wait and not data["caught_up"]:
        # degraded (deletions refused, a store down) or the timeout: say which
        why = data.get("reason") or f"changes still waiting after {args.timeout:g} s"
        # the one error line every command ends with (main._fail), after the status
        print(f"mdindex: error: status --wait: not caught up: {shown(why)}", file=sys.stderr)
        return EXIT_PENDING
    return EXIT_OK


def _status_text(data: dict[str, Any]) -> str:
    lines = []
    for key, value in data.items():
        if key == "failed" and isinstance(value, list):
            lines.append(f"failed: {len(value)}")
            lines.extend(f"  {f['root']}:{f['path']}: {f['reason']}" for f in value[:50])
        elif key == "versions" and isinstance(value, list):
            lines.append("versions:")
            lines.extend(f"  {line}" for line in _versions_text(value).splitlines())
        else:
            lines.extend(_nested(key, value))
    return "\n".join(lines)


def _nested(key: str, value: Any, indent: str = "") -> list[str]:
    """``key: value``, a mapping as its own indented lines (``embedding`` and its
    ``last_run``), not as a Python dict; a list of words as words, a boolean as
    yes or no. An empty value (no reason, no missing roots) is left out of the
    text; --json keeps it."""
    if isinstance(value, bool):
        return [f"{indent}{key}: {'yes' if value else 'no'}"]
    if value in ("", None, [], {}):
        return []
    words = isinstance(value, list) and all(isinstance(v, str | int | float) for v in value)
    if words and not any("," in str(v) for v in value):  # a root's name may hold a comma
        return [f"{indent}{key}: {', '.join(str(v) for v in value)}"]
    if not isinstance(value, dict):
        return [f"{indent}{key}: {value}"]
    lines = []
    for k, v in value.items():
        lines.extend(_nested(str(k) or "unknown", v, indent + "  "))  # languages: "" undetected
    return [f"{indent}{key}:", *lines] if lines else []


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    report = Index.from_settings(settings).verify(repair=args.repair, force=args.force)
    data = report.as_dict()
    lines = [report.line() + (" (verified by the watch daemon)" if report.daemon else "")]
    for kind in ("missing", "stale", "duplicates"):
        for e in data[kind][:50]:
            where = shown(f"{e['root']}:{e['doc_path']} #{e['chunk_index']} {e['id']}")
            lines.append(f"  {kind}: {where}")
    for e in report.graph[:50]:
        where = shown(f"{e['root']}:{e['doc_path']}: {e['reason']}")
        lines.append(f"  graph: {where}")
    emit(args, data, "\n".join(lines))
    if report.in_sync or report.repaired:
        return EXIT_OK
    return EXIT_DRIFT


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from mdindex.versions.migrate import migrate

    with WriterLock(settings.state_dir, settings.collection, "migrate"):
        report = migrate(settings, args.to)
    hint = "" if args.json else f"\nnow run mdindex with the target's settings ({args.to})"
    emit(args, report.as_dict(), report.line() + hint)
    return EXIT_OK


def cmd_versions(args: argparse.Namespace, settings: Settings) -> int:
    """List, use (catching the version up with the roots first, when set) or drop."""
    index = Index.from_settings(settings)
    if args.action == "list":
        rows = [version.fields for version in index.versions()]
        emit(args, rows, _versions_text(shown(rows)))  # a model path with ESC in its name
        return EXIT_OK
    if args.action == "drop":
        dropped = index.drop_versions(args.fingerprints)
        by = " (by the watch daemon)" if dropped.daemon else ""
        emit(
            args,
            {"dropped": dropped.fingerprints},
            f"dropped {len(dropped.fingerprints)} version(s){by}",
        )
        return EXIT_OK
    switch = index.use_version(one_fingerprint(args.fingerprints), timeout=args.timeout)
    target, summary = switch.target, switch.summary
    if not switch.daemon:
        text = f"version {target} is live"
        if summary is not None:
            text += f" (caught up: {summary.line()})"
        emit(args, {"live": target, **(summary.as_dict() if summary else {})}, text)
    elif switch.done:
        emit(args, {"live": target}, f"version {target} is live (switched by the watch daemon)")
    else:
        emit(
            args,
            {"live": switch.live, "target": target},
            f"version {target} is still being caught up; see mdindex status",
        )
        return EXIT_PENDING
    return EXIT_OK


def _versions_text(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        mark = "*" if r["live"] else ("+" if r["target"] else " ")
        counts = f"{r.get('documents', 0)} docs, {r.get('points', 0)} points"
        extra = f"  {r['progress']}" if r.get("progress") else ""
        lines.append(
            f"{mark} {r['fingerprint']}  {r['status']:<9} {counts:<24} {r['settings']}{extra}"
        )
    return "\n".join([*lines, "(* live, + what the settings ask for)"]) if lines else "no versions"


Command = Callable[[argparse.Namespace, Settings], int]
COMMANDS: dict[str, Command] = {
    "backfill": cmd_backfill,
    "watch": cmd_watch,
    "search": cmd_search,
    "eval": cmd_eval,
    "links": cmd_links,
    "mcp": cmd_mcp,
    "chunk": cmd_chunk,
    "status": cmd_status,
    "verify": cmd_verify,
    "migrate": cmd_migrate,
    "versions": cmd_versions,
}
