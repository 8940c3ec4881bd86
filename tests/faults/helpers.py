"""Shared pieces of the fault suite: forked children that die for real, trees, comparisons."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import TinyEmbedder, run_backfill, settings_for, stored_points

LONG = os.environ.get("MDINDEX_FAULTS") == "long"


def fork(fn: Callable[[], Any]) -> int:
    """Run ``fn`` in a forked child; return its pid. The child exits 0, or 1 on an exception."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        # tokenizers' thread pool does not survive a fork; without this a child
        # whose parent already tokenized in parallel can deadlock.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        code = 0
        try:
            fn()
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    return pid


def wait(pid: int, timeout: float = 120) -> int:
    """Exit code of a child, or -signal when a signal ended it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return -os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("child did not finish in time")


def fresh_points(tmp_path: Path, root: Path, **overrides: Any) -> dict[str, dict[str, Any]]:
    """What a fresh backfill of the tree stores, in a store of its own."""
    where = tmp_path / f"fresh-{time.monotonic_ns()}"
    s = settings_for(where, [str(root)], **overrides)
    run_backfill(s, TinyEmbedder())
    return stored_points(s)


def make_tree(root: Path, docs: int = 12) -> Path:
    (root / "sub").mkdir(parents=True, exist_ok=True)
    for i in range(docs):
        folder = root / "sub" if i % 3 == 0 else root
        sections = "\n".join(
            f"## Section {j}\n\nDocument {i} section {j} talks about item {i * 10 + j}.\n"
            for j in range(4)
        )
        (folder / f"doc{i:02}.md").write_text(f"# Doc {i}\n\nIntro of document {i}.\n\n{sections}")
    return root


def mutate(root: Path) -> None:
    """An edit, a rename, a delete, a new file and a copy: every kind of write and delete."""
    doc = root / "doc01.md"
    doc.write_text(doc.read_text().replace("section 2 talks", "section 2 now says"))
    (root / "doc02.md").rename(root / "renamed02.md")
    (root / "doc04.md").unlink()
    (root / "new.md").write_text("# New\n\nA brand new document.\n\n## Part\n\nWith a part.\n")
    (root / "sub" / "copy.md").write_text((root / "doc05.md").read_text())
