"""A hostile-input corpus, generated here: backfill and watch keep going, explain each failure,
and index every valid file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import TinyEmbedder, run_backfill, settings_for, stored_points
from tests.daemon.test_watch import Running, wait_for

BAD_NAME = b"bad-\xff\xfe.md"


def build(root: Path, outside: Path) -> dict[str, str]:
    """Write the corpus; return {path: expected reason fragment} for the files that must fail."""
    root.mkdir(parents=True)
    outside.mkdir(parents=True, exist_ok=True)
    (root / "sub").mkdir()
    (root / "ok.md").write_text("# Fine\n\nA perfectly normal file.\n")
    (root / "sub" / "ok2.md").write_text("# Also fine\n\nNested and normal.\n")
    (root / "new\nline.md").write_text("# Newline\n\nA file name with a newline.\n")
    (root / "empty.md").write_bytes(b"")
    (root / "heads.md").write_text("".join(f"## H{i}\n\nline {i}\n\n" for i in range(10_000)))
    (root / "longline.md").write_text("# Long\n\n" + "lorem ipsum dolor sit " * 240_000 + "\n")
    (root / "unterminated.md").write_text("---\ntitle: never closed\n\n# Body\n\nText.\n")
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    bomb += [
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    (root / "bomb.md").write_text("---\n" + "\n".join(bomb) + "\n---\n# Bomb\n\nBody.\n")
    locked = root / "mode000.md"
    locked.write_text("# Locked\n\nNo permissions.\n")
    locked.chmod(0)
    # the failures
    (root / "invalid.md").write_bytes(b"# Bad\n\n\xc3\x28 invalid UTF-8\n")
    (root / "nul.md").write_bytes(b"# Binary\x00\x00\x01\x02")
    with open(root / "huge.md", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # 50 MB (sparse)
    fd = os.open(os.fsencode(root) + b"/" + BAD_NAME, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"# Bad name\n")
    os.close(fd)
    os.mkfifo(root / "fifo.md")
    (root / "loop.md").symlink_to(root / "loop.md")
    (outside / "secret.md").write_text("# Secret\n\nOutside the root.\n")
    (root / "escape.md").symlink_to(outside / "secret.md")
    expected = {
        "invalid.md": "invalid UTF-8",
        "nul.md": "NUL",
        "huge.md": "max_file_bytes",
        "fifo.md": "not a regular file",
        "loop.md": "symlink loop",
        "escape.md": "outside its root",
    }
    if os.geteuid() != 0:
        expected["mode000.md"] = "permission denied"
    return expected


VALID = [
    "ok.md",
    "sub/ok2.md",
    "new\nline.md",
    "heads.md",
    "longline.md",
    "unterminated.md",
    "bomb.md",
]


def check_summary(errors: list[dict[str, str]], expected: dict[str, str]) -> None:
    reasons = {e["path"]: e["reason"] for e in errors}
    for path, fragment in expected.items():
        assert fragment in reasons.get(path, ""), f"{path}: {reasons.get(path)!r}"
    assert any("not valid UTF-8" in r for p, r in reasons.items() if p.startswith("bad-"))
    for reason in reasons.values():
        assert "\n" not in reason and reason


def test_backfill_on_hostile_corpus(tmp_path: Path) -> None:
    root = tmp_path / "hostile"
    expected = build(root, tmp_path / "outside")
    churn = root / "churn"
    churn.mkdir()
    for i in range(300):
        (churn / f"c{i}.md").write_text(f"# Churn {i}\n\ntext {i}\n")

    def delete_while_reading() -> None:
        for i in range(300):
            (churn / f"c{i}.md").unlink()
            time.sleep(0.002)

    s = settings_for(tmp_path, [str(root)], follow_symlinks=True)
    deleter = threading.Thread(target=delete_while_reading)
    t = time.perf_counter()
    deleter.start()
    result = run_backfill(s, TinyEmbedder())
    deleter.join()
    seconds = time.perf_counter() - t
    assert seconds < 180
    check_summary(result["errors"], expected)
    for e in result["errors"]:
        if e["path"].startswith("churn/"):
            assert "vanished" in e["reason"]
    docs = {p["doc_path"] for p in stored_points(s).values()}
    assert set(VALID) <= docs
    assert "secret.md" not in docs and not any(d.startswith("bad-") for d in docs)
    heads = [p for p in stored_points(s).values() if p["doc_path"] == "heads.md"]
    assert len(heads) == 10_000
    # the next run prunes what vanished and converges
    again = run_backfill(s, TinyEmbedder(), force=True)
    assert not any(e["path"].startswith("churn/") for e in again["errors"])
    assert not any(p["doc_path"].startswith("churn/") for p in stored_points(s).values())
    print(
        f"hostile inputs: {len(expected) + 1} failing kinds, {len(VALID) + 2} valid kinds, "
        f"{len(result['errors'])} errors reported, 300 files deleted while read"
    )


def test_watch_on_hostile_corpus(tmp_path: Path) -> None:
    root = tmp_path / "hostile"
    expected = build(root, tmp_path / "outside")
    s = settings_for(tmp_path, [str(root)], follow_symlinks=True, quiet_period_ms=100)
    d = Running(s, TinyEmbedder()).start()
    try:
        wait_for(
            lambda: {"ok.md", "heads.md"} <= {p["doc_path"] for p in d.points().values()},
            120,
            "valid files indexed",
        )
        assert d.daemon.metrics.errors._value.get() >= len(expected)
        # more hostile input while running: the daemon keeps going
        (root / "later-bad.md").write_bytes(b"\xff\xff\xff")
        os.mkfifo(root / "later-fifo.md")
        (root / "later-ok.md").write_text("# Later\n\nStill indexed.\n")
        wait_for(
            lambda: "later-ok.md" in {p["doc_path"] for p in d.points().values()},
            60,
            "later file indexed",
        )
        assert d.thread.is_alive() and d.daemon.health()[0]
        assert set(VALID) <= {p["doc_path"] for p in d.points().values()}
    finally:
        d.stop()


@pytest.fixture(autouse=True)
def _unlock(tmp_path: Path):
    yield
    locked = tmp_path / "hostile" / "mode000.md"
    if locked.exists():
        locked.chmod(0o644)  # so pytest can clean up
