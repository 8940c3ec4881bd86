"""Loading the model the way it will compute: what `load` chooses from the
settings (backend, precision, device) and from a cached measurement, and the
queries-only path on the cached ONNX export, without torch. With the real
model; the export is the run's shared one (MDINDEX_CACHE_DIR), made once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mdindex.config import DEFAULT_MODEL
from mdindex.embedding import calibration, onnx_export
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.engines import OnnxRunner, TorchEngine
from mdindex.embedding.loading import load, weights_sha
from mdindex.embedding.model import ModelInfo, Wanted, native_bf16, resolve_model, weights_hash
from mdindex.errors import ConfigError
from tests.conftest import SLOW_TORCH, SPEED, plant_measurement

pytestmark = pytest.mark.model

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def info() -> ModelInfo:
    return resolve_model(DEFAULT_MODEL)


@pytest.fixture
def cache(onnx_cache: Path) -> Path:
    return onnx_cache


def test_the_only_candidate_the_settings_allow_is_loaded_unmeasured(
    info: ModelInfo, cache: Path
) -> None:
    loaded = load(info, Wanted(device="cpu", precision="fp32", backend="torch", cache_dir=cache))
    choice = loaded.choice
    assert (choice.name, choice.source) == ("torch-fp32", "setting")
    assert choice.reason == "the only candidate the settings allow"
    assert (loaded.device, loaded.batch_size) == ("cpu", 16)  # 16 on a CPU
    assert isinstance(loaded.engine, TorchEngine) and loaded.engine.precision == "fp32"
    assert loaded.model is not None and loaded.tokenizer is not None
    assert loaded.wrap == ([101], [102]) and loaded.features == INPUTS
    assert not (cache / "calibration").exists()


def test_an_explicit_precision_is_not_measured(tmp_path: Path) -> None:
    bf16 = ModelEmbedder(
        resolve_model(DEFAULT_MODEL), device="cpu", precision="bf16", cache_dir=tmp_path
    )
    if not native_bf16():  # a CPU without avx512_bf16 or AMX: refused, nothing measured
        with pytest.raises(ConfigError, match="precision 'bf16' cannot run on cpu"):
            bf16.embed(["hello"])
        assert not (tmp_path / "calibration").exists()
        return
    bf16.embed(["hello"])
    assert bf16.choice is not None
    assert (bf16.choice.name, bf16.choice.source) == ("torch-bf16", "setting")
    assert not (tmp_path / "calibration").exists()
    assert not (tmp_path / "onnx").exists()


def test_without_a_cache_dir_nothing_is_measured(info: ModelInfo) -> None:
    loaded = load(info, Wanted(device="cpu", batch_size=8))
    assert loaded.choice.name == "torch-fp32" and loaded.batch_size == 8
    assert loaded.choice.reason in (
        "no cache_dir to keep a measurement",  # fp32 and bf16 both possible here
        "the only candidate the settings allow",  # no native bf16 on this CPU
    )
    assert isinstance(loaded.engine, TorchEngine)


def test_a_precision_the_device_cannot_run_is_a_config_error(info: ModelInfo) -> None:
    with pytest.raises(ConfigError, match="precision 'fp16' cannot run on cpu"):
        load(info, Wanted(device="cpu", precision="fp16"))


@pytest.mark.parametrize("planted", ["onnx-fp32", "torch-bf16", "torch-fp32"])
def test_a_cached_measurement_decides_without_measuring(
    info: ModelInfo, cache: Path, planted: str
) -> None:
    bf16 = native_bf16()
    if planted == "torch-bf16" and not bf16:
        planted = "torch-fp32"  # not a candidate on this CPU
    names = calibration.candidates("cpu", "auto", "auto", native_bf16=bf16, onnx=True)
    key = calibration.machine_key(
        model_sha256=weights_sha(info, cache), device="cpu", batch_size=16, names=names
    )
    backend, precision = planted.split("-")
    calibration.save(
        cache,
        key,
        calibration.Choice(
            backend,
            precision,
            "planted",
            source="measured",
            measured_at="2026-01-01T00:00:00+00:00",
        ),
    )
    (saved,) = (cache / "calibration").glob("*.json")
    before = saved.read_bytes()

    loaded = load(info, Wanted(device="cpu", cache_dir=cache))

    assert (loaded.choice.name, loaded.choice.source) == (planted, "cache")
    assert (loaded.choice.reason, loaded.choice.measured_at) == (
        "planted",
        "2026-01-01T00:00:00+00:00",
    )
    if backend == "onnx":
        assert isinstance(loaded.engine, OnnxRunner)
        assert loaded.model is None  # torch's copy is let go
    else:
        assert isinstance(loaded.engine, TorchEngine) and loaded.engine.precision == precision
        assert loaded.model is not None
    # nothing measured, nothing cached anew
    assert list((cache / "calibration").glob("*.json")) == [saved]
    assert saved.read_bytes() == before


def test_backend_onnx_runs_the_cached_export(info: ModelInfo, cache: Path) -> None:
    loaded = load(info, Wanted(backend="onnx", cache_dir=cache))
    assert (loaded.choice.name, loaded.choice.source) == ("onnx-fp32", "setting")
    assert "backend = onnx" in loaded.choice.reason
    assert isinstance(loaded.engine, OnnxRunner) and loaded.model is None
    assert (loaded.device, loaded.batch_size, loaded.features) == ("cpu", 16, INPUTS)
    assert loaded.wrap == ([101], [102])


def test_queries_only_take_the_cached_export(
    info: ModelInfo, cache: Path, real_embedder: ModelEmbedder
) -> None:
    loaded = load(info, Wanted(cache_dir=cache, queries_only=True))
    assert (loaded.choice.name, loaded.choice.source) == ("onnx-fp32", "query")
    assert isinstance(loaded.engine, OnnxRunner) and loaded.model is None
    assert loaded.tokenizer is not None
    ids = loaded.tokenizer.encode("how do I install hugo").ids
    vector = loaded.engine(np.array([ids]), np.ones((1, len(ids)), dtype=np.int64))[0]
    want = real_embedder.embed(["how do I install hugo"])[0]
    assert float(np.dot(vector, want)) > 0.9999


@pytest.mark.parametrize(("backend", "precision"), [("torch", "fp32"), ("auto", "bf16")])
def test_queries_only_with_settings_that_rule_the_export_out_load_torch(
    info: ModelInfo, cache: Path, backend: str, precision: str
) -> None:
    want = Wanted(
        device="cpu", backend=backend, precision=precision, cache_dir=cache, queries_only=True
    )
    if precision == "bf16" and not native_bf16():
        with pytest.raises(ConfigError, match="cannot run on cpu"):
            load(info, want)
        return
    loaded = load(info, want)
    assert (loaded.choice.name, loaded.choice.source) == (f"torch-{precision}", "setting")
    assert isinstance(loaded.engine, TorchEngine) and loaded.engine.precision == precision


def test_weights_sha_comes_from_the_exports_record(info: ModelInfo, tmp_path: Path) -> None:
    assert weights_sha(info, tmp_path) == weights_hash(info)  # no export: computed
    folder = tmp_path / "onnx" / onnx_export.export_key(info)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"")
    (folder / "meta.json").write_text(
        json.dumps({"exportable": True, "weights_sha256": "recorded", "inputs": list(INPUTS)})
    )
    assert weights_sha(info, tmp_path) == "recorded"  # the weights are not read again


PROBE = """
import json, sys
from pathlib import Path
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import resolve_model
e = ModelEmbedder(resolve_model("all-MiniLM-L6-v2"), cache_dir=Path(sys.argv[1]), queries_only=True)
v = e.embed(["how do I install hugo"])[0]
print(json.dumps({"vector": v.tolist(), "choice": e.choice.name,
                  "torch": "torch" in sys.modules,
                  "st": "sentence_transformers" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""


@pytest.mark.slow
def test_a_query_process_embeds_without_torch(cache: Path, real_embedder: ModelEmbedder) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(cache)],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
    )
    data = json.loads(out.stdout)
    assert data["choice"] == "onnx-fp32"
    assert not (data["torch"] or data["st"] or data["transformers"])
    want = real_embedder.embed(["how do I install hugo"])[0]
    assert float(np.dot(np.asarray(data["vector"], dtype=np.float32), want)) > 0.9999


def test_without_an_export_a_query_process_loads_torch(tmp_path: Path) -> None:
    e = ModelEmbedder(
        resolve_model(DEFAULT_MODEL),
        device="cpu",
        precision="fp32",
        backend="torch",
        cache_dir=tmp_path,
        queries_only=True,
    )
    e.embed(["q"])
    assert e.choice is not None and e.choice.name == "torch-fp32"


def test_a_damaged_export_falls_back_to_torch_and_is_made_again(
    info: ModelInfo, tmp_path: Path, export: onnx_export.Export
) -> None:
    cache = tmp_path / "cache"
    folder = cache / "onnx" / export.path.parent.name
    folder.mkdir(parents=True)
    shutil.copyfile(export.path.parent / "meta.json", folder / "meta.json")
    (folder / "model.onnx").write_bytes(export.path.read_bytes()[:1_000_000])  # cut short
    plant_measurement(cache, SLOW_TORCH, SPEED)
    loaded = load(info, Wanted(cache_dir=cache), run=(3, 300))  # a small run: the export
    assert isinstance(loaded.engine, TorchEngine) and loaded.choice.backend == "torch"
    again = onnx_export.find_export(info, cache)
    assert again is not None and again.path.stat().st_size == export.path.stat().st_size
    loaded = load(info, Wanted(cache_dir=cache), run=(3, 300))
    assert isinstance(loaded.engine, OnnxRunner) and loaded.choice.name == "onnx-fp32"
