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

The gate is the one ``bench/backends.py`` applies: mean cosine at least
0.995 against fp32's vectors and top-10 neighbour agreement at least 0.97
(each text ranks the others).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mdindex.jsonfile import write_json

log = logging.getLogger(__name__)

GATE_COSINE = 0.995
GATE_AGREEMENT = 0.97
REFERENCE = "torch-fp32"
ROUNDS = 2  # timed passes per candidate, in turns; the faster of each counts
WARM_UP = 6  # texts each candidate embeds first (loading, first shapes), untimed

EmbedFn = Callable[[Sequence[str]], NDArray[np.float32]]

_PASSAGES = (
    "Ownership is Rust's most unusual feature: each value has a single owner, and the "
    "value is dropped when the owner goes out of scope. Borrowing lets code use a value "
    "without taking ownership, through references that the compiler checks.",
    "To bake sourdough bread, feed the starter the night before, mix flour and water "
    "and rest the dough for an hour before adding salt. Fold it every half hour, shape "
    "it, and let it rise slowly in the refrigerator overnight.",
    "Hugo builds a static site from content files, templates and configuration. Each "
    "page's front matter sets its title, date, draft status and taxonomies, and the "
    "template lookup order decides which layout renders it.",
    "The James Webb Space Telescope observes in the infrared, which lets it see through "
    "dust clouds where stars form and detect light from galaxies that formed a few "
    "hundred million years after the Big Bang.",
    "Tomatoes need at least six hours of direct sun, deep watering twice a week and a "
    "stake or cage once the plants pass knee height. Pinch the side shoots on vining "
    "varieties to keep the energy in the fruit.",
    "A mortgage's annual percentage rate includes the interest rate and the fees, so "
    "two loans with the same rate can cost different amounts. Paying extra principal "
    "early shortens the term more than paying it late.",
    "Error handling in Rust uses the Result type for recoverable errors and panics for "
    "bugs. The question mark operator returns the error to the caller, converting it "
    "with the From trait when the types differ.",
    "The French Revolution began in 1789 with the storming of the Bastille. Within a "
    "few years the monarchy was abolished, the king was executed, and the Terror sent "
    "thousands to the guillotine.",
    "Shortcodes are snippets inside content files that Hugo replaces with a template's "
    "output, such as an embedded video or a figure with a caption. They take positional "
    "or named parameters.",
    "Regular aerobic exercise lowers resting heart rate and blood pressure. Guidelines "
    "suggest 150 minutes a week of moderate activity, such as brisk walking, plus two "
    "days of muscle strengthening.",
    "A hash map stores key and value pairs and finds a value by hashing its key. In "
    "Rust, HashMap takes ownership of owned keys such as String, and the entry API "
    "inserts a value only when the key is missing.",
    "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen. The "
    "light reactions happen in the thylakoid membranes and the Calvin cycle in the "
    "stroma of the chloroplast.",
    "To reset the router, hold the button on the back for ten seconds until the lights "
    "blink, then wait two minutes and connect to the default network printed on the "
    "label under the device.",
    "Threads in Rust share data through Arc for shared ownership and Mutex for mutual "
    "exclusion; channels move values from one thread to another, and the type system "
    "rules out data races at compile time.",
    "The menu section of a Hugo site lists entries with a name, a weight for ordering "
    "and a URL or page reference; nested menus use a parent identifier.",
    "Coffee extraction depends on grind size, water temperature and contact time. Too "
    "fine a grind or too long a brew gives bitter coffee; too coarse gives sour, thin "
    "coffee.",
)


def _texts() -> list[str]:
    """48 texts: each passage (about 50 tokens), its first sentence (query-sized),
    and it joined with the next (chunk-sized, about 100 tokens)."""
    out: list[str] = []
    for i, passage in enumerate(_PASSAGES):
        following = _PASSAGES[(i + 1) % len(_PASSAGES)]
        out += [passage, passage.split(". ")[0], f"{passage} {following}"]
    return out


TEXTS = _texts()


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
    for name in ("torch-fp32", "torch-bf16", "torch-fp16", "onnx-fp32"):
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


def threads() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_identity() -> dict[str, str]:
    """The CPU model and a hash of its flags; /proc/cpuinfo may be hidden (the
    systemd unit's ProcSubset=pid), then what platform tells."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.machine()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    return {
        "cpu": model,
        "flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "flags": " ".join(f for f in flags.split() if f.startswith(("amx", "avx512_bf16", "avx2"))),
        "threads": str(
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ),
        "arch": platform.machine(),
    }


def version(package: str) -> str:
    """An installed package's version, or "none"."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


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
    }


def _key_file(cache_dir: Path, key: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir / "calibration" / f"{digest}.json"


def cached(cache_dir: Path, key: dict[str, str]) -> Choice | None:
    """The choice measured earlier under exactly this key, or None."""
    try:
        data = json.loads(_key_file(cache_dir, key).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        choice = Choice(**{k: v for k, v in data["choice"].items() if k != "name"})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable or from another version: measure again
    choice.source = "cache"
    return choice


def recorded(cache_dir: Path, model_sha256: str) -> Choice | None:
    """The newest choice measured for this model on this CPU, whatever the other
    parts of its key (for a status that loads nothing)."""
    me = cpu_identity()
    best: tuple[str, Choice] | None = None
    for path in sorted((cache_dir / "calibration").glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            key = data["key"]
            if key.get("model_sha256") != model_sha256 or any(
                key.get(k) != v for k, v in me.items()
            ):
                continue
            choice = Choice(**{k: v for k, v in data["choice"].items() if k != "name"})
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


def measure(runners: dict[str, EmbedFn], texts: Sequence[str] = TEXTS) -> Choice:
    """Time each runner on ``texts`` in turns (after one warm-up pass each) and pick
    the fastest that passes the gate; ``REFERENCE`` must be among them."""
    if REFERENCE not in runners:
        raise ValueError(f"calibration needs {REFERENCE} as the reference")
    for run in runners.values():
        run(texts[:WARM_UP])
    vectors: dict[str, NDArray[np.float32]] = {}
    best: dict[str, float] = dict.fromkeys(runners, float("inf"))
    for _ in range(ROUNDS):
        for name, run in runners.items():
            start = time.perf_counter()
            vectors[name] = run(texts)
            best[name] = min(best[name], time.perf_counter() - start)
    speed = {name: round(len(texts) / secs, 1) for name, secs in best.items()}
    gates = {name: gate(vectors[REFERENCE], v) for name, v in vectors.items()}
    passing = [name for name in runners if gates[name]["passed"]]
    chosen = max(passing, key=lambda name: speed[name])
    failed = [n for n in runners if n not in passing]
    reason = (
        "fastest passing the quality gate: "
        + ", ".join(f"{n} {speed[n]} chunks/s" for n in sorted(speed, key=lambda n: -speed[n]))
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
    )
