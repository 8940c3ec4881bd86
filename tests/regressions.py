"""Failing examples kept as regression files, as the frontmatter and corpus
generators keep theirs: a generated test that fails saves its shrunk example
(on Hypothesis's final run) into a folder that a plain test replays first."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis.control import current_build_context


def found(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def keep(folder: Path, example: Any) -> Path:
    """The example as JSON (bytes as latin-1 text), named by its hash."""
    text = json.dumps(example, indent=1, sort_keys=True, ensure_ascii=True)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    path.write_text(text + "\n")
    return path


def load(path: Path) -> Any:
    return json.loads(path.read_text())


@contextmanager
def kept(folder: Path, example: Any, encode: Callable[[Any], Any] = lambda x: x) -> Iterator[None]:
    """Run a check; if it fails on Hypothesis's final (shrunk) run, keep the example."""
    try:
        yield
    except BaseException:
        if current_build_context().is_final:
            print(f"kept as {keep(folder, encode(example))}")
        raise
