"""`mdindex verify [--repair]` and its guard: repair deletes nothing on a guess."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.errors import PruneRefused, RepairRefused, StoreError
from mdindex.index.verify import verify
from tests.cli_helper import in_process
from tests.conftest import (
    TinyEmbedder,
    assert_same,
    build_indexer,
    run_backfill,
    settings_for,
    stored_points,
)


@pytest.mark.parametrize("how", ["emptied", "missing", "replaced"])
def test_repair_refuses_to_delete_a_root_that_looks_unmounted(
    docs_tree: Path, make_settings, tiny, how: str
) -> None:
    """Issue 23, defect 3: `verify --repair` deleted the whole index when a root was
    empty or missing (an unmounted disk): exit 0, "2 deleted", and search found nothing."""
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s)
    if how == "emptied":
        for path in docs_tree.rglob("*.md"):
            path.unlink()
    elif how == "missing":
        shutil.rmtree(docs_tree)
    else:  # another folder in its place, with one of the documents
        os.rename(docs_tree, docs_tree.with_name("old"))
        docs_tree.mkdir()
        (docs_tree / "index.md").write_text((docs_tree.with_name("old") / "index.md").read_text())
    reason = {"emptied": "no markdown files", "missing": "missing", "replaced": "another folder"}
    with build_indexer(s, tiny) as indexer:
        report = verify(indexer)  # a report is only a report
        assert not report.in_sync
        with pytest.raises(PruneRefused, match=reason[how]):
            verify(indexer, repair=True)
    assert stored_points(s) == before
    with build_indexer(s, tiny) as indexer:
        if how == "missing":
            docs_tree.mkdir()
        assert verify(indexer, repair=True, force=True).repaired
        assert verify(indexer).in_sync


def test_repair_still_fixes_what_a_present_root_says(docs_tree: Path, make_settings, tiny) -> None:
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    (docs_tree / "guide" / "b.md").unlink()  # one of three: not a guess
    with build_indexer(s, tiny) as indexer:
        assert verify(indexer, repair=True).repaired
        assert verify(indexer).in_sync
    assert "guide/b.md" not in {p["doc_path"] for p in stored_points(s).values()}


@pytest.mark.slow
@pytest.mark.model
def test_verify_repair_on_an_empty_root_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nApples.\n")
    (root / "b.md").write_text("# B\n\nBananas.\n")
    state = ["--state-dir", str(tmp_path / "state")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:  # its output: main() here
        return in_process(capsys, *args, *state)

    assert cli("backfill", str(root)).returncode == 0
    before = stored_points(settings_for(tmp_path, [root]))
    for path in root.iterdir():
        path.unlink()
    r = cli("verify", "--repair", str(root))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("mdindex: error: root 'docs'")
    assert "no markdown files" in r.stderr and "--force" in r.stderr
    assert stored_points(settings_for(tmp_path, [root])) == before


@pytest.mark.parametrize("store", ["edge", "client"])
def test_verify_where_nothing_is_indexed_says_so_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str
) -> None:
    """A mistyped --state-dir: verify made an empty store and state there and
    called every file missing (exit 4); search made local mode's folder."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nApples.\n")
    typo = tmp_path / "typo"
    state = ["--state-dir", str(typo), "--store", store]
    for repair in ((), ("--repair",)):
        r = in_process(capsys, "verify", *repair, str(root), *state)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"mdindex: error: nothing is indexed in {typo} yet: "
            "run `mdindex backfill` first, or check the state dir"
        ]
    r = in_process(capsys, "search", "apples", *state)
    assert r.returncode == 0 and "nothing is indexed in" in r.stderr
    assert not typo.exists()
    r = in_process(capsys, "verify", str(root), *state, "--collection", "notes")
    assert r.stderr.strip().splitlines() == [
        f"mdindex: error: nothing is indexed in {typo} for collection notes yet: "
        "run `mdindex backfill` first, or check the state dir and the collection"
    ]
    # once indexed, verify compares as before; a store gone is named, not rebuilt
    assert in_process(capsys, "backfill", str(root), *state).returncode == 0
    assert in_process(capsys, "verify", str(root), *state).returncode == 0
    folder = typo / ("edge" if store == "edge" else "qdrant")
    shutil.rmtree(folder)
    for command in (("verify", str(root)), ("search", "apples")):
        r = in_process(capsys, *command, *state)
        assert r.returncode == 2 and "has no collection in the store" in r.stderr
        assert not folder.exists()  # search made local mode's folder
    # the catalog gone too, a state left: nothing is indexed (verify emptied the state)
    (typo / "mdindex.versions.json").unlink()
    states = {p.name: p.read_bytes() for p in typo.glob("*.sqlite3")}
    r = in_process(capsys, "verify", str(root), *state)
    assert r.returncode == 2 and "nothing is indexed in" in r.stderr
    assert not folder.exists() and states
    assert {p.name: p.read_bytes() for p in typo.glob("*.sqlite3")} == states


class ChangedEmbedder(TinyEmbedder):
    """The tiny embedder with its dimensions rotated: a model changed under the
    index (a model.onnx with its rows permuted did this in a hostile review)."""

    def vector(self, text: str) -> Any:
        return np.roll(super().vector(text), 7)


def test_repair_that_finds_most_vectors_disagreeing_suspects_the_embedder(
    docs_tree: Path, make_settings: Any
) -> None:
    """Found by a hostile review: with a changed model, `verify --repair`
    rewrote 10 of 10 documents with its wrong vectors. Now it stops and says
    the embedder is suspect, unless --force."""
    s = make_settings(docs_tree)
    for i in range(8):
        (docs_tree / f"n{i}.md").write_text(f"# Note {i}\n\nWords about topic {i} and more.\n")
    run_backfill(s, TinyEmbedder())
    before = stored_points(s, vectors=True)
    with (
        build_indexer(s, ChangedEmbedder()) as indexer,
        pytest.raises(RepairRefused, match=r"sampled vectors disagree.*--force"),
    ):
        verify(indexer, repair=True)
    assert stored_points(s, vectors=True) == before  # nothing rewritten
    with build_indexer(s, ChangedEmbedder()) as indexer:
        report = verify(indexer, repair=True, force=True)
        assert report.repaired and report.embedder_suspect
        assert verify(indexer).in_sync


def damaged_vault(tmp_path: Path, tiny: TinyEmbedder) -> tuple[Any, dict[str, str]]:
    """tests/vault indexed, then its store damaged in each way verify reports:
    a point deleted, one with another payload, one moved to another document,
    a duplicate of a chunk, and a point of a document with no file."""
    from mdindex.runtime import make_store
    from mdindex.sinks import Point

    vault = tmp_path / "vault"
    shutil.copytree(Path(__file__).resolve().parents[1] / "vault", vault)
    s = settings_for(tmp_path, [vault])
    run_backfill(s, tiny)
    store = make_store(s)
    store.open()
    try:
        rows = sorted(store.scroll(payload=True, with_vectors=True))
        by_doc: dict[str, list[Any]] = {}
        for row in rows:
            by_doc.setdefault(row[1]["doc_path"], []).append(row)
        a, b = sorted(by_doc, key=lambda d: (-len(by_doc[d]), d))[:2]  # a has 3 points or more
        (gone, _, _), (edited, payload, vector), (moved, mpayload, mvector) = by_doc[a][:3]
        dup = str(uuid.UUID(int=1))
        orphan = str(uuid.UUID(int=2))
        store.delete([gone])
        store.upsert(
            [
                Point(edited, vector, {**payload, "heading": "changed"}),
                Point(moved, mvector, {**mpayload, "doc_path": b}),
                Point(dup, vector, payload),
                Point(orphan, vector, {**payload, "doc_path": "no/such/file.md"}),
            ]
        )
    finally:
        store.close()
    ids = {"gone": gone, "edited": edited, "moved": moved, "dup": dup, "orphan": orphan}
    return s, ids


def test_verify_in_groups_reports_what_the_whole_store_comparison_did(
    tmp_path: Path, tiny: TinyEmbedder
) -> None:
    """verify holds one group of documents at a time (issue 37): one document a
    group or all in one, the report is the same, and says what each damage is."""
    s, ids = damaged_vault(tmp_path, tiny)
    with build_indexer(s, tiny) as indexer:
        indexer.groups.docs = 10**6  # every document in one group, as before streaming
        whole = verify(indexer).as_dict()
        indexer.groups.docs = 1
        streamed = verify(indexer).as_dict()
    assert streamed == whole
    assert [e["id"] for e in whole["missing"]] == [ids["gone"]]
    stale = {e["id"]: e["reason"] for e in whole["stale"]}
    assert stale == {
        ids["edited"]: "payload differs",
        ids["moved"]: "payload differs",
        ids["orphan"]: "no such chunk in the files",
    }
    assert [e["id"] for e in whole["duplicates"]] == [ids["dup"]]
    assert whole["vectors_checked"] > 0 and whole["vectors_disagreeing"] == 0
    with build_indexer(s, tiny) as indexer:
        indexer.groups.docs = 1
        assert verify(indexer, repair=True).repaired
        assert verify(indexer).in_sync


@pytest.mark.parametrize("notes", [1, 3, 4])
def test_repair_suspects_the_embedder_on_a_small_index_all_disagreeing(
    tmp_path: Path, notes: int
) -> None:
    """Found by a hostile review: a suspicion needed 5 sampled vectors, so a
    changed model rewrote an index of 3 notes (3 of 3 vectors wrong) without a
    word. Every vector of a smaller sample disagreeing is suspect too."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(notes):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nWords about topic {i}.\n")
    s = settings_for(tmp_path, [root])
    run_backfill(s, TinyEmbedder())
    before = stored_points(s, vectors=True)
    assert len(before) == notes
    with build_indexer(s, ChangedEmbedder()) as indexer:
        report = verify(indexer)
        assert (report.vectors_checked, report.vectors_disagreeing) == (notes, notes)
        assert report.embedder_suspect
        with pytest.raises(RepairRefused, match=rf"{notes} of {notes} sampled vectors disagree"):
            verify(indexer, repair=True)
    assert stored_points(s, vectors=True) == before  # nothing rewritten


def test_a_small_index_with_one_vector_wrong_is_repaired(tmp_path: Path) -> None:
    """Not every disagreement is the embedder's: 1 of 3 wrong is the index's."""
    from mdindex.runtime import make_store
    from mdindex.sinks import Point

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nWords about topic {i}.\n")
    s = settings_for(tmp_path, [root])
    tiny = TinyEmbedder()
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    victim = sorted(before)[0]
    store = make_store(s).open()
    payload = {k: v for k, v in before[victim].items() if not k.startswith("_")}
    store.upsert([Point(victim, tiny.vector("something else entirely").tolist(), payload)])
    store.close()
    with build_indexer(s, tiny) as indexer:
        report = verify(indexer, repair=True)
        assert report.repaired and not report.embedder_suspect
        assert (report.vectors_checked, report.vectors_disagreeing) == (3, 1)
    assert stored_points(s, vectors=True)[victim]["_vector"] == pytest.approx(
        before[victim]["_vector"], abs=1e-6
    )


def straddled_tree(tmp_path: Path, tiny: TinyEmbedder) -> tuple[Any, dict[str, str]]:
    """Seven notes of three sections each, indexed, then damaged across the
    boundaries of groups of two: a point of d0 stored under d5's path (found
    missing in the first group, unexpected in the third), every point of d3
    gone, a stray point under d6's path (the last group), a duplicate of a d2
    chunk, an edited payload in d4, and a point of a document with no file."""
    from mdindex.runtime import make_store
    from mdindex.sinks import Point

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(7):
        sections = "".join(
            f"## Part {k}\n\nNote {i} says {k} things about topic {i}.\n\n" for k in range(3)
        )
        (root / f"d{i}.md").write_text(f"# Note {i}\n\n{sections}")
    s = settings_for(tmp_path, [root])
    run_backfill(s, tiny)
    store = make_store(s)
    store.open()
    try:
        by_doc: dict[str, list[Any]] = {}
        for row in sorted(store.scroll(payload=True, with_vectors=True)):
            by_doc.setdefault(row[1]["doc_path"], []).append(row)
        assert all(len(by_doc[f"d{i}.md"]) >= 3 for i in range(7))
        moved, mpayload, mvector = by_doc["d0.md"][0]
        edited, epayload, evector = by_doc["d4.md"][1]
        _, dpayload, dvector = by_doc["d2.md"][2]
        ids = {
            "moved": moved,
            "edited": edited,
            "dup": str(uuid.UUID(int=11)),
            "stray": str(uuid.UUID(int=12)),
            "orphan": str(uuid.UUID(int=13)),
        }
        gone = [pid for pid, _, _ in by_doc["d3.md"]]
        store.delete(gone)
        store.upsert(
            [
                Point(moved, mvector, {**mpayload, "doc_path": "d5.md"}),
                Point(edited, evector, {**epayload, "heading": "changed"}),
                Point(ids["dup"], dvector, dpayload),
                Point(ids["stray"], dvector, {**dpayload, "doc_path": "d6.md"}),
                Point(ids["orphan"], dvector, {**dpayload, "doc_path": "gone/d9.md"}),
            ]
        )
    finally:
        store.close()
    return s, ids | {f"gone{k}": pid for k, pid in enumerate(sorted(gone))}


@pytest.mark.slow
@pytest.mark.usefixtures("engine")  # a filtered scroll per group, on each engine
def test_verify_and_repair_in_groups_of_two_match_the_whole_tree_at_once(
    tmp_path: Path, tiny: TinyEmbedder
) -> None:
    """Issue 37: verify holds one group at a time. With boundaries in the middle
    of the damage (a document's point stored in another group's place, a
    document with no points, strays in the last group), groups of one and two
    find what one group of the whole tree finds, and repair in groups stores
    exactly what repair of the whole tree stores."""
    s, ids = straddled_tree(tmp_path, tiny)
    state = Path(s.state_dir)
    shutil.copytree(state, tmp_path / "state-copy")
    reports = {}
    with build_indexer(s, tiny) as indexer:
        for docs in (10**6, 1, 2):
            indexer.groups.docs = docs
            reports[docs] = verify(indexer).as_dict()
    whole = reports[10**6]
    assert reports[1] == whole and reports[2] == whole
    assert sorted(e["id"] for e in whole["missing"]) == sorted(
        v for k, v in ids.items() if k.startswith("gone")
    )
    assert {e["doc_path"] for e in whole["missing"]} == {"d3.md"}
    assert {e["id"]: e["reason"] for e in whole["stale"]} == {
        ids["moved"]: "payload differs",
        ids["edited"]: "payload differs",
        ids["stray"]: "no such chunk in the files",
        ids["orphan"]: "no such chunk in the files",
    }
    assert [e["id"] for e in whole["duplicates"]] == [ids["dup"]]
    assert whole["vectors_checked"] > 0 and whole["vectors_disagreeing"] == 0

    with build_indexer(s, tiny) as indexer:
        indexer.groups.docs = 2
        assert verify(indexer, repair=True).repaired
        assert verify(indexer).in_sync
    in_groups = stored_points(s, vectors=True)
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "state-copy", state)
    with build_indexer(s, tiny) as indexer:
        indexer.groups.docs = 10**6
        assert verify(indexer, repair=True).repaired
    assert_same(in_groups, stored_points(s, vectors=True))
    gone = {v for k, v in ids.items() if k.startswith("gone")}
    assert gone <= in_groups.keys()
    assert not {ids["dup"], ids["stray"], ids["orphan"]} & in_groups.keys()
    assert in_groups[ids["moved"]]["doc_path"] == "d0.md"
    assert in_groups[ids["edited"]].get("heading") != "changed"


def test_a_stop_ends_a_verify_between_groups_with_nothing_repaired(
    docs_tree: Path, make_settings, tiny
) -> None:
    """Found by a review: a daemon's SIGTERM waited for the whole verify (644 s
    at 100,000 files, where systemd kills it after 15 s)."""
    s = make_settings(docs_tree)
    run_backfill(s, tiny)
    before = stored_points(s, vectors=True)
    (docs_tree / "guide" / "b.md").unlink()
    asked: list[int] = []

    def stop() -> bool:  # asked before each group: true from the second on
        asked.append(1)
        return len(asked) > 1

    with build_indexer(s, tiny, group_docs=1) as indexer:
        with pytest.raises(StoreError, match="stopping; verify not done, nothing repaired"):
            verify(indexer, repair=True, stop=stop)
        assert len(asked) == 2
        assert not verify(indexer).in_sync
    assert stored_points(s, vectors=True) == before
