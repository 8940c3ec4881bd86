"""Change detection: a whole-tree scan and the paths a watcher names find the same changes."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

from mdindex.documents.files import PathFilter
from mdindex.index.changes import full_collections_held
from tests.conftest import TinyEmbedder, build_indexer, run_backfill, settings_for


def keys(refs: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return sorted(r.key for r in refs)


def age(root: Path) -> None:
    """Files saved long ago: their size and mtime vouch for them (see FileRef.racy)."""
    old = time.time() - 100
    for path in root.rglob("*.md"):
        os.utime(path, (old, old))


def test_tree_and_paths_agree(docs_tree: Path, tmp_path: Path) -> None:
    s = settings_for(tmp_path, [str(docs_tree)])
    age(docs_tree)
    run_backfill(s, TinyEmbedder())
    (docs_tree / "index.md").write_text("# Welcome\n\nEdited.\n")  # changed
    (docs_tree / "guide" / "b.md").rename(docs_tree / "guide" / "c.md")  # renamed
    (docs_tree / "new").mkdir()
    (docs_tree / "new" / "n.md").write_text("# N\n\nNew.\n")  # a new folder
    (docs_tree / "bad.md").write_bytes(b"\xff")  # a candidate: it fails only when read
    (docs_tree / "loop.md").symlink_to(docs_tree / "loop.md")  # skipped (links not followed)
    with build_indexer(s, TinyEmbedder()) as indexer:
        tree = indexer.changes()
        events = indexer.changes(
            paths=[str(docs_tree / p) for p in ("index.md", "guide/b.md", "guide/c.md", "bad.md")],
            folders=[str(docs_tree / "new")],
        )
        folder = indexer.changes(folders=[str(docs_tree)])
    label = docs_tree.name
    want_files = [
        (label, "bad.md"),
        (label, "guide/c.md"),
        (label, "index.md"),
        (label, "new/n.md"),
    ]
    for found in (tree, events, folder):
        assert keys(found.files) == want_files
        assert found.deleted == [(label, "guide/b.md")]
        assert found.failures == []
    assert tree.scope is None and events.scope is not None
    assert (label, "guide/b.md") in events.scope and (label, "guide/a.md") not in events.scope
    assert tree.new == 3 and events.new == 3 and tree.seen == 5
    assert events.seen == 4  # the files there: guide/b.md, named but gone, is a deletion
    assert tree.unchanged == 1 and events.unchanged == 0  # guide/a.md was not named


def test_an_atomic_saves_temporary_file_is_no_file_seen(docs_tree: Path, tmp_path: Path) -> None:
    """An editor's atomic save reaches the watcher as a move from a temporary
    file: the daemon's line counted that path ("2 files: 1 changed, 0
    unchanged, 0 deleted")."""
    s = settings_for(tmp_path, [str(docs_tree)])
    age(docs_tree)
    run_backfill(s, TinyEmbedder())
    page, temporary = docs_tree / "index.md", docs_tree / ".index.md.tmp"
    temporary.write_text("# Welcome\n\nSaved whole.\n")
    os.replace(temporary, page)
    with build_indexer(s, TinyEmbedder()) as indexer:
        found = indexer.changes(paths=[str(temporary), str(page)])
        summary = indexer.apply(found)
    assert keys(found.files) == [(docs_tree.name, "index.md")] and found.deleted == []
    assert found.seen == 1 and summary.files_seen == 1 and summary.files_changed == 1
    assert summary.line().startswith("1 file: 1 changed, 0 unchanged, 0 deleted")


def test_a_path_outside_every_root_or_a_missing_root_is_no_change(
    docs_tree: Path, tmp_path: Path
) -> None:
    s = settings_for(tmp_path, [str(docs_tree)])
    run_backfill(s, TinyEmbedder())
    with build_indexer(s, TinyEmbedder()) as indexer:
        outside = indexer.changes(paths=[str(tmp_path / "elsewhere.md")], folders=[str(tmp_path)])
        assert not outside and outside.seen == 0
        (docs_tree / "guide").rename(tmp_path / "moved-away")
        gone = indexer.changes(folders=[str(docs_tree / "guide")])
        assert gone.deleted == [(docs_tree.name, "guide/a.md"), (docs_tree.name, "guide/b.md")]


def test_a_failed_file_fixed_or_deleted_keeps_the_count_of_files_seen(
    docs_tree: Path, tmp_path: Path
) -> None:
    # the daemon adds `new` to files_seen after each batch: a note that failed and
    # was then fixed counted twice ("coverage: 7 of 9" over 7 files)
    s = settings_for(tmp_path, [str(docs_tree)])
    run_backfill(s, TinyEmbedder())
    label = docs_tree.name
    with build_indexer(s, TinyEmbedder()) as indexer:
        for name in ("плохо.md", "bad\x1b.md", "坏.md"):
            path = docs_tree / name
            path.write_bytes(b"# \xff\n")
            first = indexer.changes(paths=[str(path)])
            assert first.new == 1
            summary = indexer.apply(first)
            assert [(f.root, f.reason) for f in summary.failures] == [
                (label, "invalid UTF-8 at byte 2")
            ]
            again = indexer.changes(paths=[str(path)])
            assert again.new == 0
            indexer.apply(again)
        fixed = docs_tree / "плохо.md"
        fixed.write_text("# Хорошо\n\nТеперь в порядке.\n")
        changes = indexer.changes(paths=[str(fixed)])
        assert changes.new == 0
        assert indexer.apply(changes).files_changed == 1
        assert indexer.state.failures() and (label, "плохо.md") not in {
            (f["root"], f["path"]) for f in indexer.state.failures()
        }
        (docs_tree / "bad\x1b.md").unlink()
        gone = indexer.changes(paths=[str(docs_tree / "bad\x1b.md")])
        assert gone.new == -1 and gone.deleted == []
        indexer.apply(gone)
        (docs_tree / "坏.md").unlink()
        folder = indexer.changes(folders=[str(docs_tree)])
        assert folder.new == -1
        indexer.apply(folder)
        assert indexer.state.failures() == []


def test_an_unnameable_path_is_a_failure_only_where_a_scan_finds_one(
    docs_tree: Path, tmp_path: Path
) -> None:
    """A name that is not UTF-8 failed through the watcher's paths before the
    filter or the file was looked at: an image named so (the filter skips it)
    and an editor's temporary file already gone were each a failure and a file
    seen, where a scan of the tree found neither."""
    s = settings_for(tmp_path, [str(docs_tree)])
    run_backfill(s, TinyEmbedder())
    base = os.fsencode(docs_tree)
    image = os.fsdecode(base + b"/caf\xe9.png")
    Path(image).write_bytes(b"\x89PNG")
    gone = os.fsdecode(base + b"/.caf\xe9.md.swp.md")
    page = os.fsdecode(base + b"/caf\xe9.md")
    Path(page).write_text("# Caf\n\nA page.\n")
    with build_indexer(s, TinyEmbedder()) as indexer:
        tree = indexer.changes()
        events = indexer.changes(paths=[image, gone, page])
    for found in (tree, events):
        assert [(f.rel, f.reason) for f in found.failures] == [
            ("caf\\udce9.md", "file name is not valid UTF-8")
        ]
    assert events.seen == 1


def test_a_file_in_a_new_folder_named_with_it_is_one_file_seen(
    docs_tree: Path, tmp_path: Path
) -> None:
    """``mkdir docs/new && echo ... > docs/new/n.md`` reaches the daemon as the
    folder and the file in one batch: the file was counted by its path and
    again by the folder's scan ("2 files: 1 changed, 0 unchanged")."""
    s = settings_for(tmp_path, [str(docs_tree)])
    age(docs_tree)
    run_backfill(s, TinyEmbedder())
    (docs_tree / "new").mkdir()
    (docs_tree / "new" / "n.md").write_text("# N\n\nNew.\n")
    with build_indexer(s, TinyEmbedder()) as indexer:
        found = indexer.changes(
            paths=[str(docs_tree / "new" / "n.md"), str(docs_tree / "index.md")],
            folders=[str(docs_tree / "new")],
        )
        summary = indexer.apply(found)
    assert keys(found.files) == [(docs_tree.name, "new/n.md")] and found.new == 1
    assert found.seen == 2 and found.unchanged == 1  # n.md once, and index.md
    assert summary.line().startswith("2 files: 1 changed, 1 unchanged, 0 deleted")


def test_full_collections_are_held_off_during_a_look_and_restored_after(
    docs_tree: Path, tmp_path: Path
) -> None:
    """A whole tree's look runs without full collections (each walked every
    object the daemon holds, over and over), young ones going on, and leaves the
    thresholds as it found them; two threads holding at once give them back
    only when both have let go, and a child forked meanwhile starts afresh."""
    s = settings_for(tmp_path, [str(docs_tree)])
    run_backfill(s, TinyEmbedder())
    before = gc.get_threshold()
    during: list[tuple[int, int, int]] = []

    class Watching(PathFilter):  # asked of every file: the thresholds then
        def __call__(self, rel: str) -> bool:
            during.append(gc.get_threshold())
            return super().__call__(rel)

    with build_indexer(s, TinyEmbedder()) as indexer:
        indexer.detector.accept = Watching(s.include, s.exclude)
        changes = indexer.changes()
    assert during and all(t[:2] == before[:2] and t[2] >= 1 << 30 for t in during)
    assert changes.unchanged == len(during) - len(changes.files)
    assert gc.get_threshold() == before and gc.isenabled()

    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with full_collections_held():
            inside.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert inside.wait(10)
        with full_collections_held():
            assert gc.get_threshold()[2] >= 1 << 30
        assert gc.get_threshold()[2] >= 1 << 30  # the other thread still holds them
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            with full_collections_held():
                pass
            os.write(write, repr(gc.get_threshold()).encode())
            os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        assert os.read(read, 100).decode() == repr(before)
        os.close(read)
    finally:
        release.set()
        other.join(10)
    assert gc.get_threshold() == before
