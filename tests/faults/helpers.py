"""Shared pieces of the fault suite: forked children that die for real, trees, comparisons."""

from __future__ import annotations

import faulthandler
import gc
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
        # The child never collects what it inherited: garbage of the parent (an
        # earlier test's store in a reference cycle) finalized here waited for
        # threads a forked child has none of (a full run hung twice in
        # "Garbage-collecting" inside a backfill). A gc.collect() in the parent
        # before each fork also worked but cost the suite about 87 s.
        gc.freeze()
        # tokenizers' thread pool does not survive a fork; without this a child
        # whose parent already tokenized in parallel can deadlock.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        # A child that hangs prints where each of its threads is (see wait).
        faulthandler.register(signal.SIGUSR1, all_threads=True)
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
    os.kill(pid, signal.SIGUSR1)  # its threads' stacks, to the captured stderr
    time.sleep(1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("child did not finish in time (its threads' stacks are in its stderr)")


def kill_at_random(fn: Callable[[], Any], rng: Any, latest_s: float) -> bool:
    """Run ``fn`` in a forked child and SIGKILL it at a random moment up to
    ``latest_s``; True when it was still running to be killed."""
    pid = fork(fn)
    time.sleep(rng.uniform(0.05, latest_s))
    try:
        os.kill(pid, signal.SIGKILL)
        killed = True
    except ProcessLookupError:
        killed = False
    wait(pid)
    return killed


def fresh_points(
    tmp_path: Path, root: Path, vectors: bool = True, **overrides: Any
) -> dict[str, dict[str, Any]]:
    """What a fresh backfill of the tree stores, in a store of its own: payloads
    and vectors, so a converged store with a wrong vector still fails (payloads
    only against a run with the real model)."""
    where = tmp_path / f"fresh-{time.monotonic_ns()}"
    s = settings_for(where, [str(root)], **overrides)
    run_backfill(s, TinyEmbedder())
    return stored_points(s, vectors=vectors)


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


_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def drop_file_privileges() -> None:
    """Make this (forked) process obey file permissions as an ordinary user does.

    Root reads a mode-000 file anyway through two capabilities; without them
    it is refused like anyone else, while the checkout, the virtual
    environment and the temp dirs (all root's own) stay readable. Unlike
    switching to nobody, this needs no checkout readable by other users.
    """
    if os.geteuid() != 0:
        return  # an ordinary user already is one
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    libc = ctypes.CDLL(None, use_errno=True)
    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    mask = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[0], field, getattr(data[0], field) & mask)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def unprivileged(fn: Callable[[], Any], timeout: float = 180) -> Any:
    """Run ``fn`` in a forked child that obeys file permissions; return what it
    returned (JSON), or raise with the child's traceback."""
    import json
    import tempfile

    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)

    def child() -> None:
        drop_file_privileges()
        result = fn()
        Path(out).write_text(json.dumps(result))

    try:
        code = wait(fork(child), timeout)
        assert code == 0, f"unprivileged child failed with {code} (its traceback is above)"
        return json.loads(Path(out).read_text() or "null")
    finally:
        os.unlink(out)
