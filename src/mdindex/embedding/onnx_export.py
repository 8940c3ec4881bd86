"""The model as one ONNX graph (transformer, pooling, normalising), run with onnxruntime.

The graph is exported once from the packaged weights, offline, with torch's
exporter, and cached under ``cache_dir/onnx/<key>/``: ``key`` hashes the model
directory's files by path, size and mtime, so finding an export costs a few
``stat`` calls and no import of torch; ``meta.json`` beside the graph records
the SHA-256 of the weights it came from. Running it needs only onnxruntime
and tokenizers: a short-lived process (``mdindex search``, ``mdindex mcp``)
starts in well under a second instead of the 7 s ``import
sentence_transformers`` takes on a 2-core Xeon.

Only a plain text transformer followed by pooling (and normalising) is
exported; anything else keeps the torch path. An export that does not
reproduce torch's vectors (cosine 0.9999 on a probe) is recorded as not
exportable rather than used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mdindex.embedding.engines import INPUTS, OnnxRunner, pad
from mdindex.embedding.machine import version
from mdindex.embedding.model import ModelInfo, load_tokenizer, model_files, weights_hash
from mdindex.errors import ConfigError
from mdindex.jsonfile import private_dir, read_json, write_json

log = logging.getLogger(__name__)

# Bump when the graph's inputs, outputs or the export recipe change.
EXPORT_VERSION = 1
PROBE = ["hello world", "An export must give torch's vectors, in batches and alone. " * 6]


def export_key(info: ModelInfo) -> str:
    """Which export belongs to this model directory, from its files' names, sizes
    and mtimes (cheap enough for every cold start)."""
    h = hashlib.sha256(f"v{EXPORT_VERSION}\0{info.path.resolve()}".encode())
    root = info.path.resolve()
    for path in model_files(info):
        st = path.stat()
        h.update(f"\0{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class Export:
    path: Path  # the .onnx file
    weights_sha256: str
    inputs: tuple[str, ...]
    sha256: str = ""  # of the .onnx file as it was made and checked against torch
    identity: tuple[int, ...] = ()  # its inode, size, mtime and ctime when last hashed


def open_export(found: Export) -> OnnxRunner:
    """A session over the export, used only if the file is the one that was made
    and checked against torch (its SHA-256 as recorded then). A model.onnx with
    its embedding rows permuted once ran silently, and `verify --repair` spread
    its vectors. ValueError when the hash is missing or differs.

    Hashing 90 MB takes 0.3 s, half again a small run's 0.55 s load
    (bench/model_hash.py), so it is done only when the file may have been
    written since it was last hashed: any write moves its ctime, which no
    user-space call can set back, so the same inode, size, mtime and ctime as
    recorded at the last hash mean the same bytes."""
    if not found.sha256:
        raise ValueError(f"{found.path} has no recorded SHA-256 (made before it was kept)")
    if found.identity and list(found.identity) == _identity(found.path):
        return OnnxRunner(found.path, found.inputs)
    with found.path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if digest != found.sha256:
        raise ValueError(f"{found.path} is not the file that was exported and checked (SHA-256)")
    meta_path = found.path.parent / "meta.json"
    write_json(meta_path, read_json(meta_path) | {"identity": _identity(found.path)})
    return OnnxRunner(found.path, found.inputs)


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def check_private(folder: Path, *inside: Path) -> None:
    """Refuse a cache folder another user could write, as ssh refuses a key file:
    what is cached there (the export, the measurement) decides the vectors.
    ``inside``: the folder and files of one export, checked as well (whoever
    can write model.onnx or meta.json can write a new file and its SHA-256)."""
    for path in (folder, folder / "onnx", folder / "calibration", *inside):
        try:
            st = path.stat()
        except OSError:
            continue  # not made yet: it is made private (jsonfile.private_dir)
        if st.st_uid != os.getuid():
            raise ConfigError(
                f"cache folder {path} is owned by uid {st.st_uid}, not by this user "
                f"({os.getuid()}); use a cache_dir of your own"
            )
        if st.st_mode & 0o022:
            raise ConfigError(
                f"cache folder {path} is writable by others (mode {st.st_mode & 0o777:o}): "
                f"a file there decides the vectors; chmod go-w {path}"
            )


def _export_dir(info: ModelInfo, cache_dir: Path) -> Path:
    return cache_dir / "onnx" / export_key(info)


def find_export(info: ModelInfo, cache_dir: Path) -> Export | None:
    """The cached export of this model, or None (none yet, or not exportable)."""
    folder = _export_dir(info, cache_dir)
    check_private(cache_dir, folder, folder / "meta.json", folder / "model.onnx")
    meta = read_json(folder / "meta.json")
    if not meta.get("exportable"):
        return None
    path = folder / "model.onnx"
    if not path.is_file():
        return None
    inputs = meta.get("inputs")
    names = tuple(n for n in inputs if n in INPUTS) if isinstance(inputs, list) else INPUTS
    if names[:2] != INPUTS[:2]:
        return None
    identity = meta.get("identity")
    ok = isinstance(identity, list) and all(type(n) is int for n in identity)
    known = tuple(identity) if ok else ()  # type: ignore[arg-type]
    return Export(
        path, str(meta.get("weights_sha256", "")), names, str(meta.get("sha256", "")), known
    )


def _versions() -> dict[str, str]:
    return {p: version(p) for p in ("torch", "onnx", "onnxruntime", "transformers")}


# How long a discard waits for an export another process is making (the
# default model's export and check take about 5 s, docs/benchmarks.md); past
# it the damaged folder is left for the next load to try again.
DISCARD_WAIT_S = 120.0


def discard(found: Export, wait_s: float = DISCARD_WAIT_S) -> None:
    """Remove an export that cannot be loaded (a damaged file): the next load
    with torch makes it again. Under the export's lock, and only while its
    record still names the file that failed: a process that removed it
    without either could take away the export another had just made, or the
    file another was still writing."""
    import shutil

    folder = found.path.parent
    try:
        with _locked(folder, wait_s):
            if read_json(folder / "meta.json").get("sha256", "") == found.sha256:
                shutil.rmtree(folder, ignore_errors=True)
    except OSError as exc:
        log.warning("the damaged ONNX export in %s is left: its lock: %s", folder, exc)


def was_refused(info: ModelInfo, cache_dir: Path) -> bool:
    """True when an earlier export, with these library versions, found this model
    not exportable (another torch or onnx tries again)."""
    meta = read_json(_export_dir(info, cache_dir) / "meta.json")
    return meta.get("exportable") is False and meta.get("versions") == _versions()


@contextlib.contextmanager
def exporting(info: ModelInfo, cache_dir: Path) -> Iterator[None]:
    """Held while the model's export in ``cache_dir`` is made or replaced. Two
    processes sharing a cache (a daemon and a search started together, or a
    test suite's workers) each exported into one folder, and the meta.json one
    wrote could name the SHA-256 of the model.onnx it lost to the other: the
    next load found the file changed, warned, and removed the export."""
    folder = _export_dir(info, cache_dir)
    private_dir(folder)
    with _locked(folder):
        # An export writes its .tmp- file only while it holds this lock, so
        # one found now was left by an export that was killed.
        for left in folder.glob(".tmp-*.onnx"):
            with contextlib.suppress(OSError):
                left.unlink()
        yield


@contextlib.contextmanager
def _locked(folder: Path, wait_s: float | None = None) -> Iterator[None]:
    """The lock beside an export's folder (outside it: the folder may go);
    with ``wait_s``, OSError when another holds it that long."""
    path = folder.parent / f"{folder.name}.lock"
    # no link followed, and no FIFO waited on for ever: a plain file or an OSError
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a plain file")
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise OSError(f"held by another process for over {wait_s:g} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def export(
    info: ModelInfo, cache_dir: Path, st_model: Any, inputs: tuple[str, ...]
) -> Export | None:
    """Export ``st_model`` (a loaded fp32 SentenceTransformer on the CPU whose
    modules are Transformer, Pooling[, Normalize]) and check it against torch.
    Returns None, and records why, when the graph does not match. The export
    another process made while this one waited for the folder is taken as is."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exporting(info, cache_dir))
        except OSError as exc:  # torch then, as for a model that cannot be exported
            log.warning("not exporting the model to ONNX: its lock: %s", exc)
            return None
        found = find_export(info, cache_dir)
        if found is not None or was_refused(info, cache_dir):
            return found
        return _export(info, cache_dir, st_model, inputs)


def _export(
    info: ModelInfo, cache_dir: Path, st_model: Any, inputs: tuple[str, ...]
) -> Export | None:
    import torch

    folder = _export_dir(info, cache_dir)
    backbone, pooling = st_model[0].auto_model, st_model[1]

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.pooling = backbone, pooling

        def forward(self, *arrays: torch.Tensor) -> torch.Tensor:
            named = dict(zip(inputs, arrays, strict=True))
            hidden = self.backbone(**named).last_hidden_state
            features = {"token_embeddings": hidden, "attention_mask": named["attention_mask"]}
            emb = self.pooling(features)["sentence_embedding"]
            return torch.nn.functional.normalize(emb, dim=1)

    # A traced batch of 2 x 16: the exporter specialises nothing on either size
    # (checked below at 1 x n and 2 x m).
    sample = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in inputs)
    axes = {name: {0: "batch", 1: "tokens"} for name in inputs}
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".onnx")
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about Python-side shape checks
            torch.onnx.export(
                Graph().eval(),
                sample,
                tmp,
                input_names=list(inputs),
                output_names=["sentence_embedding"],
                dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        agreement = _check(st_model, Path(tmp), inputs, info)
    except Exception as exc:  # the exporter raises many types; any means no ONNX path
        Path(tmp).unlink(missing_ok=True)
        log.warning("ONNX export of %s failed (%s); embedding stays on torch", info.name, exc)
        write_json(
            folder / "meta.json",
            {"exportable": False, "reason": str(exc)[:500], "versions": _versions()},
        )
        return None
    if agreement < 0.9999:
        Path(tmp).unlink(missing_ok=True)
        reason = f"the export's vectors differ from torch's (cosine {agreement:.6f})"
        log.warning("ONNX export of %s refused: %s", info.name, reason)
        write_json(
            folder / "meta.json", {"exportable": False, "reason": reason, "versions": _versions()}
        )
        return None
    file_sha = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()  # as checked above
    os.replace(tmp, folder / "model.onnx")
    sha = weights_hash(info)
    write_json(
        folder / "meta.json",
        {
            "exportable": True,
            "model": info.name,
            "sha256": file_sha,
            "identity": _identity(folder / "model.onnx"),
            "weights_sha256": sha,
            "inputs": list(inputs),
            "export_version": EXPORT_VERSION,
            "probe_cosine": agreement,
        },
    )
    log.info("exported %s to ONNX (%s)", info.name, folder)
    return Export(
        folder / "model.onnx", sha, inputs, file_sha, tuple(_identity(folder / "model.onnx"))
    )


def _check(st_model: Any, path: Path, inputs: tuple[str, ...], info: ModelInfo) -> float:
    """The lowest cosine between torch's and the graph's vectors of the probe
    texts, alone and as one padded batch."""
    tokenizer = load_tokenizer(info)
    runner = OnnxRunner(path, inputs)
    rows = [enc.ids for enc in tokenizer.encode_batch(PROBE)]
    torch_vecs = np.asarray(
        st_model.encode(
            PROBE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        ),
        dtype=np.float32,
    )
    alone = np.vstack([runner(*pad([r])) for r in rows])
    batched = runner(*pad(rows))
    return float(min(np.min(np.sum(v * torch_vecs, axis=1)) for v in (alone, batched)))
