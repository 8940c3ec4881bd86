"""The Python API's arguments, checked as the command line checks its own:
a value of another type, or a path the filesystem refuses, is a ConfigError
of one line (docs/python.md promises an MdindexError for every error)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from mdindex.errors import ConfigError, PruneRefused, RepairRefused
from mdindex.outside import integer, quoted, strings

_P = ParamSpec("_P")
_R = TypeVar("_R")


# The guard's refusals name the command line's flags; in Python they are keywords.
KEYWORDS = {"--force": "force=True", "--no-prune": "prune=False"}


def as_keywords(text: str) -> str:
    """A refusal's text as a Python caller needs it: ``force=True``, not ``--force``."""
    for flag, keyword in KEYWORDS.items():
        text = text.replace(flag, keyword)
    return text


def as_flags(text: str) -> str:
    """A refusal's text as the command line says it: the command line calls
    the same API, whose refusals name the keywords (``as_keywords`` undone)."""
    for flag, keyword in KEYWORDS.items():
        text = text.replace(keyword, flag)
    return text


def one_line(call: Callable[_P, _R]) -> Callable[_P, _R]:
    """A call whose OSError (a state dir that cannot be made or written, a
    path too long) is the ConfigError the command line prints for it: the
    API promises an MdindexError, and Index(state_dir="/sys/x").sync() raised
    PermissionError (the OSError is its ``__cause__``). A refusal that tells
    the command line's user to ``pass --force`` tells a Python caller to pass
    ``force=True``."""

    @functools.wraps(call)
    def answered(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return call(*args, **kwargs)
        except BrokenPipeError:
            raise  # the reader went (mdindex ... | head): the command line's own exit
        except (PruneRefused, RepairRefused) as exc:
            raise type(exc)(as_keywords(str(exc))) from None
        except OSError as exc:
            where = f"{quoted(str(exc.filename))}: " if exc.filename else ""
            raise ConfigError(
                f"{where}{exc.strerror or exc} (check state_dir and qdrant_path)"
            ) from exc

    return answered


def path_args(value: Any, name: str, many: bool = False) -> list[Path]:
    """A path argument (or several, with ``many``) as paths; ConfigError otherwise."""
    values = [value] if isinstance(value, str | Path) or not many else value
    try:
        if all(isinstance(v, str | Path) for v in values):
            return [Path(v) for v in values]
    except TypeError:  # roots=5
        pass
    kind = "a path or a list of paths" if many else "a path"
    raise ConfigError(f"{name} must be {kind}, not {quoted(value)}")


def connect_arg(where: Any) -> tuple[Path, bool]:
    """``Index.connect``'s argument as a path, and whether it is a folder;
    ConfigError otherwise (Index.connect(5) raised TypeError, a name too long
    OSError)."""
    [path] = path_args(where, "where")
    try:
        return path, path.is_dir()
    except OSError as exc:
        raise ConfigError(f"where: {quoted(str(path))}: {exc.strerror}") from exc


def text_arg(value: Any, name: str) -> str:
    """A string argument; ConfigError for anything else."""
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, not {quoted(value)}")
    return value


def text_args(value: Any, name: str) -> tuple[str, ...]:
    """One string or several (``strings``); ConfigError for anything else
    (drop_versions(None) and eval(modes=None) raised TypeError; None is no
    list of none: drop_versions() drops every old version)."""
    try:
        if value is None:
            raise ValueError(f"{name} must be a string or a list of strings, not None")
        return strings(value, name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def links_args(document: Any, root: Any) -> tuple[Path, str | None]:
    """``links``'s arguments checked: links(None) raised TypeError, and
    links("a.md", root=False) a ValueError."""
    [path] = path_args(document, "document")
    if root is not None and not isinstance(root, str):
        raise ConfigError(f"root must be a root's label, not {quoted(root)}")
    return path, root


def eval_args(questions: Any, headings: Any, seed: Any) -> tuple[Path | None, int | None, int]:
    """``eval``'s arguments checked: one of a questions file and a count of
    headings; eval(b"q.yaml") and eval(headings="3") raised TypeError (the
    count's range is checked with the questions)."""
    if questions is not None and headings is not None:
        # `eval --headings 3 docs` reads docs as QUESTIONS: roots go in --root
        raise ConfigError(
            f"eval: give a QUESTIONS file or --headings, not both ({quoted(str(questions))} "
            "was read as QUESTIONS; roots go in --root)"
        )
    if questions is None and headings is None:
        raise ConfigError("eval: give a QUESTIONS file, or --headings for the heading self-check")
    path = None if questions is None else path_args(questions, "questions")[0]
    try:
        count = None if headings is None else integer(headings, "headings", -(2**63), 2**63)
        return path, count, integer(seed, "seed", -(2**63), 2**63)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
