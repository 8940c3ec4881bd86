"""Which backend and precision embed fastest on this machine: measured once, cached.

No rule read off CPU flags holds across machines of one kind: bf16 autocast
ran at 125 chunks/s on a Xeon with AMX and at 28 (0.69x fp32) on one with
``avx512_bf16`` but no AMX, though oneDNN reports native bf16 on both. So on
the first model load each candidate embeds a fixed batch of texts
(``TEXTS``: 48 texts of 5 to 110 tokens) in turns, the fastest that
passes the quality gate against torch fp32 is chosen, and the choice is
cached under ``cache_dir/calibration/`` keyed by what decides speed: the CPU
model and flags, the thread count, the device, the library versions, the
model's weights and the batch size. Another machine, another torch or
another model measures again; an explicit setting skips the measurement.

Each candidate's load time (from nothing loaded to its first vector) and its
speed in tokens on chunk-sized texts are recorded too. A daemon or a large
run takes the fastest (``measure``); a one-shot run that knows what it will
embed takes the candidate that finishes first, load included (``for_run``):
for a handful of texts that is the ONNX export, ready in a fraction of a
second where torch and sentence-transformers take 5 to 10. The run's size
is counted in tokens, not texts or characters: the corpus's chunks hold 3.0
characters a token and the calibration texts 4.6, and a text of 256 tokens
costs far more than one of 20. The speed is taken from one pass over
``LONG_TEXTS`` (16 texts at the 256-token limit), timed with its first-shape
costs, as a short run meets them.

The gate is the one ``bench/backends.py`` applies: mean cosine at least
0.995 against fp32's vectors and top-10 neighbour agreement at least 0.97
(each text ranks the others). Every candidate that passes it may write into
one version of the index (``INTERCHANGEABLE``): vector keys and the
fingerprint do not name the backend, so vectors one run embedded with the
ONNX export and the next with torch in bf16 are reused and searched as one
(tests/embedding/test_calibration.py builds such an index). An embedding
server is another identity (``server:<model>``) and builds its own version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mdindex.embedding.machine import cpu_identity, version
from mdindex.embedding.samples import LONG_TEXTS, TEXTS
from mdindex.jsonfile import load_json, write_json
from mdindex.outside import stamp

log = logging.getLogger(__name__)

GATE_COSINE = 0.995
GATE_AGREEMENT = 0.97
REFERENCE = "torch-fp32"
# The backends and precisions whose vectors may share a version, once they pass
# the gate on this machine; int8 is not among them (mean cosine 0.94, agreement
# 0.78 in bench/backends.py).
INTERCHANGEABLE = ("torch-fp32", "torch-bf16", "torch-fp16", "onnx-fp32")
# In the key: a cache written before load times were recorded is measured again.
FORMAT = "3"  # 2: load times, and speeds in tokens; 3: the fastest by tokens
# A one-shot run holds back at most this many tokens of texts to embed while
# it counts (about 10,000 chunks, their plans about 50 MB with token ids);
# past it, it is a large run.
MAX_LOOKAHEAD = 2_500_000
ROUNDS = 2  # timed passes per candidate, in turns; the faster of each counts
WARM_UP = 6  # texts each candidate embeds first (loading, first shapes), untimed

EmbedFn = Callable[[Sequence[str]], NDArray[np.float32]]


@dataclass
class Choice:
    """How this embedder computes, and why."""

    backend: str  # torch or onnx
    precision: str  # fp32, bf16 or fp16
    reason: str
    chunks_per_s: dict[str, float] = field(default_factory=dict)
    gate: dict[str, dict[str, float | bool]] = field(default_factory=dict)
    source: str = "setting"  # setting, measured, cache or query
    measured_at: str = ""
    # seconds from nothing loaded to each candidate's first vector
    load_s: dict[str, float] = field(default_factory=dict)
    tokens_per_s: dict[str, float] = field(default_factory=dict)  # on LONG_TEXTS
    texts: int | None = None  # the run's texts it was chosen for; None: by speed alone
    expected_s: dict[str, float] = field(default_factory=dict)  # each candidate, this run

    @property
    def name(self) -> str:
        return f"{self.backend}-{self.precision}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"name": self.name}


def candidates(
    device: str, precision: str, backend: str, *, native_bf16: bool, onnx: bool
) -> list[str]:
    """The names to measure: ``backend-precision`` allowed by the settings and the
    machine. ONNX Runtime runs here on the CPU only (the CPU wheel)."""
    names = []
    for name in INTERCHANGEABLE:
        b, p = name.split("-")
        if backend not in ("auto", b) or precision not in ("auto", p):
            continue
        if p == "fp16" and not device.startswith("cuda"):
            continue  # fp16 on a CPU is emulated: never faster
        if p == "bf16" and (device != "cpu" or not native_bf16):
            continue  # bf16 here is CPU autocast
        if b == "onnx" and (device != "cpu" or not onnx):
            continue
        names.append(name)
    return names


def machine_key(
    *, model_sha256: str, device: str, batch_size: int, names: Sequence[str], gpu: str = ""
) -> dict[str, str]:
    """Everything the fastest choice depends on."""
    return cpu_identity() | {
        "device": device,
        "gpu": gpu,
        "torch": version("torch"),
        "onnxruntime": version("onnxruntime"),
        "sentence-transformers": version("sentence-transformers"),
        "transformers": version("transformers"),
        "model_sha256": model_sha256,
        "batch_size": str(batch_size),
        "candidates": ",".join(names),
        "format": FORMAT,
    }


def _key_file(cache_dir: Path, key: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir / "calibration" / f"{digest}.json"


def cached(cache_dir: Path, key: dict[str, str]) -> Choice | None:
    """The choice measured earlier under exactly this key, or None."""
    try:
        data = load_json(_key_file(cache_dir, key))  # bounded: '[' * 100000 is damage too
        if data.get("key") != key:
            return None
        choice = _read_choice(data["choice"], key["candidates"].split(","))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable, damaged or from another version: measure again
    choice.source = "cache"
    return choice


# What a measurement can record: anything else is a damaged or hand-made file.
# (A speed of one token a second would already be 100 times too slow to use.)
BOUNDS = {"chunks_per_s": (0.01, 1e7), "tokens_per_s": (1.0, 1e9), "load_s": (0.0, 3600.0)}


def _read_choice(data: dict[str, Any], names: Sequence[str] = INTERCHANGEABLE) -> Choice:
    """A cached choice, checked: a name that is not among ``names`` (the key's
    candidates), or a figure that is no number a measurement records, raises
    ValueError (the file is measured again)."""
    choice = Choice(**{k: v for k, v in data.items() if k != "name"})
    if choice.name not in names or not all(
        isinstance(text, str) for text in (choice.reason, choice.source, choice.measured_at)
    ):
        raise ValueError(f"no candidate: {choice.name!r}")
    stamp(choice.measured_at, "measured_at")
    if choice.texts is not None or choice.expected_s:
        raise ValueError("a run's choice, not a measurement")
    for field_name, (low, high) in BOUNDS.items():
        figures = getattr(choice, field_name)
        if not isinstance(figures, dict) or not all(
            name in names
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and low <= value <= high
            for name, value in figures.items()
        ):
            raise ValueError(f"{field_name}: not what a measurement records")
    if not isinstance(choice.gate, dict) or not all(
        isinstance(g, dict) and g.get("passed") in (True, False) for g in choice.gate.values()
    ):
        raise ValueError("a gate that is no verdict")
    return choice


def recorded(cache_dir: Path, model_sha256: str) -> Choice | None:
    """The newest choice measured for this model on this CPU, whatever the other
    parts of its key (for a status that loads nothing)."""
    me = cpu_identity()
    best: tuple[str, Choice] | None = None
    for path in sorted((cache_dir / "calibration").glob("*.json")):
        try:
            data = load_json(path)
            key = data["key"]
            if key.get("model_sha256") != model_sha256 or any(
                key.get(k) != v for k, v in me.items()
            ):
                continue
            choice = _read_choice(data["choice"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if best is None or choice.measured_at > best[0]:
            best = (choice.measured_at, choice)
    return best[1] if best else None


def save(cache_dir: Path, key: dict[str, str], choice: Choice) -> None:
    path = _key_file(cache_dir, key)
    try:
        write_json(path, {"key": key, "choice": choice.as_dict()})
    except OSError as exc:  # a read-only cache only costs a measurement next time
        log.warning("cannot cache the backend choice in %s: %s", path.parent, exc)


def gate(
    reference: NDArray[np.float32], vectors: NDArray[np.float32], k: int = 10
) -> dict[str, float | bool]:
    """Mean cosine to the reference vectors, and how many of each text's top-k
    neighbours (among the others) stay the same."""
    cosine = float(np.mean(np.sum(reference * vectors, axis=1)))
    k = min(k, len(reference) - 1)

    def top(v: NDArray[np.float32]) -> NDArray[np.int64]:
        sims = v @ v.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1)[:, :k]

    ref_top, top_k = top(reference), top(vectors)
    agreement = float(
        np.mean([len(set(a) & set(b)) / k for a, b in zip(ref_top, top_k, strict=True)])
    )
    passed = cosine >= GATE_COSINE and agreement >= GATE_AGREEMENT
    return {
        "mean_cosine": round(cosine, 6),
        "top10_agreement": round(agreement, 4),
        "passed": passed,
    }


def measure(
    runners: dict[str, EmbedFn],
    load_s: dict[str, float] | None = None,
    long_tokens: int = 0,
    texts: Sequence[str] = TEXTS,
) -> Choice:
    """Time each runner on ``texts`` in turns (after one warm-up pass each) and pick
    the fastest that passes the gate; ``REFERENCE`` must be among them.
    ``load_s``: each runner's time to build; its warm-up's cost beyond the
    steady speed is added, so ``Choice.load_s`` is the time to a first vector.
    ``long_tokens``: the tokens of ``LONG_TEXTS``, for each runner's speed on
    them (0: not measured, as for a model fed through ``encode``)."""
    if REFERENCE not in runners:
        raise ValueError(f"calibration needs {REFERENCE} as the reference")
    warm: dict[str, float] = {}
    for name, run in runners.items():
        start = time.perf_counter()
        run(texts[:WARM_UP])
        warm[name] = time.perf_counter() - start
    vectors: dict[str, NDArray[np.float32]] = {}
    best: dict[str, float] = dict.fromkeys(runners, float("inf"))
    for _ in range(ROUNDS):
        for name, run in runners.items():
            start = time.perf_counter()
            vectors[name] = run(texts)
            best[name] = min(best[name], time.perf_counter() - start)
    speed = {name: round(len(texts) / secs, 1) for name, secs in best.items()}
    loads = {
        name: round((load_s or {}).get(name, 0.0) + max(0.0, warm[name] - WARM_UP / speed[name]), 3)
        for name in runners
    }
    gates = {name: gate(vectors[REFERENCE], v) for name, v in vectors.items()}
    passing = [name for name in runners if gates[name]["passed"]]
    failed = [n for n in runners if n not in passing]
    tokens_per_s = long_speed(runners, long_tokens) if long_tokens else {}
    # The fastest on chunk-sized texts, where measured: what runs embed, and the
    # speed for_run weighs. On the short texts the order can differ (the ONNX
    # export led there by 41 to 17 chunks/s, while bf16 led 9,835 to 2,402
    # tokens/s on full chunks, under load on a 2-core CPU).
    by, unit = (tokens_per_s, "tokens/s") if tokens_per_s else (speed, "chunks/s")
    chosen = max(passing, key=lambda name: by[name])
    reason = (
        "fastest passing the quality gate: "
        + ", ".join(f"{n} {by[n]:,} {unit}" for n in sorted(by, key=lambda n: -by[n]))
        + (f"; failed the gate: {', '.join(failed)}" if failed else "")
    )
    backend, precision = chosen.split("-")
    return Choice(
        backend,
        precision,
        reason,
        chunks_per_s=speed,
        gate=gates,
        source="measured",
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        load_s=loads,
        tokens_per_s=tokens_per_s,
    )


def long_speed(runners: dict[str, EmbedFn], tokens: int) -> dict[str, float]:
    """Each runner's tokens per second over one pass of ``LONG_TEXTS``
    (``tokens`` of them, special tokens included): chunk-sized texts, with
    what their first batch costs, as a short run embeds them."""
    speed: dict[str, float] = {}
    for name, run in runners.items():
        start = time.perf_counter()
        run(LONG_TEXTS)
        speed[name] = round(tokens / (time.perf_counter() - start))
    return speed


def _passing(measured: Choice) -> list[str]:
    """The candidates with a speed, a load time and a passed gate."""
    return [
        name
        for name, speed in measured.tokens_per_s.items()
        if speed > 0 and name in measured.load_s and measured.gate.get(name, {}).get("passed")
    ]


def for_run(measured: Choice, texts: int, tokens: int, ready: Sequence[str] = ()) -> Choice:
    """The candidate that finishes a run of ``texts`` texts of ``tokens`` tokens
    first: its load time (none for those in ``ready``, loaded in this process
    already) plus the tokens at its speed. The fastest (``measured``) when
    the figures are missing."""
    passing = _passing(measured)
    if not passing:
        return measured
    load_s, speed = measured.load_s, measured.tokens_per_s
    expected = {
        name: round((0.0 if name in ready else load_s[name]) + tokens / speed[name], 2)
        for name in passing
    }
    best = min(passing, key=lambda name: (expected[name], name != measured.name))
    order = sorted(expected, key=lambda name: expected[name])
    reason = (
        f"first to finish {texts} text{'s' * (texts != 1)} of {tokens:,} tokens "
        "(load + tokens / speed): " + ", ".join(f"{name} {expected[name]} s" for name in order)
    )
    backend, precision = best.split("-")
    return replace(
        measured,
        backend=backend,
        precision=precision,
        reason=reason,
        texts=texts,
        expected_s=expected,
    )


def lookahead(measured: Choice) -> int:
    """How many tokens of texts a run must hold before the fastest candidate
    finishes first whatever follows: past them, a run is large. 0 when no
    other candidate loads faster (nothing to choose)."""
    passing = _passing(measured)
    if measured.name not in passing:
        return 0
    top_load, top_speed = measured.load_s[measured.name], measured.tokens_per_s[measured.name]
    count = 0
    for name in passing:
        saved = top_load - measured.load_s[name]  # seconds its quicker load saves
        lost = 1 / measured.tokens_per_s[name] - 1 / top_speed  # and each token costs more
        if saved > 0:
            count = max(count, MAX_LOOKAHEAD if lost <= 0 else math.ceil(min(saved / lost, 1e12)))
    return min(count, MAX_LOOKAHEAD)
