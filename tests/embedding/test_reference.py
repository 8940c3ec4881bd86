"""The cached local reference an embedding server's vectors are checked
against: a cache that is not one finite row per calibration text is made
again, and a cache folder others can write is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mdindex.config import DEFAULT_MODEL
from mdindex.embedding.loading import weights_sha
from mdindex.embedding.model import resolve_model
from mdindex.embedding.reference import local_reference
from mdindex.embedding.samples import TEXTS
from mdindex.errors import ConfigError

pytestmark = pytest.mark.model


def planted(cache: Path, content: bytes | np.ndarray) -> Path:
    info = resolve_model(DEFAULT_MODEL)
    path = cache / "reference" / f"{weights_sha(info, cache)[:24]}.npy"
    path.parent.mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, content)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    cache = tmp_path_factory.mktemp("cache")
    vectors = local_reference(resolve_model(DEFAULT_MODEL), cache)
    assert vectors is not None and vectors.shape == (len(TEXTS), 384)
    return vectors


@pytest.mark.parametrize(
    "content",
    [
        b"",  # a file cut short: EOFError out of the gate
        np.zeros(384, dtype=np.float32),  # one row: IndexError in the gate's message
        np.full((len(TEXTS), 384), np.nan, dtype=np.float32),  # refused a server that matched
        np.zeros((len(TEXTS) - 1, 384), dtype=np.float32),
        np.zeros((len(TEXTS), 384), dtype=np.complex64),
    ],
    ids=["empty", "1-d", "nan", "rows", "complex"],
)
def test_a_cached_reference_that_is_not_one_finite_row_per_text_is_made_again(
    tmp_path: Path, reference: np.ndarray, content: bytes | np.ndarray
) -> None:
    """Found by a review: the cache was taken as np.load gave it."""
    cache = tmp_path / "cache"
    planted(cache, content)
    again = local_reference(resolve_model(DEFAULT_MODEL), cache)
    assert again is not None and again.shape == reference.shape
    assert np.allclose(again, reference, atol=1e-5)


def test_a_reference_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    """What is cached there decides which servers pass the gate; onnx/ and
    calibration/ were refused so, reference/ was not checked."""
    cache = tmp_path / "cache"
    path = planted(cache, np.zeros((len(TEXTS), 384), dtype=np.float32))
    path.parent.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        local_reference(resolve_model(DEFAULT_MODEL), cache)
