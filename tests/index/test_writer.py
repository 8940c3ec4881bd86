"""The writer: pending IDs, upserts, deletes, the state; one document's refusal is its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mdindex.errors import StoreError
from mdindex.runtime import make_store
from mdindex.sinks import Point
from tests.conftest import TinyEmbedder, build_indexer, settings_for, stored_points


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
