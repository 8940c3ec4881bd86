"""The entry point: parse, settle the settings and logging, run one command,
and turn every failure into one line on stderr and its exit code."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from mdindex.arguments import as_flags
from mdindex.cli.commands import COMMANDS
from mdindex.cli.parser import build_parser, settings_from
from mdindex.errors import EXIT_STORE, EXIT_USAGE, MdindexError, PruneRefused, RepairRefused
from mdindex.outside import shown


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Everything mdindex creates (state, locks, the embedded store, the socket)
    # is for its own user alone: directories 0700, files 0600.
    os.umask(0o077)
    debug = str(args.log_level or "").upper() == "DEBUG"
    try:
        settings = settings_from(args)
        debug = settings.log_level == "DEBUG"  # from the environment or the file too
        setup_logging(settings.log_level, settings.log_format)
        return COMMANDS[args.command](args, settings)
    except (PruneRefused, RepairRefused) as exc:
        return _fail(as_flags(str(exc)), exc.exit_code, debug)  # "pass --force", not force=True
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
    print(f"mdindex: error: {shown(message)}", file=sys.stderr)  # a name may hold ESC
    return code


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party libraries are noisy at INFO; their warnings still show.
    for name in ("httpx", "sentence_transformers", "transformers", "urllib3", "watchdog"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
