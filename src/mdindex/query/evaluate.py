"""`mdindex eval`: how well search answers the user's own questions, version
against version and mode against mode (the questions: ``questions``).

Questions run through the CLI's search call (through the daemon when one
holds the store); a version other than the live one is opened here, with
the model it was built with.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from mdindex.config import Settings
from mdindex.documents.files import printable
from mdindex.documents.language import detect
from mdindex.embedding.model import model_languages_of
from mdindex.errors import ConfigError, MdindexError
from mdindex.index.search import MODES, QUERY_MIN_WEIGHT, Query
from mdindex.outside import quoted
from mdindex.query.client import IndexClient
from mdindex.query.questions import Question

KS = (1, 3, 5, 10)

Ask = Callable[[Query], list[dict[str, Any]]]


# -- asking and scoring -----------------------------------------------------------


def answer(questions: Sequence[Question], ask: Ask, mode: str) -> list[list[dict[str, Any]]]:
    return [ask(Query(q.text, k=max(KS), mode=mode)) for q in questions]


def rank(question: Question, hits: list[dict[str, Any]]) -> int | None:
    """The rank (1-based) of the first hit answering the question, in the top 10."""
    for i, hit in enumerate(hits[: max(KS)]):
        if any(g.answered_by(hit) for g in question.gold):
            return i + 1
    return None


def score(questions: Sequence[Question], answers: list[list[dict[str, Any]]]) -> dict[str, float]:
    """recall@k (share of gold answers a hit in the top k overlaps) and MRR@10."""
    out: dict[str, list[float]] = {key: [] for key in [*(f"recall@{k}" for k in KS), "mrr@10"]}
    for q, hits in zip(questions, answers, strict=True):
        for k in KS:
            found = sum(any(g.answered_by(h) for h in hits[:k]) for g in q.gold)
            out[f"recall@{k}"].append(found / len(q.gold))
        first = rank(q, hits)
        out["mrr@10"].append(0.0 if first is None else 1.0 / first)
    return {key: round(statistics.fmean(values), 4) for key, values in out.items()}


def compare(
    settings: Settings,
    client: IndexClient,
    questions: Sequence[Question],
    versions: str,
    modes: Sequence[str],
) -> list[dict[str, Any]]:
    """One row per version and mode: its scores, and the share of questions it
    answers (in its top 10) that the live version in the first mode misses."""
    from mdindex.versions.catalog import Catalog

    modes = list(dict.fromkeys(modes))  # each once, in the order given
    if not modes:
        raise ConfigError(f"eval: give at least one mode ({', '.join(MODES)})")
    for mode in modes:
        if mode not in MODES:
            mode = printable(mode[:40])
            raise ConfigError(f"eval: mode must be one of {', '.join(MODES)}, not {quoted(mode)}")
    if versions not in ("live", "all"):  # "x" was taken for all
        raise ConfigError(f"eval: versions must be live or all, not {quoted(versions)}")
    catalog = Catalog.load(settings)
    live = catalog.live or ""
    fps = (
        [live]
        if versions == "live"
        else [live]
        + [fp for fp, v in catalog.versions.items() if fp != live and v.status == "complete"]
    )
    rows: list[dict[str, Any]] = []
    baseline: list[bool] = []
    # which languages the questions are in, and which each version's model reads
    found_langs = Counter(detect(q.text, min_weight=QUERY_MIN_WEIGHT) for q in questions)
    question_langs = dict(found_langs.most_common())
    for fp in fps:
        model_langs = list(model_languages_of(catalog.settings_for(settings, fp)))
        ask, close = (client.search, None) if fp == live else _open_version(settings, catalog, fp)
        try:
            for mode in modes:
                answers = answer(questions, ask, mode)
                found = [rank(q, a) is not None for q, a in zip(questions, answers, strict=True)]
                if not baseline:
                    baseline = found
                gained = sum(f and not b for f, b in zip(found, baseline, strict=True))
                rows.append(
                    {
                        "version": fp[:12] or "(none)",
                        "live": fp == live,
                        "mode": mode,
                        "questions": len(questions),
                        **score(questions, answers),
                        "gains": round(gained / len(questions), 4),
                        "question_languages": question_langs,
                        "model_languages": model_langs,
                    }
                )
        finally:
            if close is not None:
                close()
    return rows


def _open_version(settings: Settings, catalog: Any, fp: str) -> tuple[Ask, Callable[[], None]]:
    """Search a kept version here: its own model and store."""
    from mdindex.runtime import make_models, make_store

    vs = catalog.settings_for(settings, fp)
    models = make_models(vs, queries_only=True)
    store = make_store(vs)
    try:
        store.open()
        if not store.exists():  # searching it would create nothing, and find nothing
            raise ConfigError(f"version {fp} has no collection in the store ({store.where})")
    except MdindexError as exc:
        raise ConfigError(f"eval: version {fp}: {exc}") from None

    def ask(query: Query) -> list[dict[str, Any]]:
        return models.search(store, query)

    return ask, store.close
