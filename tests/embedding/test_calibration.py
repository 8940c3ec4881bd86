"""Choosing the backend by measurement: the gate, the pick, the cache and its key."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mdindex.embedding import calibration
from mdindex.embedding.calibration import Choice
from mdindex.embedding.machine import cpu_identity
from mdindex.embedding.samples import TEXTS
from tests.conftest import FakeTime


def _unit(rows: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((rows, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_gate_passes_the_same_vectors_and_fails_noisy_ones() -> None:
    ref = _unit(48, 1)
    same = calibration.gate(ref, ref.copy())
    assert same == {"mean_cosine": 1.0, "top10_agreement": 1.0, "passed": True}
    noisy = ref + 0.3 * _unit(48, 2)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    verdict = calibration.gate(ref, noisy)
    assert verdict["passed"] is False
    assert float(verdict["mean_cosine"]) < calibration.GATE_COSINE


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """The measurement's clock, moved only by what the runners here cost: these
    tests are of the choice, not of this machine's timer. With real sleeps a
    wake-up 7 ms late under load (three xdist workers on two cores) put a 13 ms
    pass outside its bound, and a 26 ms margin between two single passes
    decided the order of two runners."""
    clock = FakeTime()
    monkeypatch.setattr(calibration, "time", SimpleNamespace(perf_counter=clock.monotonic))
    return clock


def _runner(vectors: np.ndarray, delay: float, clock: FakeTime) -> calibration.EmbedFn:
    def run(texts: Sequence[str]) -> np.ndarray:
        clock.sleep(delay * len(texts) / len(TEXTS))
        return vectors[: len(texts)]

    return run


def test_the_fastest_that_passes_the_gate_is_chosen(work: FakeTime) -> None:
    ref = _unit(48, 3)
    wrong = _unit(48, 4)  # fastest, but other vectors
    choice = calibration.measure(
        {
            "torch-fp32": _runner(ref, 0.06, work),
            "torch-bf16": _runner(wrong, 0.005, work),
            "onnx-fp32": _runner(ref, 0.02, work),
        }
    )
    assert choice.name == "onnx-fp32" and choice.source == "measured"
    assert choice.gate["torch-bf16"]["passed"] is False
    assert choice.chunks_per_s["torch-bf16"] > choice.chunks_per_s["onnx-fp32"]
    assert choice.chunks_per_s["onnx-fp32"] > choice.chunks_per_s["torch-fp32"]
    assert "failed the gate: torch-bf16" in choice.reason


def test_measuring_needs_the_reference() -> None:
    with pytest.raises(ValueError, match="torch-fp32"):
        calibration.measure({"onnx-fp32": _runner(_unit(48, 5), 0.0, FakeTime())})


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
    choice = Choice(
        "onnx",
        "fp32",
        "why",
        {"onnx-fp32": 50.0},
        source="measured",
        measured_at="2026-01-01T00:00:00+00:00",
    )
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


def test_a_cache_file_nested_past_any_parser_means_measuring_again(tmp_path: Path) -> None:
    """Found by a hostile review: `'[' * 100000` raised RecursionError, so
    backfill, status and watch all exited 3 and the daemon never started."""
    calibration.save(tmp_path, _key(), Choice("torch", "bf16", "why"))
    (path,) = (tmp_path / "calibration").glob("*.json")
    for text in ("[" * 100_000, '{"key": ' + "{" * 50_000):
        path.write_text(text)
        assert calibration.cached(tmp_path, _key()) is None
        assert calibration.recorded(tmp_path, "m1") is None


@pytest.mark.parametrize(
    "damage",
    [
        {"load_s": {"onnx-fp32": "0.2"}},
        {"load_s": {"onnx-fp32": float("nan")}},
        {"tokens_per_s": {"onnx-fp32": -1.0}},
        {"tokens_per_s": {"onnx-fp32": float("inf")}},
        {"tokens_per_s": {"onnx-fp32": True}},
        {"tokens_per_s": ["onnx-fp32"]},
        {"chunks_per_s": {"onnx-int8": 90.0}},
        {"gate": {"onnx-fp32": "passed"}},
        {"gate": {"onnx-fp32": {"passed": "yes"}}},
        {"backend": "tensorflow"},
        {"precision": "int8"},
        {"reason": ["why"]},
        {"texts": 12},
        {"expected_s": {"onnx-fp32": 1.0}},
        {"load_s": {"torch-fp32": 1e308}},  # lookahead's division overflowed
        {"tokens_per_s": {"onnx-fp32": 5e-324}},  # and this gave NaN
        {"measured_at": 5},  # status compared it with a string
        {"source": None},
    ],
)
def test_figures_that_are_no_measurement_mean_measuring_again(
    tmp_path: Path, damage: dict[str, Any]
) -> None:
    key = _key(candidates="torch-fp32,torch-bf16,onnx-fp32")
    calibration.save(tmp_path, key, _figures())
    assert calibration.cached(tmp_path, key) is not None
    (path,) = (tmp_path / "calibration").glob("*.json")
    data = json.loads(path.read_text())
    data["choice"] |= damage
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    assert calibration.cached(tmp_path, key) is None
    assert calibration.recorded(tmp_path, "m1") is None


def test_a_choice_the_keys_candidates_do_not_list_is_measured_again(tmp_path: Path) -> None:
    """fp16 on a CPU was never a candidate there, nor gated: a file naming it
    (or naming figures for it) is no measurement of these candidates."""
    key = _key(candidates="torch-fp32,torch-bf16,onnx-fp32")
    fp16 = _figures()
    fp16.precision = "fp16"
    calibration.save(tmp_path, key, fp16)
    assert calibration.cached(tmp_path, key) is None
    extra = _figures()
    extra.load_s["torch-fp16"] = 0.1
    calibration.save(tmp_path, key, extra)
    assert calibration.cached(tmp_path, key) is None
    calibration.save(tmp_path, _key(), _figures())  # the key lists no bf16
    assert calibration.cached(tmp_path, _key()) is None


def test_the_lookahead_of_extreme_figures_is_capped() -> None:
    measured = _figures()
    measured.load_s["torch-bf16"] = 3600.0
    measured.tokens_per_s["onnx-fp32"] = measured.tokens_per_s["torch-bf16"] * (1 - 1e-12)
    assert calibration.lookahead(measured) == calibration.MAX_LOOKAHEAD


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
    ident = cpu_identity()
    assert ident["cpu"] and ident["arch"]
    assert int(ident["threads"]) >= 1


# -- the choice for one run: load time included --------------------------------

PASSED = {"mean_cosine": 1.0, "top10_agreement": 1.0, "passed": True}


def _figures() -> Choice:
    """What a measurement recorded on an AMD EPYC with avx512_bf16 (2 cores)."""
    names = ("torch-fp32", "torch-bf16", "onnx-fp32")
    return Choice(
        "torch",
        "bf16",
        "fastest passing the quality gate",
        chunks_per_s={"torch-fp32": 43.2, "torch-bf16": 91.1, "onnx-fp32": 52.6},
        gate={name: dict(PASSED) for name in names},
        source="cache",
        load_s={"torch-fp32": 6.94, "torch-bf16": 6.96, "onnx-fp32": 0.17},
        tokens_per_s={"torch-fp32": 4355.0, "torch-bf16": 9510.0, "onnx-fp32": 4486.0},
    )


def test_a_small_run_takes_the_export_and_a_large_one_the_fastest() -> None:
    measured = _figures()
    small = calibration.for_run(measured, 12, 1_700)  # a 10-file edit
    assert (small.name, small.texts) == ("onnx-fp32", 12)
    assert small.expected_s == {
        "onnx-fp32": round(0.17 + 1_700 / 4486, 2),
        "torch-bf16": round(6.96 + 1_700 / 9510, 2),
        "torch-fp32": round(6.94 + 1_700 / 4355, 2),
    }
    assert small.reason.startswith("first to finish 12 texts of 1,700 tokens")
    assert small.reason.index("onnx-fp32") < small.reason.index("torch-bf16")
    large = calibration.for_run(measured, 5_000, 700_000)  # a cold backfill
    assert large.name == "torch-bf16" and large.texts == 5_000
    assert measured.name == "torch-bf16" and measured.texts is None  # unchanged


def test_the_lookahead_is_where_the_fastest_starts_to_win() -> None:
    measured = _figures()
    border = calibration.lookahead(measured)
    # 6.79 s of load saved against 1/4486 - 1/9510 s lost on each token
    assert border == int(np.ceil((6.96 - 0.17) / (1 / 4486 - 1 / 9510)))
    assert calibration.for_run(measured, 1, border - 100).name == "onnx-fp32"
    assert calibration.for_run(measured, 1, border + 100).name == "torch-bf16"


def test_what_this_process_loaded_already_costs_no_load() -> None:
    ready = ["torch-fp32", "torch-bf16"]  # a first run measured just now, in torch
    choice = calibration.for_run(_figures(), 12, 1_700, ready)
    assert choice.name == "torch-bf16"
    assert choice.expected_s["torch-bf16"] == round(1_700 / 9510, 2)


def test_without_load_figures_the_fastest_stands() -> None:
    old = Choice("torch", "bf16", "fastest", chunks_per_s={"torch-bf16": 91.1, "onnx-fp32": 52.6})
    assert calibration.for_run(old, 12, 1_700) is old
    assert calibration.lookahead(old) == 0


def test_a_candidate_that_failed_the_gate_is_not_taken_for_its_quick_load() -> None:
    measured = _figures()
    measured.gate["onnx-fp32"] = {"mean_cosine": 0.9, "top10_agreement": 0.7, "passed": False}
    assert calibration.for_run(measured, 12, 1_700).name == "torch-bf16"
    # torch-fp32 loads 0.02 s sooner: worth it for 161 tokens at most
    assert calibration.lookahead(measured) == 161
    measured.load_s["torch-fp32"] = measured.load_s["torch-bf16"]
    assert calibration.lookahead(measured) == 0  # nothing loads faster that may be used


def test_a_quicker_load_at_no_loss_of_speed_is_counted_up_to_the_cap() -> None:
    measured = _figures()
    measured.tokens_per_s["onnx-fp32"] = measured.tokens_per_s["torch-bf16"]
    assert calibration.lookahead(measured) == calibration.MAX_LOOKAHEAD
    assert calibration.for_run(measured, 10_000, 2_000_000).name == "onnx-fp32"


def test_a_measurement_records_load_times_and_speed_on_long_texts(work: FakeTime) -> None:
    ref = _unit(48, 6)
    choice = calibration.measure(
        {"torch-fp32": _runner(ref, 0.04, work), "onnx-fp32": _runner(ref, 0.02, work)},
        {"torch-fp32": 5.0, "onnx-fp32": 0.1},
        long_tokens=4_096,
    )
    assert choice.load_s["torch-fp32"] >= 5.0 and 0.1 <= choice.load_s["onnx-fp32"] < 1.0
    # LONG_TEXTS are 16 texts: a third of TEXTS' 48 at these runners' speed
    assert choice.tokens_per_s["onnx-fp32"] > choice.tokens_per_s["torch-fp32"] > 0
    assert 4_096 / choice.tokens_per_s["torch-fp32"] == pytest.approx(0.04 / 3, rel=0.5)
    again = Choice(**{k: v for k, v in choice.as_dict().items() if k != "name"})
    assert again.load_s == choice.load_s  # what the cache keeps


def test_every_interchangeable_backend_is_a_candidate_and_only_those() -> None:
    names = set()
    for device in ("cpu", "cuda"):
        names |= set(calibration.candidates(device, "auto", "auto", native_bf16=True, onnx=True))
    assert names == set(calibration.INTERCHANGEABLE)


# -- vectors of different backends in one version ---------------------------------

QUESTIONS = [
    "how do I install mdindex",
    "which backend embeds fastest on my CPU",
    "run the daemon as a systemd service",
    "search from an AI assistant over MCP",
    "what happens when a file is renamed",
    "how are point IDs derived",
    "build a new version when settings change",
    "links to a note that does not exist",
    "filter search results by tag",
    "use an embedding server on a GPU",
    "how much memory does the daemon use",
    "what does verify repair",
    "exit codes of backfill",
    "chunking strategies and token limits",
    "evaluate retrieval on my own questions",
    "hybrid search with sparse vectors",
    "what is refused when a root looks unmounted",
    "where is the ONNX export cached",
    "status shows files that failed",
    "Ray distributed backfill",
]


@pytest.mark.slow
@pytest.mark.model
def test_an_index_built_by_two_backends_answers_as_one(
    tmp_path: Path, onnx_cache: Path, real_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the documents embedded by the ONNX export, the rest by torch in bf16
    (emulated where the CPU has no native bf16): the same points as an index
    torch fp32 built alone, and the same top-10 for each question within the
    gate's agreement."""
    from mdindex.config import DEFAULT_MODEL
    from mdindex.embedding import loading
    from mdindex.embedding.embedder import ModelEmbedder
    from mdindex.embedding.model import resolve_model
    from tests.conftest import REPO, run_backfill, settings_for, stored_points

    monkeypatch.setattr(loading, "native_bf16", lambda: True)
    info = resolve_model(DEFAULT_MODEL)
    pages = sorted((REPO / "docs").glob("*.md"))
    root = tmp_path / "docs"
    root.mkdir()
    half = len(pages) // 2
    for page in pages[:half]:
        shutil.copyfile(page, root / page.name)
    mixed = settings_for(tmp_path, [root], state_dir=str(tmp_path / "mixed"))
    onnx = ModelEmbedder(info, backend="onnx", cache_dir=onnx_cache)
    first = run_backfill(mixed, onnx)
    assert onnx.choice.name == "onnx-fp32"
    for page in pages[half:]:
        shutil.copyfile(page, root / page.name)
    bf16 = ModelEmbedder(info, device="cpu", precision="bf16", backend="torch")
    second = run_backfill(mixed, bf16)
    assert bf16.choice.name == "torch-bf16"
    assert first["chunks_embedded"] > 20 and second["chunks_embedded"] > 20
    assert second["files_changed"] == len(pages) - half  # the export's vectors stand

    single = settings_for(tmp_path, [root], state_dir=str(tmp_path / "single"))
    run_backfill(single, real_embedder)
    got, want = stored_points(mixed, vectors=True), stored_points(single, vectors=True)
    assert sorted(got) == sorted(want)  # one fingerprint, the same point IDs
    ids = sorted(want)
    a = np.array([got[i]["_vector"] for i in ids], dtype=np.float32)
    b = np.array([want[i]["_vector"] for i in ids], dtype=np.float32)
    assert float(np.mean(np.sum(a * b, axis=1))) >= calibration.GATE_COSINE
    queries = real_embedder.embed(QUESTIONS)  # queries are embedded in fp32 either way
    overlap = [
        len(set(np.argsort(-(a @ q))[:10]) & set(np.argsort(-(b @ q))[:10])) / 10 for q in queries
    ]
    assert float(np.mean(overlap)) >= calibration.GATE_AGREEMENT, overlap


def test_the_fastest_is_the_fastest_on_chunk_sized_texts(work: FakeTime) -> None:
    """A per-text cost wins on short texts and loses on long ones: the choice
    follows what runs embed (LONG_TEXTS), not the short calibration texts."""
    ref = _unit(48, 7)

    def costing(per_text: float, per_char: float) -> calibration.EmbedFn:
        def run(texts: Sequence[str]) -> np.ndarray:
            work.sleep(per_text * len(texts) + per_char * sum(len(t) for t in texts))
            return ref[: len(texts)] if len(texts) <= 48 else np.resize(ref, (len(texts), 384))

        return run

    choice = calibration.measure(
        {
            "torch-fp32": costing(0.005, 0.0),  # a fixed cost a text
            "onnx-fp32": costing(0.0002, 0.000004),  # a cost a character
        },
        long_tokens=16 * 256,
    )
    assert choice.chunks_per_s["onnx-fp32"] > choice.chunks_per_s["torch-fp32"]
    assert choice.tokens_per_s["torch-fp32"] > choice.tokens_per_s["onnx-fp32"]
    assert choice.name == "torch-fp32"
    assert choice.reason.startswith("fastest passing the quality gate: torch-fp32 ")
    assert "tokens/s" in choice.reason
