"""The engines: token id rows padded into one matrix and its mask, run in
batches of like length with every row's vector put back in its place, and
the torch forward against sentence-transformers' own encode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.engines import PAD_MULTIPLE, TorchEngine, encode, pad, run_sorted
from mdindex.embedding.model import load_tokenizer


def test_pad_right_pads_with_zeros_and_masks_the_padding() -> None:
    ids, mask = pad([[5, 6, 7], [8], [9, 10]])
    assert ids.dtype == mask.dtype == np.int64
    z = [0] * (PAD_MULTIPLE - 3)  # widths are a multiple of PAD_MULTIPLE: few shapes
    assert ids.tolist() == [[5, 6, 7, *z], [8, 0, 0, *z], [9, 10, 0, *z]]
    assert mask.tolist() == [[1, 1, 1, *z], [1, 0, 0, *z], [1, 1, 0, *z]]
    ids, mask = pad([[1] * (PAD_MULTIPLE + 1)])
    assert ids.shape == mask.shape == (1, 2 * PAD_MULTIPLE)
    assert mask.sum() == PAD_MULTIPLE + 1


def features(ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
    """An engine that sees only each row's real tokens, as a model's mask makes
    it: its length, its sum, its first and its last token."""
    lengths = mask.sum(axis=1)
    last = ids[np.arange(len(ids)), lengths - 1]
    out = np.stack([lengths, (ids * mask).sum(axis=1), ids[:, 0], last], axis=1)
    return out.astype(np.float32)


def alone(row: list[int]) -> list[float]:
    return [len(row), sum(row), row[0], row[-1]]


ROWS = [
    [101, 7, 102],
    [101, 1, 2, 3, 4, 5, 6, 102],
    [101, 102],
    [101, 9, 9, 102],
    [101, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 102],
    [101, 4, 3, 2, 102],
    [101, 3, 3, 102],  # as long as another: ties keep their own vectors too
    [101, 5, 102],
]


@pytest.mark.parametrize("batch_size", [1, 3, 8, 64])
def test_run_sorted_puts_each_rows_vector_back_in_its_place(batch_size: int) -> None:
    got = run_sorted(features, ROWS, batch_size)
    assert got.dtype == np.float32
    assert got.tolist() == [alone(r) for r in ROWS]


def test_run_sorted_batches_rows_of_like_length_longest_first() -> None:
    widths: list[tuple[int, ...]] = []

    def run(engine: object, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
        assert ids.shape[1] % PAD_MULTIPLE == 0
        widths.append((ids.shape[0], int(mask.sum(axis=1).max())))
        return features(ids, mask)

    got = run_sorted(features, ROWS, 3, run)
    assert got.tolist() == [alone(r) for r in ROWS]
    # lengths 12 8 5 | 4 4 3 | 3 2: batches of like length, the longest first
    assert widths == [(3, 12), (3, 4), (2, 3)]


@pytest.mark.model
def test_the_torch_forward_gives_encodes_vectors(real_embedder: ModelEmbedder) -> None:
    model = real_embedder.model()
    tokenizer = load_tokenizer(real_embedder.info)
    texts = [
        "Hugo is a static site generator.",
        "A longer paragraph about vector stores and markdown files on disk. " * 5,
        "",
        "`code` and émojis 🎉 and CJK 文字",
    ]
    rows = [e.ids for e in tokenizer.encode_batch(texts)]
    engine = TorchEngine(model, "cpu", "fp32", ("input_ids", "attention_mask", "token_type_ids"))
    got = run_sorted(engine, rows, 2)
    want = encode(model, "fp32", texts, 2)
    assert got.shape == want.shape == (len(texts), 384)
    assert got.dtype == want.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(got * want, axis=1))) > 0.99999
    # padding is masked: a row alone and in a padded batch give one vector
    single = np.vstack([engine(*pad([r])) for r in rows])
    assert float(np.min(np.sum(single * got, axis=1))) > 0.99999


@pytest.mark.model
def test_encode_keeps_the_order_and_bf16_stays_close(real_embedder: ModelEmbedder) -> None:
    model = real_embedder.model()
    texts = ["cats purr when happy", "the borrow checker rejects dangling references"]
    both = encode(model, "fp32", texts, 1)
    assert np.allclose(both[1], encode(model, "fp32", texts[1:], 1)[0], atol=1e-6)
    assert float(np.dot(both[0], both[1])) < 0.5  # two texts, not one twice
    bf16 = encode(model, "bf16", texts, 2)
    assert bf16.dtype == np.float32
    assert float(np.min(np.sum(bf16 * both, axis=1))) > 0.99


TINY_SESSION = """
import sys
from pathlib import Path
import onnx
from onnx import TensorProto, helper

ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])
out = helper.make_tensor_value_info("out", TensorProto.INT64, [1, 1])
graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["out"])], "g", [ids], [out])
onnx.save(helper.make_model(graph), sys.argv[1])
if sys.argv[2] == "mdindex":
    from mdindex.embedding.engines import OnnxRunner
    OnnxRunner(Path(sys.argv[1]), ("input_ids",))
else:
    import onnxruntime
    onnxruntime.InferenceSession(sys.argv[1])
"""


# onnxruntime 1.32 writes no telemetry where one of these is set (the names are
# in its library, beside the CI check); CI sets CI=1, so the test takes them out
ORT_CI_MARKERS = (
    "CI",
    "TF_BUILD",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "CIRCLECI",
    "TRAVIS",
    "JENKINS_URL",
    "CODEBUILD_BUILD_ID",
    "BUILDKITE",
    "TEAMCITY_VERSION",
    "APPVEYOR",
    "BITBUCKET_BUILD_NUMBER",
    "ORT_RUNNING_UNIT_TESTS",
)


def test_an_onnx_session_leaves_no_telemetry_behind(tmp_path: Path) -> None:
    """onnxruntime 1.32 keeps a device id and an event store for upload under
    ~/.cache/Microsoft from its first import; mdindex's sessions make none."""
    drop = {"ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME", *ORT_CI_MARKERS}  # ~/.cache, under HOME
    env = {k: v for k, v in os.environ.items() if k not in drop}
    made = {}
    for who in ("onnxruntime", "mdindex"):
        home = tmp_path / who
        home.mkdir()
        run = [sys.executable, "-c", TINY_SESSION, str(tmp_path / f"{who}.onnx"), who]
        subprocess.run(run, env=env | {"HOME": str(home)}, check=True, timeout=120)
        made[who] = sorted(p.relative_to(home).as_posix() for p in home.rglob("*"))
    # the library alone writes them (so this test can fail), mdindex's session nothing
    assert ".cache/Microsoft/DeveloperTools/.onnxruntime/deviceid" in made["onnxruntime"]
    assert made["mdindex"] == []
