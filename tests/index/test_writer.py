"""The writer: pending IDs, upserts, deletes, the state; one document's refusal is its own."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mdindex.errors import StoreError
from mdindex.index import writer
from mdindex.runtime import make_store
from mdindex.sinks import Point
from tests.conftest import TinyEmbedder, build_indexer, settings_for, stored_points
from tests.sinks.edge.test_pages import resident_kb


def refusing(settings: Any, doc_path: str) -> Any:
    """The settings' real store, refusing every write that holds a point of ``doc_path``
    (as qdrant-edge refused a payload it could not convert)."""
    store = make_store(settings)
    upsert = store.upsert

    def checked(points: Sequence[Point]) -> int:
        if any(p.payload["doc_path"] == doc_path for p in points):
            raise StoreError(f"qdrant-edge upsert failed: cannot convert a payload of {doc_path}")
        return upsert(points)

    store.upsert = checked  # type: ignore[method-assign]
    return store


def test_a_document_the_store_refuses_fails_alone(tmp_path: Path) -> None:
    """Issue 23: a store write that fails for one document's payload is that
    document's failure: reported, its old points kept, every other one indexed."""
    root = tmp_path / "docs"
    root.mkdir()
    for name in ("a", "b", "c"):
        (root / f"{name}.md").write_text(f"# {name.upper()}\n\nFirst text of {name}.\n")
    s = settings_for(tmp_path, [root])
    with build_indexer(s, TinyEmbedder()) as indexer:
        indexer.backfill()
    before = {k: p for k, p in stored_points(s).items() if p["doc_path"] == "b.md"}
    for name in ("a", "b", "c"):
        (root / f"{name}.md").write_text(f"# {name.upper()}\n\nSecond text of {name}.\n")
    with build_indexer(s, TinyEmbedder(), store=refusing(s, "b.md")) as indexer:
        summary = indexer.backfill()
    assert summary.files_failed == 1 and summary.files_changed == 2
    assert summary.errors[0]["path"] == "b.md"
    assert "store refused" in summary.errors[0]["reason"]
    points = stored_points(s)
    texts = {p["doc_path"]: p["text"] for p in points.values()}
    assert "Second text of a" in texts["a.md"] and "Second text of c" in texts["c.md"]
    assert {k: p for k, p in points.items() if p["doc_path"] == "b.md"} == before
    # nothing of the refused write is left pending: the next run tries it again
    with build_indexer(s, TinyEmbedder()) as indexer:
        assert indexer.state.point_counts()[1] == 0
        again = indexer.backfill()
    assert again.files_changed == 1 and again.files_failed == 0
    assert (
        "Second text of b" in {p["doc_path"]: p["text"] for p in stored_points(s).values()}["b.md"]
    )


def test_two_documents_the_store_refuses_fail_alone(tmp_path: Path) -> None:
    """Two refused documents in one group are two failures, not the run's: the
    other changes of the run (a deletion here) still go through."""
    root = tmp_path / "docs"
    root.mkdir()
    for name in ("a", "b", "c"):
        (root / f"{name}.md").write_text(f"# {name}\n\ntext {name}\n")
    s = settings_for(tmp_path, [root])
    with build_indexer(s, TinyEmbedder()) as indexer:
        indexer.backfill()
    before = stored_points(s)
    (root / "a.md").write_text("# a\n\nchanged a\n")
    (root / "b.md").write_text("# b\n\nchanged b\n")
    (root / "c.md").unlink()
    store = make_store(s)

    def refuse(points: Sequence[Point]) -> int:
        raise StoreError("qdrant-edge upsert failed: cannot convert a payload")

    store.upsert = refuse  # type: ignore[method-assign]
    with build_indexer(s, TinyEmbedder(), store=store) as indexer:
        summary = indexer.backfill()
    assert summary.files_failed == 2 and summary.files_deleted == 1
    assert sorted(e["path"] for e in summary.errors) == ["a.md", "b.md"]
    after = stored_points(s)
    assert {k: p for k, p in before.items() if p["doc_path"] != "c.md"} == after


def test_a_long_write_lets_go_of_the_pages_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Edge writes through memory maps, and a cold backfill kept every page it
    wrote resident (two thirds of its 3.9 GB peak at 545k points): the writer
    lets go of them every LET_GO_EVERY points, and every point is still there."""
    monkeypatch.setattr(writer, "LET_GO_EVERY", 500)
    root = tmp_path / "docs"
    root.mkdir()
    rng = random.Random(0)  # words that do not compress: payloads as large as written
    for i in range(600):  # 1.6 MB of text: four groups of documents (GROUP_CHARS)
        words = (" ".join(f"{rng.getrandbits(40):x}" for _ in range(60)) for _ in range(4))
        (root / f"n{i}.md").write_text("".join(f"## S{j}\n\n{t}\n\n" for j, t in enumerate(words)))
    s = settings_for(tmp_path, [root], store="edge")
    store = make_store(s)
    upsert, resident = store.upsert, []

    def sampled(points: Sequence[Point]) -> int:
        written = upsert(points)
        resident.append(resident_kb(store.path, "payload_storage"))
        return written

    store.upsert = sampled  # type: ignore[method-assign]
    with build_indexer(s, TinyEmbedder(), store=store) as indexer:
        summary = indexer.backfill()
    points = stored_points(s)
    assert summary.points_upserted == len(points) >= 2400
    texts = {(root / f"n{i}.md").read_text() for i in range(600)}
    assert all(any(p["text"] in t for t in texts) for p in points.values())
    # sampled after each group's upsert: held, the pages of every group before
    # it would be resident too (the fourth sample four times the first)
    assert len(resident) >= 4 and resident[0] > 300, resident
    assert max(resident) < 2 * resident[0], resident
