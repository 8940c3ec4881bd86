"""The stored vectors checked against the configured model when a store opens."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from mdindex.errors import ModelMismatch
from mdindex.index.probe import PROBE_COSINE, probe_model
from tests.conftest import TinyEmbedder, build_indexer, run_backfill, settings_for, stored_points

pytestmark = pytest.mark.usefixtures("engine")


class OtherModel(TinyEmbedder):
    """Another deterministic model of the same size: the words hashed otherwise."""

    def vector(self, text: str) -> np.ndarray:
        return super().vector(hashlib.sha256(text.encode()).hexdigest())


class OtherModel384(OtherModel):
    dimension = 384  # all-MiniLM-L6-v2's


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "lava.md").write_text("# Lava\n\nA lava eruption flows downhill.\n")
    (root / "chess.md").write_text("# Chess\n\nThe queen moves along diagonals.\n")
    return root


def test_another_model_of_the_same_size_is_refused_before_any_write(tmp_path: Path) -> None:
    s = settings_for(tmp_path, [tree(tmp_path)])
    run_backfill(s, TinyEmbedder())
    before = stored_points(s, vectors=True)
    (Path(s.roots[0]) / "new.md").write_text("# New\n\nWritten after the model changed.\n")
    with pytest.raises(ModelMismatch, match=r"not made by all-MiniLM-L6-v2.*cosine"):
        run_backfill(s, OtherModel())
    assert stored_points(s, vectors=True) == before  # nothing written, nothing repaired
    with build_indexer(s, TinyEmbedder()) as same:
        same.open_store()
        assert probe_model(
            same.settings, same.detector, same.groups, same.writer.vectors
        ) == pytest.approx(1.0)


def test_no_point_to_probe_is_no_refusal(tmp_path: Path) -> None:
    root = tree(tmp_path)
    s = settings_for(tmp_path, [root])
    run_backfill(s, TinyEmbedder())
    for doc in root.iterdir():  # every document changed since: nothing to compare
        doc.write_text(doc.read_text() + "\nMore.\n")
    with build_indexer(s, OtherModel()) as other:
        other.store.open()
        assert (
            probe_model(other.settings, other.detector, other.groups, other.writer.vectors) is None
        )


@pytest.mark.model
def test_the_real_model_passes_and_another_of_its_size_is_refused(
    tmp_path: Path, real_embedder
) -> None:
    """all-MiniLM-L6-v2's stored vector against itself: cosine 1.000; against
    a stand-in of its size, far below the bar."""
    s = settings_for(tmp_path, [tree(tmp_path)])
    run_backfill(s, real_embedder)
    with build_indexer(s, real_embedder) as same:
        same.open_store()
        cosine = probe_model(same.settings, same.detector, same.groups, same.writer.vectors)
    assert cosine is not None and cosine > 0.9999
    with build_indexer(s, OtherModel384()) as other:
        other.store.open()
        with pytest.raises(ModelMismatch) as refused:
            probe_model(other.settings, other.detector, other.groups, other.writer.vectors)
    measured = float(str(refused.value).split("cosine ")[1].split(";")[0])
    assert measured < PROBE_COSINE / 2
    assert len(str(refused.value).splitlines()) == 1
    assert refused.value.exit_code == 2
