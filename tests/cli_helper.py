"""How the suite runs `mdindex`: one helper for every test.

- ``mdindex(*args)`` runs it as a process and waits; ``spawn(*args)`` starts one.
- ``in_process(capsys, *args)`` calls ``main(argv)`` in this process, for a test
  of what a command prints rather than of the process itself.

All three embed with the model's ONNX export (``MDINDEX_BACKEND=onnx``, the
export made once for the run in MDINDEX_CACHE_DIR) unless the test passes
``backend``: ``None`` leaves the choice to the settings (a test of choosing a
backend), or names one. Under load a spawned process took 9.3 s to import
torch and sentence-transformers against 0.55 s to open the export (issue 35).
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import DEFAULT_MODEL
from mdindex.embedding import onnx_export
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import resolve_model

ONNX = "onnx"


# Where the run's export is made, once, under a lock: the xdist workers that
# found none at the start each made one (10 s of CPU: torch loaded, the model
# traced), into the same folder at once.
EXPORTS = Path(__file__).resolve().parents[1] / ".pytest_cache" / "mdindex-export"


@functools.cache
def ensure_export() -> onnx_export.Export:
    """The run's ONNX export of the default model (MDINDEX_CACHE_DIR), linked
    there from the one export of the run (made here if no worker made it yet);
    what the ``export`` fixture gives."""
    info = resolve_model(DEFAULT_MODEL)
    mine = Path(os.environ["MDINDEX_CACHE_DIR"])
    found = onnx_export.find_export(info, mine)
    if found is None:
        EXPORTS.mkdir(parents=True, exist_ok=True)
        with open(EXPORTS.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for it
            made = onnx_export.find_export(info, EXPORTS)
            if made is None:
                ModelEmbedder(info, device="cpu", backend="onnx", cache_dir=EXPORTS).load()
                made = onnx_export.find_export(info, EXPORTS)
            assert made is not None, "the model's ONNX export could not be made"
        # Linked under the lock a process exporting there takes, each link put
        # in place whole: the workers share MDINDEX_CACHE_DIR, and three linking
        # at the run's start (unlink, then link) failed 4 times in 24 with "File
        # exists", or found no export in the moment between another's two steps.
        with onnx_export.exporting(info, mine):
            if onnx_export.find_export(info, mine) is None:
                folder = mine / "onnx" / made.path.parent.name
                for name in ("model.onnx", "meta.json"):  # meta.json last: it says "here"
                    temporary = folder / f".{name}.{os.getpid()}"
                    temporary.unlink(missing_ok=True)
                    temporary.symlink_to(made.path.parent / name)
                    os.replace(temporary, folder / name)
        found = onnx_export.find_export(info, mine)
    assert found is not None, "the model's ONNX export could not be made"
    return found


def environment(env: dict[str, str] | None = None, backend: str | None = ONNX) -> dict[str, str]:
    """os.environ for a spawned mdindex: offline, on ``backend``, then ``env``
    (which wins, so ``env={"MDINDEX_BACKEND": "torch"}`` works too)."""
    out = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if backend is not None:
        out["MDINDEX_BACKEND"] = backend
    out |= env or {}
    # Made before any spawn, whatever its backend: a process whose settings
    # choose (backend None) exports into the run's cache when it finds none
    # there, while the other workers link theirs into the same folder.
    ensure_export()
    return out


def command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "mdindex", *map(str, args)]


def mdindex(
    *args: str | Path,
    env: dict[str, str] | None = None,
    backend: str | None = ONNX,
    timeout: float = 300,
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """`mdindex ARGS` run to its end, its output captured as text."""
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        env=environment(env, backend),
        timeout=timeout,
        **options,
    )


def spawn(
    *args: str | Path,
    env: dict[str, str] | None = None,
    backend: str | None = ONNX,
    **options: Any,
) -> subprocess.Popen[Any]:
    """`mdindex ARGS` started (``options`` as Popen takes them: pipes, text)."""
    return subprocess.Popen(command(*args), env=environment(env, backend), **options)


def _environ_as(wanted: dict[str, str]) -> None:
    """os.environ made ``wanted`` key by key: a variable both have is never
    missing, for a thread of this process (a daemon a test runs here) that
    reads one meanwhile, as it was between a clear() and an update()."""
    for name in set(os.environ) - set(wanted):
        del os.environ[name]
    os.environ.update(wanted)


def in_process(
    capsys: pytest.CaptureFixture[str],
    *args: str | Path,
    env: dict[str, str] | None = None,
    backend: str | None = ONNX,
) -> subprocess.CompletedProcess[str]:
    """``main(ARGS)`` here, answered as ``mdindex`` answers: its exit code,
    stdout and stderr, for a test of what a command prints (a spawn costs
    seconds of imports; this, none). The environment and the umask (main sets
    077) are as they were afterwards."""
    from mdindex.cli.main import main

    argv = [str(a) for a in args]
    wanted = environment(env, backend)
    before = dict(os.environ)
    umask = os.umask(0o077)
    capsys.readouterr()  # what the test printed before is not the command's
    _environ_as(wanted)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors (2), --help (0)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        _environ_as(before)
        os.umask(umask)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def mcp_server(
    *args: str | Path, env: dict[str, str] | None = None, backend: str | None = ONNX
) -> Any:
    """`mdindex mcp ARGS` as an MCP client starts it, over stdio."""
    from mcp import StdioServerParameters

    python, *rest = command("mcp", *args)
    return StdioServerParameters(command=python, args=rest, env=environment(env, backend))
