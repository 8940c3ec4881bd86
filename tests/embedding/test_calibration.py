"""Choosing the backend by measurement: the gate, the pick, the cache and its key."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mdindex.embedding import calibration
from mdindex.embedding.calibration import Choice


def _unit(rows: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((rows, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_texts_are_fixed_and_of_mixed_length() -> None:
    assert calibration._texts() == calibration.TEXTS
    lengths = sorted(len(t.split()) for t in calibration.TEXTS)
    assert len(calibration.TEXTS) == 48
    assert lengths[0] < 15 and lengths[-1] > 70


def test_the_gate_passes_the_same_vectors_and_fails_noisy_ones() -> None:
    ref = _unit(48, 1)
    same = calibration.gate(ref, ref.copy())
    assert same == {"mean_cosine": 1.0, "top10_agreement": 1.0, "passed": True}
    noisy = ref + 0.3 * _unit(48, 2)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    verdict = calibration.gate(ref, noisy)
    assert verdict["passed"] is False
    assert float(verdict["mean_cosine"]) < calibration.GATE_COSINE


def _runner(vectors: np.ndarray, delay: float) -> calibration.EmbedFn:
    def run(texts: Sequence[str]) -> np.ndarray:
        time.sleep(delay * len(texts) / len(calibration.TEXTS))
        return vectors[: len(texts)]

    return run


def test_the_fastest_that_passes_the_gate_is_chosen() -> None:
    ref = _unit(48, 3)
    wrong = _unit(48, 4)  # fastest, but other vectors
    choice = calibration.measure(
        {
            "torch-fp32": _runner(ref, 0.06),
            "torch-bf16": _runner(wrong, 0.005),
            "onnx-fp32": _runner(ref, 0.02),
        }
    )
    assert choice.name == "onnx-fp32" and choice.source == "measured"
    assert choice.gate["torch-bf16"]["passed"] is False
    assert choice.chunks_per_s["torch-bf16"] > choice.chunks_per_s["onnx-fp32"]
    assert choice.chunks_per_s["onnx-fp32"] > choice.chunks_per_s["torch-fp32"]
    assert "failed the gate: torch-bf16" in choice.reason


def test_measuring_needs_the_reference() -> None:
    with pytest.raises(ValueError, match="torch-fp32"):
        calibration.measure({"onnx-fp32": _runner(_unit(48, 5), 0.0)})


@pytest.mark.parametrize(
    ("device", "precision", "backend", "bf16", "want"),
    [
        ("cpu", "auto", "auto", True, ["torch-fp32", "torch-bf16", "onnx-fp32"]),
        # oneDNN without native bf16: not even measured
        ("cpu", "auto", "auto", False, ["torch-fp32", "onnx-fp32"]),
        ("cpu", "fp32", "auto", True, ["torch-fp32", "onnx-fp32"]),
        ("cpu", "bf16", "auto", True, ["torch-bf16"]),
        ("cpu", "auto", "onnx", True, ["onnx-fp32"]),
        ("cpu", "auto", "torch", True, ["torch-fp32", "torch-bf16"]),
        ("cpu", "fp16", "auto", True, []),  # fp16 on a CPU: nothing to run
        # onnxruntime's CPU wheel does not run on the GPU; fp16 does
        ("cuda", "auto", "auto", False, ["torch-fp32", "torch-fp16"]),
        ("cuda:1", "auto", "onnx", False, []),
    ],
)
def test_candidates(device: str, precision: str, backend: str, bf16: bool, want: list[str]) -> None:
    got = calibration.candidates(device, precision, backend, native_bf16=bf16, onnx=True)
    assert got == want


def _key(**over: str) -> dict[str, str]:
    return (
        calibration.machine_key(
            model_sha256=over.pop("model", "m1"),
            device="cpu",
            batch_size=64,
            names=["torch-fp32", "onnx-fp32"],
        )
        | over
    )


def test_a_saved_choice_is_found_under_its_key_only(tmp_path: Path) -> None:
    choice = Choice("onnx", "fp32", "why", {"onnx-fp32": 50.0}, source="measured", measured_at="t")
    calibration.save(tmp_path, _key(), choice)
    again = calibration.cached(tmp_path, _key())
    assert again is not None
    assert (again.name, again.reason, again.chunks_per_s) == (
        "onnx-fp32",
        "why",
        {"onnx-fp32": 50.0},
    )
    assert again.source == "cache"
    # another model, CPU or library version is another key
    assert calibration.cached(tmp_path, _key(model="m2")) is None
    assert calibration.cached(tmp_path, _key(cpu="another CPU")) is None
    assert calibration.cached(tmp_path, _key(torch="9.9")) is None


def test_a_damaged_cache_file_means_measuring_again(tmp_path: Path) -> None:
    calibration.save(tmp_path, _key(), Choice("torch", "bf16", "why"))
    (path,) = (tmp_path / "calibration").glob("*.json")
    for text in ("{", "[]", json.dumps({"key": _key(), "choice": {"nonsense": 1}})):
        path.write_text(text)
        assert calibration.cached(tmp_path, _key()) is None


def test_recorded_is_the_newest_for_this_model_on_this_cpu(tmp_path: Path) -> None:
    calibration.save(tmp_path, _key(), Choice("torch", "bf16", "old", measured_at="2026-01-01"))
    calibration.save(
        tmp_path, _key(torch="9.9"), Choice("onnx", "fp32", "new", measured_at="2026-02-01")
    )
    calibration.save(tmp_path, _key(model="m2"), Choice("torch", "fp32", "x", measured_at="2027"))
    got = calibration.recorded(tmp_path, "m1")
    assert got is not None and got.name == "onnx-fp32"
    assert calibration.recorded(tmp_path, "m3") is None


def test_an_unwritable_cache_costs_only_a_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    calibration.save(blocker, _key(), Choice("torch", "fp32", "why"))  # no raise
    assert calibration.cached(blocker, _key()) is None


def test_the_cpu_is_named_even_where_proc_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_open = builtins.open

    def hidden(path: object, *args: object, **kwargs: object) -> object:
        if str(path) == "/proc/cpuinfo":
            raise PermissionError("ProcSubset=pid")
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", hidden)
    ident = calibration.cpu_identity()
    assert ident["cpu"] and ident["arch"]
    assert int(ident["threads"]) >= 1
