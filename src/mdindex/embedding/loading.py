"""Loading the model the way it will compute: the settings' one candidate, the
choice cached for this machine, or a measurement (``calibration``); the
cached ONNX export, without torch, for a process that only embeds queries and
for a one-shot run whose texts it embeds sooner than torch would load."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from mdindex.embedding import calibration, onnx_export
from mdindex.embedding.engines import OnnxRunner, TorchEngine, encode, give_back_heap, run_sorted
from mdindex.embedding.model import (
    CPU_BATCH,
    CUDA_BATCH,
    ModelInfo,
    Wanted,
    direct_inputs,
    gpu_present,
    load_sentence_transformer,
    load_tokenizer,
    native_bf16,
    pick_device,
    special_wrap,
    weights_hash,
)
from mdindex.embedding.samples import LONG_TEXTS
from mdindex.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from mdindex.embedding.engines import Engine

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """The model, ready to compute: the choice, and what the embedder runs."""

    choice: calibration.Choice
    device: str
    batch_size: int
    engine: Engine | None  # None: through sentence-transformers' encode (any other model)
    tokenizer: Tokenizer | None
    wrap: tuple[list[int], list[int]] | None  # the special tokens around one text
    features: tuple[str, ...]
    model: Any = None  # the sentence-transformers model, while an engine needs it


def load(info: ModelInfo, want: Wanted, run: tuple[int, int] | None = None) -> Loaded:
    """Load the model as it will compute (see the module docstring). ``run``:
    the texts a one-shot run will embed and their tokens (None: a daemon or a
    large run, which want the fastest)."""
    found = _query_export(info, want)
    if found is not None:
        return found
    # The cached measurement, read without torch: the fastest for a daemon or a
    # large run, the first to finish for a one-shot run's count. Either way,
    # when that is the export, torch is never imported.
    planned = measured = cached_measurement(info, want)
    if measured is not None and run is not None:
        planned = calibration.for_run(measured, *run)
    if planned is not None and planned.backend == "onnx":
        export = onnx_export.find_export(info, want.cache_dir) if want.cache_dir else None
        assert export is not None  # cached_measurement found it
        on_export = _on_export(info, want, export, planned)
        if on_export is not None:
            _log_choice(planned, "direct forward")
            return on_export
        planned = None  # the export is gone: torch, and a new export
    started = time.perf_counter()
    device = pick_device(want.device)
    batch_size = want.batch_size or (CUDA_BATCH if device.startswith("cuda") else CPU_BATCH)
    model = load_sentence_transformer(info, device)
    tokenizer, features = direct_inputs(model, info)
    torch_load_s = time.perf_counter() - started  # imports included: the first in a process
    wrap = special_wrap(tokenizer) if tokenizer is not None else None
    loaded = Loaded(
        calibration.Choice("torch", "fp32", ""), device, batch_size, None, tokenizer, wrap, features
    )
    if planned is not None:
        loaded.choice = planned
    else:
        loaded.choice = _choose(info, want, loaded, model, torch_load_s)
        if run is not None and loaded.choice.load_s:  # measured just now: torch is loaded
            ready = [name for name in loaded.choice.load_s if name.startswith("torch")]
            loaded.choice = calibration.for_run(loaded.choice, *run, ready)
    if loaded.choice.precision == "fp16":
        model.half()
    if tokenizer is not None and loaded.choice.backend == "onnx":
        assert want.cache_dir is not None
        export = onnx_export.find_export(info, want.cache_dir)
        assert export is not None  # calibration exported it
        loaded.engine = _open_export(export)
        if loaded.engine is not None:
            loaded.features = export.inputs  # torch's copy is let go (about 90 MB)
        else:
            loaded.choice = calibration.Choice("torch", "fp32", "the ONNX export failed to load")
    if tokenizer is None:
        loaded.model = model  # through encode
    elif loaded.engine is None:
        loaded.engine = TorchEngine(model, device, loaded.choice.precision, features)
        loaded.model = model
    _log_choice(loaded.choice, "direct forward" if tokenizer is not None else "encode")
    return loaded


def _log_choice(choice: calibration.Choice, how: str) -> None:
    log.info(
        "embedding with %s (%s; %s): %s",
        choice.name,
        how,
        {"cache": f"measured {choice.measured_at}, cached"}.get(choice.source, choice.source),
        choice.reason,
    )


def _on_export(
    info: ModelInfo, want: Wanted, export: onnx_export.Export, choice: calibration.Choice
) -> Loaded | None:
    """The model as its ONNX export on onnxruntime, with tokenizers: no torch.
    None when the export cannot be loaded."""
    runner = _open_export(export)
    if runner is None:
        return None
    tokenizer = load_tokenizer(info)
    return Loaded(
        choice,
        "cpu",
        want.batch_size or CPU_BATCH,
        runner,
        tokenizer,
        special_wrap(tokenizer),
        export.inputs,
    )


def _open_export(export: onnx_export.Export) -> OnnxRunner | None:
    """An onnxruntime session over the export; None, with a warning, when the
    file is damaged (it is removed, and made again at the next torch load)."""
    try:
        return onnx_export.open_export(export)
    except Exception as exc:  # onnxruntime raises its own types (InvalidProtobuf, Fail)
        log.warning(
            "the ONNX export in %s cannot be loaded (%s); using torch, and exporting again",
            export.path.parent,
            " ".join(str(exc).split())[:200],
        )
        onnx_export.discard(export)
        return None


def _query_export(info: ModelInfo, want: Wanted) -> Loaded | None:
    """The cached ONNX export, without torch, when the settings allow only it
    (``backend = onnx``) or the process only embeds queries; None otherwise."""
    onnx_only = want.backend == "onnx" or want.queries_only
    if not (
        onnx_only
        and want.cache_dir is not None
        and want.device in ("auto", "cpu")
        and want.backend in ("auto", "onnx")
        and want.precision in ("auto", "fp32")
    ):
        return None
    found = onnx_export.find_export(info, want.cache_dir)
    if found is None:
        return None
    why = (
        "backend = onnx: the cached ONNX export, torch not loaded"
        if want.backend == "onnx"
        else "queries of a short-lived process: the cached ONNX export"
    )
    choice = calibration.Choice(
        "onnx", "fp32", why, source="setting" if not want.queries_only else "query"
    )
    # a search prints its hits, not this line, unless asked (DEBUG)
    (log.debug if want.queries_only else log.info)(
        "embedding with the ONNX export (%s): %s", found.path.parent, why
    )
    return _on_export(info, want, found, choice)  # None: torch, below


def cached_measurement(info: ModelInfo, want: Wanted) -> calibration.Choice | None:
    """The measurement cached for these settings on this machine, found without
    importing torch; None when there is none, or when the ONNX export is not a
    candidate (the model must load in torch whatever the run)."""
    cache_dir = want.cache_dir
    if (
        cache_dir is None
        or want.device not in ("auto", "cpu")
        or (want.device == "auto" and gpu_present())  # only torch can tell if it is usable
        or not _onnxruntime_installed()
        or onnx_export.find_export(info, cache_dir) is None
    ):
        return None
    sha = weights_sha(info, cache_dir)
    for bf16 in (True, False):  # whether oneDNN runs bf16 here is torch's to say
        names = calibration.candidates(
            "cpu", want.precision, want.backend, native_bf16=bf16, onnx=True
        )
        if "onnx-fp32" not in names or len(names) < 2:
            continue
        key = calibration.machine_key(
            model_sha256=sha, device="cpu", batch_size=want.batch_size or CPU_BATCH, names=names
        )
        found = calibration.cached(cache_dir, key)
        if found is not None and found.name in names:
            return found
    return None


def _choose(
    info: ModelInfo, want: Wanted, loaded: Loaded, model: Any, torch_load_s: float
) -> calibration.Choice:
    """The settings' one candidate, the cached choice, or a measurement."""
    cache_dir, device, tokenizer = want.cache_dir, loaded.device, loaded.tokenizer
    onnx_ok = (
        tokenizer is not None
        and cache_dir is not None
        and not onnx_export.was_refused(info, cache_dir)
        and _onnxruntime_installed()
    )
    bf16 = device == "cpu" and native_bf16()
    names = calibration.candidates(
        device, want.precision, want.backend, native_bf16=bf16, onnx=onnx_ok
    )
    if tokenizer is None:  # encode: torch only
        names = [n for n in names if n.startswith("torch")] or ["torch-fp32"]
    if not names:
        raise ConfigError(
            f"backend {want.backend!r} with precision {want.precision!r} cannot run on {device}"
        )
    if (
        "onnx-fp32" in names
        and cache_dir is not None
        and onnx_export.find_export(info, cache_dir) is None
        and onnx_export.export(info, cache_dir, model, loaded.features) is None
    ):
        names.remove("onnx-fp32")
    if len(names) == 1 or cache_dir is None:
        name = (
            names[0]
            if len(names) == 1
            else ("torch-fp16" if "torch-fp16" in names else "torch-fp32")
        )
        backend, precision = name.split("-")
        why = (
            "the only candidate the settings allow"
            if len(names) == 1
            else "no cache_dir to keep a measurement"
        )
        return calibration.Choice(backend, precision, why)
    gpu = ""
    if device.startswith("cuda"):
        import torch

        gpu = torch.cuda.get_device_name(device)
    key = calibration.machine_key(
        model_sha256=weights_sha(info, cache_dir),
        device=device,
        batch_size=loaded.batch_size,
        names=names,
        gpu=gpu,
    )
    found = calibration.cached(cache_dir, key)
    if found is not None and found.name in names:
        return found
    log.info("measuring %s on this machine (once; cached in %s)", ", ".join(names), cache_dir)
    runners, load_s = {}, {}
    for name in names:
        started = time.perf_counter()
        runners[name] = _runner(info, want, name, loaded, model)
        load_s[name] = time.perf_counter() - started
        if name.startswith("torch"):
            load_s[name] += torch_load_s
    long_tokens = 0
    if loaded.tokenizer is not None:  # what the runners feed: cut at the limit, specials in
        long_tokens = sum(len(e.ids) for e in loaded.tokenizer.encode_batch(LONG_TEXTS))
    choice = calibration.measure(runners, load_s, long_tokens)
    calibration.save(cache_dir, key, choice)
    del runners  # the candidates not chosen, and what the export left on the heap
    give_back_heap()
    return choice


def _runner(
    info: ModelInfo, want: Wanted, name: str, loaded: Loaded, model: Any
) -> Callable[[Sequence[str]], NDArray[np.float32]]:
    """Embeds texts with candidate ``name``, for calibration: as the embedder will."""
    backend, precision = name.split("-")
    tokenizer, batch_size = loaded.tokenizer, loaded.batch_size
    if tokenizer is None:
        return lambda texts: encode(model, precision, texts, batch_size)
    engine: Engine
    if backend == "onnx":
        assert want.cache_dir is not None
        found = onnx_export.find_export(info, want.cache_dir)
        assert found is not None
        engine = onnx_export.open_export(found)
        load_tokenizer(info)  # as a run on the export alone does: its load time counts it
    else:
        m = model
        if precision == "fp16":
            import copy

            m = copy.deepcopy(model).half()
        engine = TorchEngine(m, loaded.device, precision, loaded.features)
    return lambda texts: run_sorted(
        engine, [e.ids for e in tokenizer.encode_batch(list(texts))], batch_size
    )


def _onnxruntime_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


_WEIGHTS_SHA: dict[tuple[str, str], str] = {}


def weights_sha(info: ModelInfo, cache_dir: Path) -> str:
    """The model's weights hash, from its export's record when there is one (no
    second read of the weights), else computed once per process."""
    found = onnx_export.find_export(info, cache_dir)
    if found is not None and found.weights_sha256:
        return found.weights_sha256
    key = (str(info.path), onnx_export.export_key(info))
    if key not in _WEIGHTS_SHA:
        _WEIGHTS_SHA[key] = weights_hash(info)
    return _WEIGHTS_SHA[key]
