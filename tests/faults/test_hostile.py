"""A hostile-input corpus, generated here: backfill and watch keep going, explain each failure,
and index every valid file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from mdindex.config import Settings
from mdindex.documents.parsing import parse_document
from mdindex.documents.reading import decode, read_bytes
from mdindex.index.indexer import Hooks
from mdindex.runtime import make_models
from tests.conftest import TinyEmbedder, build_indexer, run_backfill, settings_for, stored_points
from tests.daemon.running import Running, wait_for
from tests.faults.helpers import unprivileged

pytestmark = pytest.mark.usefixtures("engine")

BAD_NAME = b"bad-\xff\xfe.md"

# The regex bombs of the hostile review, at the sizes it reproduced them with:
# a heading of 40k spaces took 5 s (its {#id} pattern), "www." and 16k dots 11 s
# (the sentence splitter's URL pattern).
BOMBS = {
    "bomb-anchor.md": "# Heading" + " " * 40_000 + "x\n\nBody after the heading.\n",
    "bomb-url.md": "# Link\n\nSee www." + "." * 16_000 + "\n",
    "bomb-ticks.md": "# Ticks\n\n" + "".join("`" * k + " a " for k in range(1, 300)) + "\n",
}


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
    for name, text in BOMBS.items():
        (root / name).write_text(text)
    unlisted = root / "unlisted"  # a folder that cannot be listed (a stale mount)
    unlisted.mkdir()
    (unlisted / "inside.md").write_text("# Inside\n\nBehind a folder without permissions.\n")
    unlisted.chmod(0)
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
    # mode000.md and unlisted/: the backfill runs without root's power to read them
    expected["mode000.md"] = "permission denied"
    expected["unlisted"] = "cannot list folder"
    return expected


VALID = [
    "ok.md",
    "sub/ok2.md",
    "new\nline.md",
    "heads.md",
    "longline.md",
    "unterminated.md",
    "bomb.md",
    *BOMBS,
]


def check_summary(errors: list[dict[str, str]], expected: dict[str, str]) -> None:
    reasons = {e["path"]: e["reason"] for e in errors}
    for path, fragment in expected.items():
        assert fragment in reasons.get(path, ""), f"{path}: {reasons.get(path)!r}"
    assert any("not valid UTF-8" in r for p, r in reasons.items() if p.startswith("bad-"))
    for reason in reasons.values():
        assert "\n" not in reason and reason


@pytest.mark.serial
def test_each_regex_bomb_is_read_and_chunked_in_bounded_time(tmp_path: Path) -> None:
    """Timed, so alone (the corpus's backfill below is not: it asserts what is stored)."""
    root = tmp_path / "hostile"
    build(root, tmp_path / "outside")
    s = settings_for(tmp_path, [str(root)], follow_symlinks=True)
    for name in BOMBS:  # each bomb alone, so a slow one is named
        one = time.perf_counter()
        assert read_and_chunk(s, root / name) > 0
        assert time.perf_counter() - one < 2, f"{name} took {time.perf_counter() - one:.1f} s"


@pytest.mark.slow
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
    result = unprivileged(lambda: run_backfill(s, TinyEmbedder()))
    deleter.join()
    seconds = time.perf_counter() - t
    assert seconds < 180
    check_summary(result["errors"], expected)
    for e in result["errors"]:
        if e["path"].startswith("churn/"):
            assert "vanished" in e["reason"]
    stored = stored_points(s).values()  # read once: 10,000 points and more
    docs = {p["doc_path"] for p in stored}
    assert set(VALID) <= docs
    assert "secret.md" not in docs and not any(d.startswith("bad-") for d in docs)
    heads = [p for p in stored if p["doc_path"] == "heads.md"]
    assert len(heads) == 10_000
    # the next run prunes what vanished and converges
    again = run_backfill(s, TinyEmbedder(), force=True)
    assert not any(e["path"].startswith("churn/") for e in again["errors"])
    assert not any(p["doc_path"].startswith("churn/") for p in stored_points(s).values())
    print(
        f"hostile inputs: {len(expected) + 1} failing kinds, {len(VALID) + 2} valid kinds, "
        f"{len(result['errors'])} errors reported, 300 files deleted while read"
    )


@pytest.mark.slow
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
        # (the daemon runs as root here: the mode-000 file and folder are readable)
        # The counts are added when the sync ends, a moment after its points land.
        wait_for(
            lambda: d.daemon.shared.metrics.errors._value.get() >= len(expected) - 2,
            30,
            "every hostile file counted as failed",
        )
        # more hostile input while running: the daemon keeps going
        (root / "later-bad.md").write_bytes(b"\xff\xff\xff")
        os.mkfifo(root / "later-fifo.md")
        (root / "later-ok.md").write_text("# Later\n\nStill indexed.\n")
        wait_for(
            lambda: "later-ok.md" in {p["doc_path"] for p in d.points().values()},
            60,
            "later file indexed",
        )
        healthy, reason = d.daemon.api.health()
        # as an ordinary user, the mode-000 file and folder are the reader's failures
        assert d.thread.is_alive() and (healthy or reason.startswith("reader: ")), reason
        # every valid file, the 5 MB line too (which a loaded machine took
        # longer over than the later file)
        wait_for(
            lambda: set(VALID) <= {p["doc_path"] for p in d.points().values()},
            120,
            "every valid file indexed",
        )
    finally:
        d.stop()


def read_and_chunk(settings: Settings, path: Path) -> int:
    """Chunks the pipeline makes of one file (reading, parsing and chunking it)."""
    doc = parse_document(decode(read_bytes(path, 10**7)), path.name)
    return len(make_models(settings).chunker.chunk(doc))


# -- folders that cannot be listed -------------------------------------------


def unlistable_tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "docs"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "top.md").write_text("# Top\n\nAt the top.\n")
    (root / "other.md").write_text("# Other\n\nAnother one.\n")
    (root / "sub" / "a.md").write_text("# A\n\nIn the folder that will be locked.\n")
    (root / "sub" / "deep" / "b.md").write_text("# B\n\nDeeper in it.\n")
    return root, root / "sub"


def test_unlistable_folder_keeps_its_documents_in_backfill(tmp_path: Path) -> None:
    root, sub = unlistable_tree(tmp_path)
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())
    before = stored_points(s)
    sub.chmod(0)  # a folder permission denied, as a stale NFS mount would be
    try:
        result = unprivileged(lambda: run_backfill(s, TinyEmbedder()))
    finally:
        sub.chmod(0o755)
    assert result["files_deleted"] == 0 and result["points_deleted"] == 0
    [error] = result["errors"]
    assert error["path"] == "sub" and "cannot list folder" in error["reason"]
    assert stored_points(s) == before
    # the CLI turns a listed error into exit 1
    from mdindex.errors import EXIT_PARTIAL

    assert result["files_failed"] == 1 and EXIT_PARTIAL == 1
    # readable again: nothing to do
    again = run_backfill(s, TinyEmbedder())
    assert again["errors"] == [] and again["points_upserted"] == 0


@pytest.mark.slow
def test_unlistable_folder_keeps_its_documents_in_watch(tmp_path: Path) -> None:
    root, sub = unlistable_tree(tmp_path)
    s = settings_for(tmp_path, [str(root)])
    run_backfill(s, TinyEmbedder())

    def resolve() -> dict[str, object]:
        # what the daemon hands the core for a folder event on the root and one
        # on the folder itself
        with build_indexer(s, TinyEmbedder()) as indexer:
            changes = indexer.changes(folders=[str(root), str(sub)])
        return {"deleted": changes.deleted, "errors": [{"path": f.rel} for f in changes.failures]}

    sub.chmod(0)
    try:
        result = unprivileged(resolve)
    finally:
        sub.chmod(0o755)
    assert result["deleted"] == []
    assert {e["path"] for e in result["errors"]} == {"sub"}  # type: ignore[union-attr]


# -- a file swapped for a link between the scan and the read ----------------


def swap_after_first_read(s, root: Path, victim: str, target: Path) -> dict[str, object]:
    """Backfill, replacing ``victim`` with a link to ``target`` once the first
    file was read (the scan saw a regular file)."""

    def swap(done: int) -> None:
        if done == 1:
            (root / victim).unlink()
            (root / victim).symlink_to(target)

    indexer = build_indexer(s, TinyEmbedder(), hooks=Hooks(on_progress=swap))
    try:
        return indexer.backfill().as_dict()
    finally:
        indexer.close()


@pytest.mark.parametrize("follow", [False, True])
def test_symlink_swapped_in_after_the_scan_is_not_read(tmp_path: Path, follow: bool) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    secret = tmp_path / "credentials" / "qdrant-api-key"
    secret.parent.mkdir()
    secret.write_text("# Key\n\nTOPSECRET-API-KEY\n")
    (root / "a.md").write_text("# A\n\nFirst file.\n")
    (root / "b.md").write_text("# B\n\nThe file that becomes a link.\n")
    s = settings_for(tmp_path, [str(root)], follow_symlinks=follow)
    result = swap_after_first_read(s, root, "b.md", secret)
    reasons = {e["path"]: e["reason"] for e in result["errors"]}  # type: ignore[union-attr]
    # the opened file is not the one the scan saw (O_NOFOLLOW refuses the link
    # itself first when links are not followed)
    want = "replaced since the scan" if follow else "symlink after the scan"
    assert want in reasons["b.md"], reasons
    assert not any("TOPSECRET" in p["text"] for p in stored_points(s).values())


@pytest.mark.parametrize("follow", [False, True])
def test_folder_swapped_for_a_link_is_not_read(tmp_path: Path, follow: bool) -> None:
    """A daemon event names sub/x.md; before it is read, sub becomes a link to
    a folder outside the root holding an x.md of its own."""
    from mdindex.documents.files import Failure, PathFilter, stat_file
    from mdindex.documents.reading import load_document

    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "x.md").write_text("# X\n\nInside.\n")
    elsewhere = tmp_path / "home" / "victim"
    elsewhere.mkdir(parents=True)
    (elsewhere / "x.md").write_text("# Private\n\nTOPSECRET\n")
    s = settings_for(tmp_path, [str(root)], follow_symlinks=follow)
    [r] = s.root_list()
    ref = stat_file(r, "sub/x.md", PathFilter(s.include), follow)
    (root / "sub" / "x.md").unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(elsewhere)
    assert ref is not None and not isinstance(ref, Failure)
    failure = load_document(ref, s)
    assert isinstance(failure, Failure) and "replaced" in failure.reason
    # even a stat taken after the swap (same inode then) does not get it read
    ref = stat_file(r, "sub/x.md", PathFilter(s.include), follow)
    assert ref is not None and not isinstance(ref, Failure)
    failure = load_document(ref, s)
    assert isinstance(failure, Failure) and "outside its root" in failure.reason


@pytest.fixture(autouse=True)
def _unlock(tmp_path: Path):
    yield
    for locked in (tmp_path / "hostile" / "mode000.md", tmp_path / "hostile" / "unlisted"):
        if locked.exists():
            locked.chmod(0o755)  # so pytest can clean up


# -- frontmatter that bricked a store ---------------------------------------


@pytest.mark.parametrize("store", ["edge", "client"])
def test_frontmatter_that_bricked_the_store_costs_nothing(tmp_path: Path, store: str) -> None:
    """Issue 23, defects 1 and 2: a 293-byte note (`tags:` and 130 nested lists)
    bricked qdrant-edge for good: every later command failed reading its WAL,
    even after the file was deleted. `.nan` or `.inf` in frontmatter crashed
    every backfill and the daemon. Now both are indexed, their values cut down
    to what every store reads back, and said so."""
    from mdindex.index.search import Query
    from mdindex.index.verify import verify
    from mdindex.versions.catalog import reader_settings
    from tests.conftest import run_rollout

    root = tmp_path / "docs"
    root.mkdir()
    deep = root / "deep.md"
    deep.write_text("---\ntags: " + "[" * 130 + "]" * 130 + "\n---\n# Deep\n\nA deep note.\n")
    assert len(deep.read_bytes()) < 300
    (root / "nan.md").write_text("---\nw: .nan\nx: .inf\ny: -.inf\n---\n# Numbers\n\nNaN.\n")
    (root / "ok.md").write_text("# Fine\n\nA perfectly normal otter note.\n")
    s = settings_for(tmp_path, [root], store=store)
    first = run_rollout(s, TinyEmbedder())
    assert first["files_failed"] == 0 and first["files_changed"] == 3
    reasons = " ".join(w["reason"] for w in first["warnings"])
    assert "nested over 8 levels" in reasons and "not a finite number" in reasons
    again = run_rollout(s, TinyEmbedder())  # the store opens again
    assert again["files_unchanged"] == 3 and again["errors"] == []
    with build_indexer(reader_settings(s), TinyEmbedder()) as indexer:
        assert verify(indexer).in_sync
        hits = indexer.search(Query("otter note", k=3))
        assert hits[0]["doc_path"] == "ok.md"
    points = {p["doc_path"]: p for p in stored_points(s).values()}
    assert points["nan.md"]["meta"] == {}
    assert isinstance(points["deep.md"]["meta"]["tags"], list)
    deep.unlink()
    assert run_rollout(s, TinyEmbedder())["files_deleted"] == 1
    assert set(p["doc_path"] for p in stored_points(s).values()) == {"nan.md", "ok.md"}


@pytest.mark.slow
@pytest.mark.serial
def test_a_huge_heading_costs_its_file_only(tmp_path: Path) -> None:
    """Found by the hostile review: a 200,000-character heading over 200 paragraphs
    (a 602 KB file) took 77 s with a 5 s budget and wrote a 462 MB store: the
    heading went into every chunk's payload twice and was tokenized again for
    every chunk, outside the time budget."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# ok\n\nfine file\n")
    body = "\n\n".join(f"para {i} " + "word " * 400 for i in range(200))
    (root / "evil.md").write_text("# " + "a" * 200_000 + "\n\n" + body + "\n")
    s = settings_for(tmp_path, [root], file_time_budget_s=5.0)
    started = time.perf_counter()
    result = run_backfill(s, TinyEmbedder())
    assert time.perf_counter() - started < 15
    assert result["files_failed"] == 0 and result["files_changed"] == 2
    from mdindex.sinks.folder import folder_bytes

    assert folder_bytes(s.state_dir) < 30_000_000  # on disk, as du counts (edge maps sparse files)
    payloads = [p for p in stored_points(s).values() if p["doc_path"] == "evil.md"]
    assert max(len(p["title"]) for p in payloads) == 1024
