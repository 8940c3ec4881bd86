"""The engines that run the model: padded token ids and a mask in, unit vectors
out. ``TorchEngine`` runs the sentence-transformers model's forward (fp32, bf16
autocast on a CPU, fp16 on a GPU); ``OnnxRunner`` runs its ONNX export on
onnxruntime, with no torch at all."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Engine = Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.float32]]

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Batches are padded to a multiple of this many tokens. Every new (batch, width)
# shape makes oneDNN and onnxruntime allocate anew, and the heap kept the freed
# blocks: a cold backfill of the shared corpus grew from 1.0 to 1.7 GB of RSS
# while embedding. 16 leaves 16 widths up to the 256 limit; the masked padding
# changes no vector (mean cosine 0.999996 in bf16) and no speed (91 against 88
# chunks/s on 1,500 corpus chunks, AMD EPYC with avx512_bf16, 2 cores).
PAD_MULTIPLE = 16


def onnxruntime() -> Any:
    """The onnxruntime module, with its telemetry off. Since 1.32 it keeps a
    device id and an event store under ~/.cache/Microsoft from its first import
    and uploads them (its POSIX 1DS telemetry, on by default);
    ``ORT_DISABLE_TELEMETRY=1``, set before that import, makes none. A notes
    indexer sends nothing anywhere; a user's own value of it is kept."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    return ort


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim; None elsewhere (musl, macOS)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


def give_back_heap() -> bool:
    """Return the heap's free pages to the system (glibc's ``malloc_trim(0)``,
    5 to 7 ms a call on AMD EPYC); False where the C library cannot. What was
    freed stays in glibc's arenas otherwise: tensors freed after a batch (RSS
    after a cold backfill of the shared corpus, 1.47 GB without, 0.95 GB
    with), and what the engine held for a write or a closed shard (a cold
    backfill of 6,000 files, 313 MB of anonymous memory after closing its
    shard and 159 MB after this)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def pad(rows: list[list[int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Token id rows as one right-padded id matrix and its attention mask."""
    import numpy as np

    width = -(-max(len(r) for r in rows) // PAD_MULTIPLE) * PAD_MULTIPLE
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


class TorchEngine:
    """The model's forward in torch: padded ids and mask in, unit vectors out."""

    def __init__(self, model: Any, device: str, precision: str, features: tuple[str, ...]) -> None:
        self.model, self.device, self.precision, self.features = model, device, precision, features

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
        import numpy as np
        import torch

        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if self.precision == "bf16"
            else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            features = {
                k: torch.from_numpy(arrays[k]).to(self.device, non_blocking=True)
                for k in self.features
            }
            emb = self.model.forward(features)["sentence_embedding"].float()
            out = torch.nn.functional.normalize(emb, dim=1).cpu().numpy()
        return np.asarray(out, dtype=np.float32)


class OnnxRunner:
    """One onnxruntime session over an export: padded ids and mask in, unit
    vectors out. Graph optimisation at its highest level (fused attention and
    layer norm): 1.08x the basic level on the corpus's chunks here."""

    def __init__(self, path: Path | bytes, inputs: tuple[str, ...] = INPUTS) -> None:
        ort = onnxruntime()
        from mdindex.embedding.machine import threads

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # its warnings are about unused initialisers
        # Its default is the physical cores it detects: 1 on this 2-vCPU VM, at half
        # the speed of 2 threads (14 against 30 chunks/s).
        options.intra_op_num_threads = threads()
        # Its memory pattern is planned per input shape, and the first two runs of
        # each shape paid for it: 64 texts of 256 tokens took 4.2-4.8 s twice, then
        # 3.3 s; without, 3.9 s once, then 3.4 s (AMD EPYC, 2 cores). A short run
        # sees each shape once or twice.
        options.enable_mem_pattern = False
        self.inputs = inputs
        model = path if isinstance(path, bytes) else str(path)  # bytes: as hashed (open_export)
        self.session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def __call__(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
        import numpy as np

        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (out,) = self.session.run(None, {name: arrays[name] for name in self.inputs})
        return np.asarray(out, dtype=np.float32)


def run_sorted(
    engine: Engine,
    rows: list[list[int]],
    batch_size: int,
    run: Callable[[Engine, NDArray[np.int64], NDArray[np.int64]], NDArray[np.float32]]
    | None = None,
) -> NDArray[np.float32]:
    """Vectors of token id rows, in their order: run in batches of like length,
    each padded to its longest. ``run(engine, ids, mask)`` runs one batch
    (default: the engine itself; the embedder's puts a waiting query first)."""
    import numpy as np

    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    # Batches of similar length waste little compute on padding. Longest first:
    # in growing order every batch needs a larger block than any freed so far,
    # and the heap grew by 900 MB more over 1,500 chunks.
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    out: NDArray[np.float32] | None = None
    for lo in range(0, len(order), batch_size):
        picked = order[lo : lo + batch_size]
        ids, mask = pad([rows[i] for i in picked])
        emb = run(engine, ids, mask) if run is not None else engine(ids, mask)
        if out is None:
            out = np.zeros((len(rows), emb.shape[1]), dtype=np.float32)
        out[picked] = emb
    assert out is not None
    return out


def encode(
    model: Any, precision: str, texts: Sequence[str], batch_size: int
) -> NDArray[np.float32]:
    """Vectors through sentence-transformers' own ``encode``: any model that is not
    a plain transformer and pooling (prompts, projections), on torch."""
    import numpy as np
    import torch

    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if precision == "bf16"
        else contextlib.nullcontext()
    )
    with torch.inference_mode(), autocast:
        out = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return np.asarray(out, dtype=np.float32)
