"""`mdindex eval`: questions with every kind of gold, bad questions in one line,
two versions compared through a running daemon, and the heading self-check."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from mdindex.config import Settings
from mdindex.errors import ConfigError
from mdindex.query.evaluate import rank, score
from mdindex.query.questions import Gold, Question, load_questions
from tests.cli_helper import mdindex
from tests.conftest import TinyEmbedder, run_backfill, settings_for
from tests.daemon.test_as_a_process import start, stop

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENV = {
    "MDINDEX_QUIET_PERIOD_MS": "100",
    "MDINDEX_LOG_LEVEL": "WARNING",
    "MDINDEX_KEEP_VERSIONS": "2",
}


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    shutil.copytree(EXAMPLES / "docs", root)
    return root


def write_questions(path: Path, questions: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    return path


EVERY_KIND = [
    {"id": "path", "question": "Who answers questions on the forum?", "path": "index.md"},
    {
        "id": "quote",
        "question": "How do I fix missing or stale points?",
        "path": "guide/troubleshooting.md",
        # re-wrapped: the words in order, whatever whitespace between them
        "quote": "fixes them\n   without re-embedding",
    },
    {
        "id": "lines",
        "question": "How do I share one index between machines?",
        "path": "guide/configuration.md",
        "lines": [12, 13],
    },
    {
        "id": "chars",
        "question": "What happens to a file that is not valid UTF-8?",
        "path": "guide/troubleshooting.md",
        "chars": [240, 300],
    },
    {
        "id": "evalset",
        "question": "Which Python version does the tool need?",
        "gold": [{"doc_path": "index.md", "char_start": 250, "char_end": 330}],
    },
]


def test_every_kind_of_gold_is_a_span_of_the_file(tmp_path: Path, docs: Path) -> None:
    s = settings_for(tmp_path, [docs])
    run_backfill(s, TinyEmbedder())
    questions = load_questions(s, write_questions(tmp_path / "q.jsonl", EVERY_KIND))
    spans = {q.id: q.gold[0] for q in questions}
    index = (docs / "index.md").read_text()
    trouble = (docs / "guide/troubleshooting.md").read_text()
    config = (docs / "guide/configuration.md").read_text()
    assert (spans["path"].start, spans["path"].end) == (0, len(index))
    quote = spans["quote"]
    assert trouble[quote.start : quote.end] == "fixes them without re-embedding"
    lines = spans["lines"]
    assert config[lines.start : lines.end] == "".join(config.splitlines(True)[11:13])
    assert (spans["chars"].start, spans["chars"].end) == (240, 300)
    assert spans["evalset"] == Gold("docs", "index.md", 250, 330)
    # the YAML file shipped with the examples loads too
    assert len(load_questions(s, EXAMPLES / "questions.yaml")) == 6


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ({"id": "q1", "question": "x", "path": "nope.md"}, "question q1: no such document"),
        (
            {"id": "q2", "question": "x", "path": "index.md", "quote": "not in it"},
            "question q2: quote 'not in it' is not in docs:index.md",
        ),
        (
            {"id": "q3", "question": "x", "path": "index.md", "lines": [5, 900]},
            "question q3: lines 5-900 are not within 1-",
        ),
        ({"id": "q4", "question": "x", "path": "../outside.md"}, "must be relative"),
        ({"id": "q5", "question": "x", "path": ".env"}, "is not an indexed document"),
        ({"id": "q6", "question": "", "path": "index.md"}, "question q6: no question text"),
        ({"id": "q7", "question": "x", "path": "index.md", "chars": "a"}, "two whole numbers"),
        ({"id": "q8", "question": "x", "path": "new.md"}, "not an indexed document"),
        ({"id": "q9", "question": "x", "root": "other", "path": "index.md"}, "no root labelled"),
    ],
)
def test_a_bad_question_is_one_line_naming_it(
    tmp_path: Path, docs: Path, question: dict[str, object], reason: str
) -> None:
    (tmp_path / "outside.md").write_text("# Outside\n\nSecret.\n")
    (docs / ".env").write_text("TOKEN=secret\n")
    s = settings_for(tmp_path, [docs])
    run_backfill(s, TinyEmbedder())
    (docs / "new.md").write_text("# New\n\nNot indexed yet.\n")
    with pytest.raises(ConfigError) as caught:
        load_questions(s, write_questions(tmp_path / "q.jsonl", [question]))
    message = str(caught.value)
    assert reason in message and "\n" not in message, message


# -- generated hostile question files -----------------------------------------

FOUND = Path(__file__).with_name("examples") / "eval"
PIECES: list[Any] = [
    "index.md",
    "guide/troubleshooting.md",
    "../outside.md",
    "/etc/passwd",
    ".env",
    "index.md\x00",
    "a\ud800b",
    "\u202e\n\r",
    "x" * 5000,
    "",
    " ",
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    True,
    None,
    [],
    {},
    [1],
    [3, 1],
    [1, 2**64],
]
values = st.recursive(
    st.sampled_from(PIECES) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = [
    "question",
    "path",
    "doc_path",
    "root",
    "quote",
    "lines",
    "chars",
    "char_start",
    "gold",
    "id",
]
questions = st.dictionaries(st.sampled_from(KEYS), values, max_size=6) | values
raw_lines = st.sampled_from(
    ["[" * 5000 + "]" * 5000, "{", "\ufeff{}", "# comment", "&a [*a, *a]", "- &x 1\n- *x", "\x00"]
)


def check_file(s: Settings, docs: Path, path: Path) -> None:
    """A hostile questions file: questions whose gold spans lie inside their
    files, or one line of ConfigError; nothing else, nothing read outside."""
    try:
        loaded = load_questions(s, path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("eval: ") and len(message) < 2000, message[:300]
        assert not any(ord(c) < 32 or ord(c) == 127 for c in message), message
        return
    for q in loaded:
        for g in q.gold:
            text = (docs / g.path).read_text()
            assert (docs / g.path).resolve().is_relative_to(docs.resolve())
            assert 0 <= g.start < g.end <= len(text) or g.start == g.end == len(text) == 0


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path]:
    tmp = tmp_path_factory.mktemp("hostile-eval")
    docs = tmp / "docs"
    shutil.copytree(EXAMPLES / "docs", docs)
    (tmp / "outside.md").write_text("# Outside\n\nSecret.\n")
    s = settings_for(tmp, [docs])
    run_backfill(s, TinyEmbedder())
    return s, docs


def write_example(tmp: Path, name: str, body: bytes) -> Path:
    path = tmp / name
    path.write_bytes(body)
    return path


@pytest.mark.parametrize("found", sorted(FOUND.glob("*")), ids=lambda p: p.name)
def test_found_question_files_stay_fixed(indexed: tuple[Settings, Path], found: Path) -> None:
    s, docs = indexed
    check_file(s, docs, found)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,  # what failed is kept in examples/eval and replayed above
)
@given(
    items=st.lists(questions, min_size=0, max_size=4),
    extra=st.lists(raw_lines, max_size=2),
    yaml_file=st.booleans(),
)
def test_generated_question_files_fail_in_one_line(
    indexed: tuple[Settings, Path],
    tmp_path: Path,
    items: list[Any],
    extra: list[str],
    yaml_file: bool,
) -> None:
    import yaml

    s, docs = indexed
    if yaml_file:
        try:
            body = yaml.safe_dump(items, allow_unicode=True) + "\n".join(extra)
        except yaml.YAMLError:
            body = "\n".join(extra)
        name = "q.yaml"
    else:
        lines = [json.dumps(i, ensure_ascii=False, allow_nan=True) for i in items] + extra
        body, name = "\n".join(lines), "q.jsonl"
    data = body.encode("utf-8", "surrogatepass")
    path = write_example(tmp_path, name, data)
    try:
        check_file(s, docs, path)
    except BaseException:
        if current_build_context().is_final:
            FOUND.mkdir(parents=True, exist_ok=True)
            kept = FOUND / f"{hashlib.sha256(data).hexdigest()[:16]}{Path(name).suffix}"
            kept.write_bytes(data)
            print(f"kept as {kept}")
        raise


def test_a_questions_file_that_is_no_file_is_one_line(tmp_path: Path, docs: Path) -> None:
    """Found by the hostile review: a FIFO as the questions file hung for ever."""
    s = settings_for(tmp_path, [docs])
    run_backfill(s, TinyEmbedder())
    fifo = tmp_path / "q.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_questions(s, fifo)
    with pytest.raises(ConfigError, match="cannot read"):
        load_questions(s, tmp_path / "missing.jsonl")
    last = write_questions(
        tmp_path / "l.jsonl", [{"question": "x", "path": "index.md", "lines": [18, 18]}]
    )
    with pytest.raises(ConfigError, match="lines 18-18 are not within 1-17"):
        load_questions(s, last)  # index.md has 17 lines and a last newline


def test_headings_that_cannot_be_asked_are_left_out(tmp_path: Path) -> None:
    """Found by the hostile review: an empty heading, or a heading path over the
    query limit, stopped --headings with an internal error."""
    from mdindex.query.questions import heading_questions

    root = tmp_path / "docs"
    root.mkdir()
    (root / "empty.md").write_text("#\n\nText under an empty heading.\n")
    deep = "".join(f"{'#' * n} {'word ' * 300}\n\nText {n}.\n\n" for n in range(1, 7))
    (root / "deep.md").write_text(deep)
    (root / "fine.md").write_text("# Fine\n\nA heading to ask.\n")
    s = settings_for(tmp_path, [root])
    run_backfill(s, TinyEmbedder())
    for seed in range(5):
        questions = heading_questions(s, 100, seed)
        assert "Fine" in [q.text for q in questions]
        assert all(q.text.strip() and len(q.text) <= 4096 for q in questions)


def test_scores_count_spans_that_overlap() -> None:
    q = Question("a", "x", (Gold("docs", "a.md", 10, 20), Gold("docs", "b.md", 0, 5)))
    hit_a = {"root": "docs", "doc_path": "a.md", "char_start": 15, "char_end": 40}
    hit_b = {"root": "docs", "doc_path": "b.md", "char_start": 5, "char_end": 9}  # touches only
    miss = {"root": "notes", "doc_path": "a.md", "char_start": 0, "char_end": 99}
    assert rank(q, [miss, hit_a]) == 2
    scores = score([q], [[miss, hit_a, hit_b]])
    assert scores["recall@1"] == 0 and scores["recall@3"] == 0.5 and scores["mrr@10"] == 0.5


@pytest.mark.slow
@pytest.mark.model
def test_questions_and_two_versions_through_a_running_daemon(
    tmp_path: Path, indexed_copy: Any
) -> None:
    """The shipped questions, then a second version built beside the live one
    (keep_versions = 2), compared through the daemon; the bad file's exit.
    (Processes, not main() here: an eval of every version at once after the
    daemon starts finds the version it is switching to open in the daemon.)"""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return mdindex(*args, env=ENV, timeout=600)

    docs, state = indexed_copy(EXAMPLES / "docs")
    where = ["--state-dir", str(state)]
    first = cli("backfill", str(docs), *where)
    assert first.returncode == 0, first.stderr
    second = cli("backfill", str(docs), "--strategy", "token", *where)
    assert second.returncode == 0, second.stderr
    proc, _daemon = start(docs, state)
    try:
        run = cli("eval", str(EXAMPLES / "questions.yaml"), "--root", str(docs), *where, "--json")
        assert run.returncode == 0, run.stderr
        [row] = json.loads(run.stdout)
        assert row["live"] and row["mode"] == "hybrid" and row["questions"] == 6
        assert row["recall@10"] == 1.0 and row["mrr@10"] >= 0.75, row
        # which languages the questions are in, and which the model reads
        assert sum(row["question_languages"].values()) == 6 and row["model_languages"] == ["en"]
        run = cli(
            "eval",
            str(EXAMPLES / "questions.yaml"),
            "--root",
            str(docs),
            "--versions",
            "all",
            "--modes",
            "dense,hybrid",
            *where,
            "--json",
        )
        assert run.returncode == 0, run.stderr
        rows = json.loads(run.stdout)
        assert [(r["live"], r["mode"]) for r in rows] == [
            (True, "dense"),
            (True, "hybrid"),
            (False, "dense"),
            (False, "hybrid"),
        ]
        assert len({r["version"] for r in rows}) == 2
        assert all(r["recall@10"] >= 0.8 for r in rows), rows
        assert rows[0]["gains"] == 0.0
        # the heading self-check, every version: each section's path finds it
        run = cli("eval", "--headings", "--versions", "all", "--root", str(docs), *where, "--json")
        assert run.returncode == 0, run.stderr
        rows = json.loads(run.stdout)
        assert len(rows) == 2 and rows[0]["questions"] == 11
        assert all(r["recall@10"] >= 0.9 for r in rows), rows
        text = cli("eval", "--headings", "5", "--root", str(docs), *where)
        assert text.returncode == 0 and "5 questions (heading paths)" in text.stdout
        assert "questions by language: " in text.stdout and "the model reads en" in text.stdout
        bad = write_questions(
            tmp_path / "bad.jsonl", [{"id": "b1", "question": "x", "path": "zz.md"}]
        )
        run = cli("eval", str(bad), "--root", str(docs), *where)
        assert run.returncode == 2
        assert run.stderr.strip().splitlines() == [
            "mdindex: error: eval: question b1: no such document: docs:zz.md "
            "(or a link, which is not read)"
        ]
        quote = write_questions(
            tmp_path / "quote.jsonl",
            [{"id": "b2", "question": "x", "path": "index.md", "quote": "not in the file"}],
        )
        run = cli("eval", str(quote), "--root", str(docs), *where)
        assert run.returncode == 2
        assert run.stderr.strip().splitlines() == [
            "mdindex: error: eval: question b2: quote 'not in the file' is not in docs:index.md"
        ]
        run = cli("eval", "--root", str(docs), *where)
        assert run.returncode == 2 and "give a QUESTIONS file" in run.stderr
    finally:
        code, _ = stop(proc)
    assert code == 0


@pytest.mark.slow
@pytest.mark.serial
def test_a_hostile_questions_file_is_read_in_linear_time(tmp_path: Path) -> None:
    """Found by a hostile review: a 1,000-character quote against a 5 MB
    document took 21 s (regex backtracking), `lines` answers rebuilt the line
    table for every answer, and 10,000 questions were allowed."""
    import time

    from mdindex.query.questions import MAX_QUESTIONS

    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.md").write_text(("a " * 50 + "\n") * 50_000)  # 5 MB, 50,000 lines
    s = settings_for(tmp_path, [root])
    run_backfill(s, TinyEmbedder())
    quote = {"question": "q", "path": "big.md", "quote": "a " * 499 + "b"}
    lines = [
        {"question": f"q{i}", "path": "big.md", "lines": [i + 1, i + 2]}
        for i in range(MAX_QUESTIONS - 1)
    ]
    missing = write_questions(tmp_path / "quote.jsonl", [quote])
    started = time.monotonic()
    with pytest.raises(ConfigError, match="is not in"):
        load_questions(s, missing)
    assert time.monotonic() - started < 3
    ok = [{"question": "q", "path": "big.md", "quote": "a\n" + "a " * 400}, *lines]
    started = time.monotonic()
    assert len(load_questions(s, write_questions(tmp_path / "ok.jsonl", ok))) == MAX_QUESTIONS
    assert time.monotonic() - started < 10
    assert MAX_QUESTIONS <= 2_000
    with pytest.raises(ConfigError, match=f"over {MAX_QUESTIONS} questions"):
        load_questions(s, write_questions(tmp_path / "many.jsonl", [*ok, quote]))
