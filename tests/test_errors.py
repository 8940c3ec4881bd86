"""The exception tree: each class's exit code as the exit-code table gives it
(docs/commands.md, linked from the README), and the tree's shape as the
module's docstring draws it."""

from __future__ import annotations

import inspect
import re

import pytest

from mdindex import errors
from mdindex.errors import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_PENDING,
    EXIT_STORE,
    EXIT_USAGE,
    BinaryFile,
    ConfigError,
    DecodeError,
    EmbeddingError,
    FileTimeout,
    FileTooLarge,
    FreshnessUnknown,
    InputError,
    LayoutMismatch,
    LockError,
    MdindexError,
    PruneRefused,
    SpaceRefused,
    StateError,
    StoreError,
    StoreMismatch,
    StoreUnavailable,
    UnreadableFile,
)


def test_the_exit_codes_are_the_tables() -> None:
    # 0 ok, 1 partial, 2 usage, 3 store/embedding/state, 4 drift (and pending)
    assert (EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_STORE, EXIT_DRIFT) == (0, 1, 2, 3, 4)
    assert EXIT_PENDING == 4


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        # 1: finished, but some files could not be indexed
        (InputError, 1),
        (FileTooLarge, 1),
        (BinaryFile, 1),
        (DecodeError, 1),
        (UnreadableFile, 1),
        (FileTimeout, 1),
        # 2: usage or configuration, a refused prune or build, another writer,
        # a collection with other vector settings; nothing written
        (MdindexError, 2),
        (ConfigError, 2),
        (LockError, 2),
        (PruneRefused, 2),
        (SpaceRefused, 2),
        (StoreMismatch, 2),
        (LayoutMismatch, 2),
        # 3: the model, the store or the local state failed the whole run
        (EmbeddingError, 3),
        (StateError, 3),
        (StoreError, 3),
        (StoreUnavailable, 3),
        # 4: `status --wait` cannot tell whether the index is caught up
        (FreshnessUnknown, 4),
    ],
)
def test_each_class_exits_with_its_code(cls: type[MdindexError], code: int) -> None:
    assert cls.exit_code == code
    assert cls("why").exit_code == code  # an instance, as the CLI's boundary reads it
    assert str(cls("why")) == "why"


def _drawn_tree() -> list[tuple[int, str, int | None]]:
    """(depth, class name, the exit code drawn beside it or None) per line of the
    docstring's tree, the root at depth 0."""
    doc = errors.__doc__ or ""
    rows: list[tuple[int, str, int | None]] = []
    for line in doc.splitlines():
        if line.strip() == "MdindexError":
            rows.append((0, "MdindexError", None))
            continue
        m = re.match(r"^((?:[│ ]   )*)[├└]── (\w+)(.*)$", line)
        if m is None:
            continue
        code = re.search(r"\(exit (\d)\)", m.group(3))
        rows.append((len(m.group(1)) // 4 + 1, m.group(2), int(code.group(1)) if code else None))
    return rows


def test_the_tree_is_shaped_as_the_docstring_draws_it() -> None:
    drawn = _drawn_tree()
    assert drawn[0] == (0, "MdindexError", None)
    parents: dict[int, str] = {}
    for depth, name, _ in drawn:
        parents[depth] = name
        cls = getattr(errors, name)
        if depth:
            assert cls.__bases__ == (getattr(errors, parents[depth - 1]),), name
    # every class of the module is drawn, once
    defined = {
        name
        for name, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, MdindexError) and obj.__module__ == errors.__name__
    }
    names = [name for _, name, _ in drawn]
    assert sorted(names) == sorted(defined)


def test_the_exit_codes_drawn_are_the_classes() -> None:
    drawn = [(name, code) for _, name, code in _drawn_tree() if code is not None]
    assert len(drawn) >= 5  # the parser read the codes, not nothing
    for name, code in drawn:
        assert getattr(errors, name).exit_code == code, name
