"""The ONNX export and the measured choice, with the real model: the export gives
torch's vectors, a cached choice is reused, and a changed model measures again
(what `load` chooses, and the queries-only path without torch: test_loading)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from mdindex.config import DEFAULT_MODEL
from mdindex.embedding import calibration, onnx_export
from mdindex.embedding.embedder import ModelEmbedder
from mdindex.embedding.model import resolve_model
from mdindex.embedding.samples import TEXTS
from tests.conftest import REPO

pytestmark = pytest.mark.model

DOCS = [p.read_text() for p in sorted((REPO / "examples" / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelEmbedder]:
    """One first load in a fresh cache folder: export and measurement."""
    cache = tmp_path_factory.mktemp("cache")
    embedder = ModelEmbedder(resolve_model(DEFAULT_MODEL), device="cpu", cache_dir=cache)
    embedder.load()
    return cache, embedder


@pytest.mark.slow
def test_a_first_load_exports_measures_and_caches(measured: tuple[Path, ModelEmbedder]) -> None:
    cache, embedder = measured
    choice = embedder.choice
    assert choice is not None and choice.source == "measured"
    assert {"torch-fp32", "onnx-fp32"} <= set(choice.chunks_per_s) == set(choice.tokens_per_s)
    passing = [n for n, g in choice.gate.items() if g["passed"]]
    # the fastest on chunk-sized texts, with each candidate's load time recorded
    assert choice.name == max(passing, key=lambda n: choice.tokens_per_s[n])
    assert set(choice.load_s) == set(choice.chunks_per_s)
    assert all(seconds > 0 for seconds in choice.load_s.values())
    export = onnx_export.find_export(embedder.info, cache)
    assert export is not None and export.path.stat().st_size > 10_000_000
    assert export.weights_sha256 == onnx_export.weights_hash(embedder.info)
    (saved,) = (cache / "calibration").glob("*.json")
    data = json.loads(saved.read_text())
    assert data["choice"]["name"] == choice.name
    assert data["key"]["model_sha256"] == export.weights_sha256
    assert data["key"]["cpu"]
    assert embedder.describe()["name"] == choice.name


@pytest.mark.slow  # the module's measurement (13.6 s) is the slow tests' too
def test_a_cached_choice_is_reused_without_measuring(measured: tuple[Path, ModelEmbedder]) -> None:
    cache, first = measured
    (saved,) = (cache / "calibration").glob("*.json")
    before = saved.stat().st_mtime_ns
    again = ModelEmbedder(first.info, device="cpu", cache_dir=cache)
    assert again.describe()["source"] == "cache"  # what status says before loading
    again.load()
    assert again.choice is not None and again.choice.source == "cache"
    assert again.choice.name == first.choice.name if first.choice else False
    assert saved.stat().st_mtime_ns == before
    assert len(list((cache / "calibration").glob("*.json"))) == 1


@pytest.mark.slow
def test_a_changed_model_measures_again(
    tmp_path: Path, measured: tuple[Path, ModelEmbedder]
) -> None:
    cache = measured[0]
    model_dir = tmp_path / "model"
    shutil.copytree(resolve_model(DEFAULT_MODEL).path, model_dir)
    config = model_dir / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"mdindex_test": 1}))
    changed = ModelEmbedder(resolve_model(str(model_dir)), device="cpu", cache_dir=cache)
    changed.load()
    assert changed.choice is not None and changed.choice.source == "measured"
    assert len(list((cache / "calibration").glob("*.json"))) == 2
    # and its own export, from its own weights hash
    export = onnx_export.find_export(changed.info, cache)
    first = onnx_export.find_export(measured[1].info, cache)
    assert export is not None and first is not None and export.path != first.path
    assert export.weights_sha256 != first.weights_sha256


@pytest.mark.slow
def test_onnx_vectors_match_torch_within_the_gate(
    measured: tuple[Path, ModelEmbedder], real_embedder: ModelEmbedder
) -> None:
    cache, first = measured
    onnx = ModelEmbedder(first.info, device="cpu", backend="onnx", cache_dir=cache)
    fp32 = real_embedder
    texts = TEXTS + DOCS + ["", "word " * 600, "`code` and CJK 文字"]
    got, want = onnx.embed(texts), fp32.embed(texts)
    assert onnx.choice is not None and onnx.choice.name == "onnx-fp32"
    assert fp32.precision == "fp32" and fp32.backend == "torch"
    assert onnx.choice.source == "setting" and onnx.loaded.model is None  # no torch
    verdict = calibration.gate(want, got)
    assert verdict["passed"] is True
    assert float(np.min(np.sum(got * want, axis=1))) > 0.9999


@pytest.mark.slow
def test_an_export_changed_after_it_was_checked_is_not_used(
    measured: tuple[Path, ModelEmbedder], real_embedder: ModelEmbedder, tmp_path: Path
) -> None:
    """Found by a hostile review: with the rows of the embedding matrix in
    model.onnx permuted, backfill ran silently on it ("lava eruption" found the
    chess note). The file's SHA-256 is recorded at the export and checked at
    each load: a changed file is refused, torch answers, and it is made again."""
    cache, first = measured
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    found = onnx_export.find_export(first.info, mine)
    assert found is not None and len(found.sha256) == 64
    real_embedder.load()  # the session's model, loaded here if no test on this worker did
    assert real_embedder.loaded is not None
    weights = real_embedder.loaded.model[0].auto_model.embeddings.word_embeddings.weight
    matrix = weights.detach().numpy().astype(np.float32).tobytes()
    data = bytearray(found.path.read_bytes())
    at = data.find(matrix[:4096])
    assert at > 0
    rows = np.frombuffer(bytes(data[at : at + len(matrix)]), dtype=np.float32).reshape(-1, 384)
    data[at : at + len(matrix)] = rows[::-1].tobytes()  # every row permuted
    found.path.write_bytes(bytes(data))
    texts = ["lava eruption", "a chess opening", *DOCS]
    onnx = ModelEmbedder(first.info, device="cpu", backend="onnx", cache_dir=mine)
    got, want = onnx.embed(texts), real_embedder.embed(texts)
    assert float(np.min(np.sum(got * want, axis=1))) > 0.999
    again = onnx_export.find_export(first.info, mine)
    assert again is None or again.path.read_bytes() != bytes(data)


@pytest.mark.slow
def test_an_export_made_while_this_one_waited_for_the_folder_is_taken_as_is(
    real_embedder: ModelEmbedder, export: onnx_export.Export, tmp_path: Path
) -> None:
    """Two processes sharing a cache (a daemon and a search started together,
    the test suite's workers) each exported into one folder at once, and the
    meta.json one wrote could name the other's model.onnx. The export is made
    under the folder's lock: one made meanwhile is used, not made again."""
    import threading

    real_embedder.load()  # the session's torch model, which an export traces
    assert real_embedder.loaded is not None
    model, features = real_embedder.loaded.model, real_embedder.loaded.features
    cache = tmp_path / "cache"
    folder = cache / "onnx" / export.path.parent.name
    got: list[onnx_export.Export | None] = []
    with onnx_export.exporting(real_embedder.info, cache):  # another process exports
        thread = threading.Thread(
            target=lambda: got.append(
                onnx_export.export(real_embedder.info, cache, model, features)
            )
        )
        thread.start()
        for name in ("model.onnx", "meta.json"):  # what the other process made
            shutil.copyfile(export.path.parent / name, folder / name)
        theirs = (folder / "model.onnx").stat().st_ino
    thread.join()
    assert got and got[0] is not None and got[0].path == folder / "model.onnx"
    assert got[0].sha256 == export.sha256
    assert (folder / "model.onnx").stat().st_ino == theirs  # not made again over it
    assert not list(folder.glob(".tmp-*"))


def test_a_cache_folder_others_can_write_is_refused_in_one_line(tmp_path: Path) -> None:
    """As ssh refuses a key file others can write: what is cached decides the vectors."""
    from mdindex.errors import ConfigError

    cache = tmp_path / "cache"
    (cache / "onnx").mkdir(parents=True)
    info = resolve_model(DEFAULT_MODEL)
    for folder in (cache, cache / "onnx"):
        folder.chmod(0o777)
        with pytest.raises(ConfigError, match=r"writable by others \(mode 777\).*chmod go-w"):
            onnx_export.find_export(info, cache)
        folder.chmod(0o700)
    assert onnx_export.find_export(info, cache) is None


def test_an_export_others_can_write_is_refused_in_one_line(
    measured: tuple[Path, ModelEmbedder], tmp_path: Path
) -> None:
    """Found by a hostile review: only the cache and its onnx/ and calibration/
    folders were checked, so a model's own folder, model.onnx or meta.json
    open to others (who could write a new file and its SHA-256 beside it) was
    used without a word."""
    from mdindex.errors import ConfigError

    cache, first = measured
    mine = tmp_path / "cache"
    shutil.copytree(cache, mine)
    found = onnx_export.find_export(first.info, mine)
    assert found is not None
    for path, mode in (
        (found.path.parent, 0o700),
        (found.path, 0o600),
        (found.path.parent / "meta.json", 0o600),
    ):
        path.chmod(mode | 0o022)
        with pytest.raises(ConfigError, match=r"writable by others.*chmod go-w"):
            onnx_export.find_export(first.info, mine)
        path.chmod(mode)
    assert onnx_export.find_export(first.info, mine) is not None


@pytest.mark.parametrize("plant", ["fifo", "link", "folder"])
def test_an_export_lock_that_is_not_a_plain_file_leaves_torch_at_once(
    tmp_path: Path, plant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a hostile review: the lock was opened with open(path, "a"), so a
    FIFO there blocked the load for ever, a link was followed and its target
    made, and a folder failed the load. Each is now one line, and no export."""
    cache = tmp_path / "cache"
    info = resolve_model(DEFAULT_MODEL)
    folder = cache / "onnx" / onnx_export.export_key(info)
    folder.mkdir(parents=True)
    lock = folder.parent / f"{folder.name}.lock"
    target = tmp_path / "made-through-the-link"
    planted = {"fifo": lambda: os.mkfifo(lock), "link": lambda: lock.symlink_to(target)}
    planted.get(plant, lock.mkdir)()
    assert onnx_export.export(info, cache, None, ()) is None  # the model is never touched
    (record,) = [r for r in caplog.records if "not exporting" in r.getMessage()]
    assert str(lock) in record.getMessage() and "\n" not in record.getMessage()
    assert not target.exists()
    assert not (folder / "model.onnx").exists()


def copied(export: onnx_export.Export, cache: Path) -> Path:
    """The run's export copied into ``cache``: its folder there."""
    folder = cache / "onnx" / export.path.parent.name
    folder.mkdir(parents=True)
    for name in ("model.onnx", "meta.json"):
        shutil.copyfile(export.path.parent / name, folder / name)
    return folder


def test_a_damaged_export_is_discarded_only_while_it_is_the_one_that_failed(
    export: onnx_export.Export, tmp_path: Path
) -> None:
    """Found by a review: discard removed the folder without the export's lock,
    so a process whose load failed could take away the export another had
    just made there, or the file another was writing."""
    info = resolve_model(DEFAULT_MODEL)
    cache = tmp_path / "cache"
    folder = copied(export, cache)
    failed = onnx_export.find_export(info, cache)
    assert failed is not None
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps(meta | {"sha256": "0" * 64}))  # made anew
    onnx_export.discard(failed)
    assert (folder / "model.onnx").is_file()  # not the export that failed: kept
    (folder / "meta.json").write_text(json.dumps(meta))
    with onnx_export.exporting(info, cache):  # another process holds the export's lock
        thread = threading.Thread(target=onnx_export.discard, args=(failed,))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive() and (folder / "model.onnx").is_file()  # it waits
    thread.join()
    assert not folder.exists() and onnx_export.find_export(info, cache) is None


def test_a_discard_waits_for_the_exports_lock_a_bounded_time(
    export: onnx_export.Export, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process that held the export's lock for ever (hung, or a hostile one
    sharing the cache) held every load that found a damaged export with it."""
    info = resolve_model(DEFAULT_MODEL)
    folder = copied(export, tmp_path / "cache")
    failed = onnx_export.find_export(info, tmp_path / "cache")
    assert failed is not None
    with onnx_export.exporting(info, tmp_path / "cache"):
        onnx_export.discard(failed, wait_s=0.3)  # returns, and leaves the folder
    assert (folder / "model.onnx").is_file()
    assert "left: its lock: held by another process for over 0.3 s" in caplog.text


def test_a_killed_exports_temporary_file_goes_at_the_next_export(
    export: onnx_export.Export, tmp_path: Path
) -> None:
    """An export killed while writing left its .tmp-*.onnx (90 MB) for ever."""
    info = resolve_model(DEFAULT_MODEL)
    cache = tmp_path / "cache"
    folder = copied(export, cache)
    (folder / ".tmp-killed.onnx").write_bytes(b"\0" * 1024)
    found = onnx_export.export(info, cache, None, ())  # there already: taken, model untouched
    assert found is not None and found.sha256 == export.sha256
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model.onnx"]
