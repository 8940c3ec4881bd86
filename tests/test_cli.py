"""The command line as users and scripts see it: real model, real embedded Qdrant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model


def mdindex(
    *args: str, env: dict[str, str] | None = None, timeout: int = 180
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mdindex", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def test_backfill_search_status_chunk_verify(docs_tree: Path, tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    r = mdindex("backfill", str(docs_tree), *state, "--json")
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
    ):
        assert key in summary

    r = mdindex("search", "how to install", "-k", "2", *state, "--json")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert len(hits) == 2 and hits[0]["section"] == "Install"
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

    r = mdindex("status", *state, "--json")
    status = json.loads(r.stdout)
    assert status["documents"] == 3 and status["points"] == summary["points_upserted"]
    assert status["last_sync"]

    r = mdindex("chunk", str(docs_tree / "index.md"), "--root", str(docs_tree), "--json")
    chunks = json.loads(r.stdout)
    assert [c["section"] for c in chunks] == ["Welcome", "Install"]
    assert "indexed_at" not in chunks[0] and chunks[0]["doc_path"] == "index.md"

    r = mdindex("verify", str(docs_tree), *state, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["in_sync"] is True

    (docs_tree / "guide" / "b.md").write_text("# Beta\n\nChanged behind the index.\n")
    r = mdindex("verify", str(docs_tree), *state, "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 4 and report["missing"] and report["stale"]


def test_exit_codes(docs_tree: Path, tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    r = mdindex("backfill", str(docs_tree), *state, env={"MDINDEX_BATCH_SIZE": "zero"})
    assert r.returncode == 2 and "batch_size" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    (docs_tree / "bad.md").write_bytes(b"\xff\xfe")
    r = mdindex("backfill", str(docs_tree), *state, "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["errors"][0]["path"] == "bad.md"

    r = mdindex(
        "backfill",
        str(docs_tree),
        *state,
        "--qdrant-url",
        "http://127.0.0.1:9",
        env={"MDINDEX_RETRY_BUDGET_S": "1", "MDINDEX_QDRANT_API_KEY": "s3cret-key"},
    )
    assert r.returncode == 3 and "unreachable" in r.stderr
    assert "s3cret-key" not in r.stderr + r.stdout


def test_quick_start_on_bundled_examples(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[1] / "examples" / "docs"
    state = ["--state-dir", str(tmp_path / "state")]
    r = mdindex("backfill", str(examples), *state)
    assert r.returncode == 0, r.stderr
    assert "0 failed" in r.stdout
    r = mdindex("search", "point at a qdrant server", *state, "--json")
    assert json.loads(r.stdout)[0]["section"] == "The store"
