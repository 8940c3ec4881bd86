"""What one sync did: its counts, the files that failed or warned, as a dict
(backfill's JSON, the daemon's reconcile) and as one line."""

from __future__ import annotations

import pytest

from mdindex.documents.files import Failure
from mdindex.index.summary import Summary, VerifyReport


def test_a_failure_is_counted_kept_and_listed_printably() -> None:
    summary = Summary()
    bad = Failure("docs", "notes/\x1b[31mred\x07.md", "invalid UTF-8 at byte 6")
    summary.fail(bad)
    summary.fail(Failure("wiki", "b.md", "permission denied"))
    assert summary.files_failed == 2
    assert summary.failures == [bad, Failure("wiki", "b.md", "permission denied")]
    assert summary.errors == [
        {"path": "notes/\\x1b[31mred\\x07.md", "root": "docs", "reason": "invalid UTF-8 at byte 6"},
        {"path": "b.md", "root": "wiki", "reason": "permission denied"},
    ]
    assert summary.warnings == []


def test_a_warning_is_listed_and_is_not_a_failure() -> None:
    summary = Summary()
    summary.warn("docs", "a\nb.md", "frontmatter is a YAML list, not a mapping")
    assert summary.warnings == [
        {
            "path": "a\\x0ab.md",
            "root": "docs",
            "reason": "frontmatter is a YAML list, not a mapping",
        }
    ]
    assert summary.files_failed == 0 and summary.errors == [] and summary.failures == []


def test_as_dict_is_every_count_and_list() -> None:
    summary = Summary(
        files_seen=10,
        files_changed=3,
        files_unchanged=5,
        files_deleted=1,
        chunks_embedded=7,
        points_upserted=9,
        points_deleted=2,
        seconds=1.23456,
        embed_seconds=0.5,
        dry_run=True,
        refused="root 'docs' lost more than half of its documents",
    )
    summary.fail(Failure("docs", "x.md", "not a regular file"))
    summary.warn("docs", "y.md", "frontmatter larger than 64 KiB; treated as body")
    assert summary.as_dict() == {
        "files_seen": 10,
        "files_changed": 3,
        "files_unchanged": 5,
        "files_deleted": 1,
        "files_failed": 1,
        "chunks_embedded": 7,
        "points_upserted": 9,
        "points_deleted": 2,
        "seconds": 1.235,
        "embed_seconds": 0.5,
        "errors": [{"path": "x.md", "root": "docs", "reason": "not a regular file"}],
        "warnings": [
            {
                "path": "y.md",
                "root": "docs",
                "reason": "frontmatter larger than 64 KiB; treated as body",
            }
        ],
        "refused": "root 'docs' lost more than half of its documents",
        "dry_run": True,
    }
    assert Summary().as_dict()["refused"] == "" and Summary().as_dict()["errors"] == []


def test_line_says_what_changed_or_would() -> None:
    summary = Summary(
        files_seen=10,
        files_changed=3,
        files_unchanged=5,
        files_deleted=1,
        files_failed=1,
        chunks_embedded=7,
        points_upserted=9,
        points_deleted=2,
        seconds=1.236,
    )
    assert summary.line() == (
        "10 files: 3 changed, 5 unchanged, 1 deleted, 1 failed; "
        "7 chunks embedded, 9 points upserted, 2 deleted in 1.24s"
    )
    summary.dry_run = True
    assert summary.line().startswith("10 files: 3 would change, 5 unchanged,")


def test_a_verify_report_read_back_is_the_one_written_and_nothing_else() -> None:
    """The daemon's answer to `verify`: found by a review, "{}" (or a status
    answer) read as in sync, exit 0, and an entry without its keys failed
    with KeyError (exit 3)."""
    entry = {"id": "p1", "root": "docs", "doc_path": "a.md", "chunk_index": 0}
    report = VerifyReport(missing=[entry], vectors_checked=3)
    back = VerifyReport.from_dict(report.as_dict())
    assert back.daemon and back.missing == [entry] and back.vectors_checked == 3
    assert not back.in_sync and back.as_dict() == report.as_dict()
    good = report.as_dict()
    for bad in (
        {},
        {"documents": 3, "points": 5},
        {k: v for k, v in good.items() if k != "stale"},
        good | {"missing": [{"id": "p1"}]},
        good | {"graph": [{"root": "docs", "doc_path": "a.md"}]},
        good | {"stale": "none"},
        good | {"vectors_checked": "3"},
        [good],
    ):
        with pytest.raises(ValueError):
            VerifyReport.from_dict(bad)
