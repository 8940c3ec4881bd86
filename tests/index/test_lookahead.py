"""A one-shot run counts what it will embed before the model loads: the groups
held back and handed on, the count the embedder gets, and, with the real
model and figures recorded for this machine, a small run (and a run that
embeds nothing) in a process that never imports torch, a large one on the
fastest backend, and the choice in the summary and in status."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdindex.config import Settings
from mdindex.index import lookahead
from mdindex.index.indexer import Hooks
from mdindex.index.lookahead import tokens
from mdindex.index.summary import Summary
from mdindex.index.verify import plan_all
from mdindex.runtime import make_models
from tests.cli_helper import mdindex
from tests.conftest import (
    SLOW_TORCH,
    SPEED,
    TinyEmbedder,
    build_indexer,
    plant_measurement,
    run_backfill,
    same_points,
    stored_points,
)


class Counting(TinyEmbedder):
    """A tiny embedder with a choice to make: it asks for ``limit`` tokens of
    lookahead and keeps what each load was told."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.runs: list[tuple[int, int] | None] = []
        self.embedded_before_load = 0

    def lookahead(self) -> int:
        return 0 if self.runs else self.limit

    def load(self, run: tuple[int, int] | None = None) -> None:
        self.embedded_before_load = self.texts_embedded
        self.runs.append(run)


def _docs(tmp_path: Path, count: int) -> Path:
    """A folder ``docs`` of ``count`` notes of two sections each."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(count):
        (root / f"note{i:03}.md").write_text(
            f"# Note {i}\n\nThe {i}th note says something about topic {i % 7}.\n\n"
            f"## Details\n\nMore about number {i} and its neighbours.\n",
            encoding="utf-8",
        )
    return root


def _expected_run(settings: Settings) -> tuple[int, int]:
    """The texts a cold run embeds and their tokens, planned apart."""
    with build_indexer(settings, TinyEmbedder()) as indexer:
        works, _ = plan_all(indexer, Summary())
    # plan_all drops token ids; plan them again as a run does
    models = make_models(settings)
    points = {p.vector_key: p for w in works for p in w.points}
    counted = {}
    for key, point in points.items():
        ids = models.counter.encode(point.embed_input).ids
        counted[key] = len(ids) + 2
    return len(points), sum(counted.values())


def test_a_small_run_loads_once_it_has_counted_everything(
    tmp_path: Path, make_settings: Any
) -> None:
    root = _docs(tmp_path, 40)
    settings = make_settings(root)
    embedder = Counting(limit=10_000_000)
    summary = run_backfill(settings, embedder)
    texts, count = _expected_run(settings)
    assert embedder.runs == [(texts, count)]
    assert embedder.embedded_before_load == 0  # nothing embedded before the count was known
    assert summary["chunks_embedded"] == texts
    # what is stored is what a run without counting stores
    plain = make_settings(root, state_dir=str(tmp_path / "plain"))
    run_backfill(plain, TinyEmbedder())
    assert same_points(stored_points(settings, vectors=True), stored_points(plain, vectors=True))


def test_a_run_past_the_lookahead_loads_the_fastest_without_counting_on(
    tmp_path: Path, make_settings: Any
) -> None:
    root = _docs(tmp_path, 600)  # more than one group of 256 documents
    settings = make_settings(root)
    embedder = Counting(limit=100)
    summary = run_backfill(settings, embedder)
    # loaded once the count passed 100 tokens, for the count so far (the backend
    # that finishes that many or more first): the first group of 256 documents
    ((texts, count),) = embedder.runs
    assert texts == 512 and count > 100
    assert embedder.embedded_before_load == 0
    assert summary["chunks_embedded"] == len(stored_points(settings)) == 1_200
    assert summary["files_changed"] == 600


def test_many_copies_of_known_text_are_not_held_past_hold_points(
    tmp_path: Path, make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies add nothing to the count, so only the bound on points held ends
    the counting: the groups are released, and memory stays bounded."""
    monkeypatch.setattr(lookahead, "HOLD_POINTS", 40)
    held: list[int] = []
    take = lookahead.Lookahead.take

    def watched(self: lookahead.Lookahead, group: Any) -> Any:
        out = take(self, group)
        held.append(self.points if self.held else 0)
        return out

    monkeypatch.setattr(lookahead.Lookahead, "take", watched)
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(100):
        (root / f"copy{i:03}.md").write_text("# Same\n\nThe very same text.\n\n## Again\n\nSame.\n")
    settings = make_settings(root)
    embedder = Counting(limit=10_000_000)
    with build_indexer(settings, embedder, group_docs=1) as indexer:
        summary = indexer.backfill()
    assert max(held) <= 40 + 2  # the bound, plus the group that passed it
    assert embedder.runs == [(2, embedder.runs[0][1])]  # two distinct texts, counted
    assert summary.chunks_embedded == 2 and summary.files_changed == 100
    assert len(stored_points(settings)) == 200


def test_a_section_moved_between_files_is_reused_as_without_counting(
    tmp_path: Path, make_settings: Any
) -> None:
    """Groups keep the order a run without counting writes them in: b.md gives
    up a section a.md takes, and b.md must not be written (deleting its old
    point) before a.md has looked the vector up."""
    shared = "A shared paragraph with rare words: zebra, quokka, axolotl."
    HEAD = "---\ntitle: T\n---\n\n"  # one title: the section embeds as the same text
    embedded = {}
    for mode in ("plain", "counting"):
        root = tmp_path / mode
        root.mkdir()
        (root / "a.md").write_text(HEAD + "## One\n\n" + "Alpha first paragraph. " * 40 + "\n")
        (root / "b.md").write_text(
            HEAD + "## Two\n\n" + "Beta first paragraph. " * 40 + f"\n\n## Shared\n\n{shared}\n"
        )
        settings = make_settings(root, state_dir=str(tmp_path / f"state-{mode}"))
        with build_indexer(settings, TinyEmbedder(), group_docs=1) as indexer:
            indexer.backfill()
        (root / "a.md").write_text(
            HEAD + "## One\n\n" + "Alpha, edited. " * 40 + f"\n\n## Shared\n\n{shared}\n"
        )
        (root / "b.md").write_text(HEAD + "## Two\n\n" + "Beta first paragraph. " * 40 + "\n")
        (root / "c.md").write_text((root / "b.md").read_text())  # known text only
        embedder = Counting(10_000_000) if mode == "counting" else TinyEmbedder()
        with build_indexer(settings, embedder, group_docs=1) as indexer:
            embedded[mode] = indexer.backfill().chunks_embedded
        if mode == "counting":
            assert embedder.runs == [(embedded[mode], embedder.runs[0][1])]
    assert embedded["counting"] == embedded["plain"] == 1  # a.md's new text alone


def test_a_stop_while_groups_are_held_writes_none_of_them(
    tmp_path: Path, make_settings: Any
) -> None:
    root = _docs(tmp_path, 20)
    settings = make_settings(root)
    asked = {"n": 0}

    def stop() -> bool:
        asked["n"] += 1
        return asked["n"] > 5  # after five groups were read and held

    embedder = Counting(limit=10_000_000)
    with build_indexer(settings, embedder, group_docs=1, hooks=Hooks(stop_requested=stop)) as ix:
        summary = ix.backfill()
        assert summary.interrupted and summary.files_changed == 0
        assert ix.counts()[0] == 0
    assert embedder.runs == [] and stored_points(settings) == {}
    summary = run_backfill(settings, embedder)  # the next run picks them up
    assert summary["files_changed"] == 20 and len(stored_points(settings)) == 40


def test_a_run_that_embeds_nothing_loads_nothing(tmp_path: Path, make_settings: Any) -> None:
    root = _docs(tmp_path, 5)
    settings = make_settings(root)
    run_backfill(settings, TinyEmbedder())
    before = stored_points(settings, vectors=True)
    (root / "note000.md").rename(root / "renamed.md")  # its vectors are reused
    (root / "note001.md").unlink()
    embedder = Counting(limit=10_000_000)
    summary = run_backfill(settings, embedder)
    assert embedder.runs == [] and summary["chunks_embedded"] == 0
    assert summary["files_changed"] == 1 and summary["points_deleted"] == 4
    after = stored_points(settings, vectors=True)
    moved = [p for p in after.values() if p["doc_path"] == "renamed.md"]
    was = {p["text"]: p["_vector"] for p in before.values() if p["doc_path"] == "note000.md"}
    assert len(moved) == 2
    assert all(p["_vector"] == was[p["text"]] for p in moved)


def test_tokens_are_the_models_with_its_special_tokens(tmp_path: Path, make_settings: Any) -> None:
    root = _docs(tmp_path, 1)
    settings = make_settings(root)
    models = make_models(settings)
    with build_indexer(settings, TinyEmbedder()) as indexer:
        changes = indexer.changes()
        groups = list(indexer.groups.read(changes.files, lambda ref: "", Summary(), None))
        (work,) = [w for g in groups for w in indexer.groups.plan(g, Summary())]
    for point in work.points:
        assert point.token_ids is not None
        want = len(models.counter.encode(point.embed_input).ids) + 2
        assert tokens(point) == want
        guessed = tokens(dataclasses.replace(point, token_ids=None))  # 3 characters a token
        assert guessed == len(point.embed_input) // 3 + 2


# -- with the real model, in processes of their own -----------------------------

RUN = """
import json, sys
from mdindex.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code,
                  "torch": "torch" in sys.modules,
                  "st": "sentence_transformers" in sys.modules,
                  "transformers": "transformers" in sys.modules}), file=sys.stderr)
"""


def _backfill(
    root: Path, state: Path, cache: Path, command: str = "backfill"
) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [sys.executable, "-c", RUN, command, str(root), "--state-dir", str(state), "--json"],
        capture_output=True,
        text=True,
        env=os.environ | {"HF_HUB_OFFLINE": "1", "MDINDEX_CACHE_DIR": str(cache)},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout, out.stderr[-3000:]
    modules = json.loads(out.stderr.strip().splitlines()[-1])
    return json.loads(out.stdout), modules


@pytest.mark.slow
@pytest.mark.model
def test_small_runs_and_runs_that_embed_nothing_never_import_torch(
    tmp_path: Path, onnx_cache: Path, real_embedder: Any
) -> None:
    plant_measurement(onnx_cache, SLOW_TORCH, SPEED)
    root = _docs(tmp_path, 5)  # a rename and a delete: 2 of 5 gone, within the guard
    state = tmp_path / "state"

    summary, modules = _backfill(root, state, onnx_cache)  # a first sync of a small folder
    assert not (modules["torch"] or modules["st"] or modules["transformers"]), modules
    assert summary["chunks_embedded"] == 10
    choice = summary["embedding"]
    assert (choice["name"], choice["texts"]) == ("onnx-fp32", 10)
    assert set(choice["expected_s"]) >= {"onnx-fp32", "torch-fp32"}
    assert choice["expected_s"]["onnx-fp32"] < 1.0 < 7.0 < choice["expected_s"]["torch-fp32"]
    assert choice["reason"].startswith("first to finish 10 texts of ")

    # the vectors are the model's: an index torch fp32 built holds the same points
    got = stored_points(Settings(roots=[str(root)], state_dir=state), vectors=True)
    by_torch = Settings(roots=[str(root)], state_dir=tmp_path / "torch")
    run_backfill(by_torch, real_embedder)
    want = stored_points(by_torch, vectors=True)
    assert sorted(got) == sorted(want) and len(got) == 10
    for pid, point in got.items():
        cosine = np.dot(np.asarray(point["_vector"]), np.asarray(want[pid]["_vector"]))
        assert cosine > 0.9999

    edited = root / "note001.md"
    edited.write_text(edited.read_text() + "\nOne more line.\n")
    (root / "note000.md").rename(root / "moved.md")
    (root / "note002.md").unlink()
    summary, modules = _backfill(root, state, onnx_cache)  # an edit, a rename, a delete
    assert not (modules["torch"] or modules["st"]), modules
    assert summary["chunks_embedded"] == 1 and summary["embedding"]["name"] == "onnx-fp32"

    (root / "moved.md").rename(root / "again.md")
    summary, modules = _backfill(root, state, onnx_cache)  # a rename alone: nothing to embed
    assert summary["chunks_embedded"] == 0 and "embedding" not in summary
    assert not (modules["torch"] or modules["st"]), modules
    summary, modules = _backfill(root, state, onnx_cache)  # a no-op
    assert summary["files_changed"] == 0 and not modules["torch"]
    # verify re-embeds its sample (every point, here) as a small run: torch took 6.7 s
    report, modules = _backfill(root, state, onnx_cache, "verify")
    held = stored_points(Settings(roots=[str(root)], state_dir=state))
    assert report["in_sync"] and report["vectors_checked"] == len(held) == 8
    assert not modules["torch"], modules

    # status, after: the last run's choice and why, without a daemon
    cache = {"MDINDEX_CACHE_DIR": str(onnx_cache)}
    out = mdindex("status", root, "--state-dir", state, "--json", env=cache, backend=None)
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout)["embedding"]["last_run"]
    assert (last["name"], last["texts"]) == ("onnx-fp32", 1)
    assert last["reason"].startswith("first to finish 1 text of ")


@pytest.mark.slow
@pytest.mark.model
def test_a_large_run_loads_the_fastest(tmp_path: Path, onnx_cache: Path) -> None:
    # torch loads 0.1 s slower: worth it past 900 tokens (0.1 / (1/4500 - 1/9000))
    quick = {"torch-fp32": 0.3, "torch-bf16": 0.3, "onnx-fp32": 0.2}
    fastest = plant_measurement(onnx_cache, quick, SPEED)
    root = _docs(tmp_path, 30)
    summary, modules = _backfill(root, tmp_path / "state", onnx_cache)
    assert summary["chunks_embedded"] == 60
    assert summary["embedding"]["name"] == fastest == "torch-fp32"
    # one group of 30 documents passed the 900 tokens: chosen for its count
    assert summary["embedding"]["texts"] == 60
    assert modules["torch"]


@pytest.mark.slow
@pytest.mark.model
def test_where_the_export_is_also_fastest_no_run_imports_torch(
    tmp_path: Path, onnx_cache: Path
) -> None:
    """Nothing to count (the export loads first and runs fastest): the run loads
    what the measurement chose, from the cache, and that is the export."""
    fast_export = {"torch-fp32": 4_000.0, "torch-bf16": 3_000.0, "onnx-fp32": 5_000.0}
    assert plant_measurement(onnx_cache, SLOW_TORCH, fast_export) == "onnx-fp32"
    root = _docs(tmp_path, 30)
    summary, modules = _backfill(root, tmp_path / "state", onnx_cache)
    assert summary["chunks_embedded"] == 60
    assert summary["embedding"]["name"] == "onnx-fp32" and "texts" not in summary["embedding"]
    assert not (modules["torch"] or modules["st"] or modules["transformers"]), modules
