"""The README's landing page runs as written: its next steps, in order, on a
copy of examples/docs, with the real model and the embedded store."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helper import environment

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def blocks(section: str) -> list[list[str]]:
    """The shell lines of each ```sh block under a ``## section`` heading."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else len(text)]
    found = re.findall(r"```sh\n(.*?)```", body, re.DOTALL)
    return [[line for line in block.splitlines() if line.strip()] for block in found]


def test_the_readme_stays_a_landing_page() -> None:
    assert len(README.read_text().splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", README.read_text()):
        assert (REPO / link).is_file(), link
    assert blocks("Two commands") == [
        [
            "./quickstart.sh      # install into .venv, index examples/docs, search it",
            "bash .ci/run         # install with the test extras, then lint, types and every test",
        ]
    ]


@pytest.mark.slow
@pytest.mark.model
def test_the_next_steps_run_as_written(tmp_path: Path) -> None:
    docs, state = tmp_path / "docs", tmp_path / "state"
    shutil.copytree(REPO / "examples" / "docs", docs)
    # as every spawn of the suite, on the ONNX export (tests/cli_helper.py)
    env = environment({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})

    def here(line: str) -> str:
        line = line.replace("examples/questions.yaml", str(REPO / "examples" / "questions.yaml"))
        return line.replace("examples/docs", str(docs)).replace(".mdindex", str(state))

    def run(line: str) -> str:
        done = subprocess.run(
            ["bash", "-c", here(line)], capture_output=True, text=True, env=env, timeout=600
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        return done.stdout

    # what quickstart.sh runs once it has installed mdindex, then the next steps
    quick = [line for line in (REPO / "quickstart.sh").read_text().splitlines()]
    quick = [line for line in quick if line.startswith("mdindex ")]
    assert len(quick) == 2 and "backfill examples/docs" in quick[0]
    assert "11 chunks embedded" in run(quick[0])
    assert "› The store" in run(quick[1]).splitlines()[0]
    first, watch, write, versions, evaluate, links = blocks("Next steps")
    assert "embeds nothing" in first[0]
    out = [run(line) for line in first]
    assert "0 chunks embedded" in out[0]
    assert "verify" in out[1].lower()
    assert json.loads(out[2])[0]["doc_path"].endswith("configuration.md")
    # as the index stores it (without --root, root "guide" and path "configuration.md")
    assert (json.loads(out[2])[0]["root"], json.loads(out[2])[0]["doc_path"]) == (
        "docs",
        "guide/configuration.md",
    )

    (line,) = watch
    daemon = subprocess.Popen(["bash", "-c", f"exec {here(line)}"], env=env)
    try:
        answer = run(write[0] + "\n" + write[1])  # at once: the client waits for the daemon
        assert "otters.md" in answer.split("\n", 1)[-1] or "otters.md" in answer
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0

    run(versions[0])
    listed = run(versions[1])
    assert "*" in listed and "token" in listed
    rows = json.loads(run(versions[1].split("#")[0] + " --json"))
    heading = next(r["fingerprint"] for r in rows if not r["live"])
    run(versions[2].replace("FINGERPRINT", heading))
    rows = json.loads(run(versions[1].split("#")[0] + " --json"))
    assert next(r for r in rows if r["live"])["fingerprint"] == heading

    # how well it answers: the shipped questions, then the headings
    scores = run(evaluate[0]).splitlines()
    assert scores[0] == "6 questions" and "*" in scores[2], scores
    assert "12 questions (heading paths)" in run(evaluate[1])  # otters.md is one more

    # links: index.md links to the page, and nothing is broken
    page = run(links[0])
    assert "backlinks (1):" in page and "docs:index.md:17  Example Docs › Getting help" in page
    assert run(links[1]).strip() == "no broken links"
    hits = json.loads(run(links[2] + " --json"))
    assert {h["doc_path"] for h in hits} == {"index.md"}  # only it has the tag
