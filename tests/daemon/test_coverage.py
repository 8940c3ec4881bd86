"""Folders the kernel does not watch: found from its own list of watches, rescanned,
and said so; with the user's watch limit really lowered where the test may set
it, else with the kernel's refusal made at watchdog's call to it."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdindex.config import Timings
from mdindex.daemon import coverage
from tests.conftest import TinyEmbedder, settings_for
from tests.daemon.running import QUIET_MS, Running, converges, wait_for

LIMIT = Path("/proc/sys/fs/inotify/max_user_watches")


def test_topmost_keeps_the_folders_with_none_above() -> None:
    paths = ["/r/a/b", "/r/a", "/r/a-b", "/r/a/b/c", "/r/z", "/r/a-b/x"]
    assert coverage.topmost(paths) == ["/r/a", "/r/a-b", "/r/z"]
    assert coverage.topmost([]) == []


def test_the_kernel_says_which_folders_are_watched(tmp_path: Path) -> None:
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    (tmp_path / "w" / "sub").mkdir(parents=True)
    (tmp_path / "not").mkdir()
    (tmp_path / "shut").mkdir(mode=0)  # unlistable: no watch, and no watch limit to blame
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # watchdog follows no link
    folders = {}
    for path in (tmp_path / "w", tmp_path / "w" / "sub", tmp_path / "not", tmp_path / "shut"):
        st = path.stat()
        folders[(st.st_dev, st.st_ino)] = str(path)
    st = (tmp_path / "link").stat()
    folders[(st.st_dev, st.st_ino)] = str(tmp_path / "link")
    observer = Observer()
    observer.schedule(FileSystemEventHandler(), str(tmp_path / "w"), recursive=True)
    observer.start()
    try:
        watched = coverage.watched_inodes()
        assert watched is not None
        roots = [str(tmp_path)]
        unreadable = not os.access(tmp_path / "shut", os.R_OK)  # root reads anything
        want = [str(tmp_path / "not")] + ([] if unreadable else [str(tmp_path / "shut")])
        assert coverage.uncovered(folders, watched, roots) == want
        # matched by inode: a device the kernel names otherwise (btrfs) changes nothing
        other_dev = {(dev + 1, ino) for dev, ino in watched}
        assert coverage.uncovered(folders, other_dev, roots) == want
    finally:
        observer.stop()
        observer.join()


def test_the_reason_names_the_limit_and_the_fix() -> None:
    line = coverage.reason(3, 8192, 30.0)
    assert "3 folder(s) not watched" in line and "now 8192" in line
    assert "rescanned every 30s" in line
    assert "sysctl fs.inotify.max_user_watches=" in line and "\n" not in line


def watches_in_use() -> int:
    """Every inotify watch this machine's processes of this user hold."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
                continue
            for fd in os.listdir(f"/proc/{pid}/fdinfo"):
                with contextlib.suppress(OSError):
                    text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
                    total += text.count("inotify wd:")
    return total


@contextlib.contextmanager
def watch_limit(spare: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """At most ``spare`` more inotify watches for this user; yields a function that
    lifts the limit again. The real sysctl where this test may write it (root),
    else the kernel's ENOSPC returned at watchdog's call to inotify_add_watch."""
    if os.geteuid() == 0 and os.access(LIMIT, os.W_OK):
        before = LIMIT.read_text()
        LIMIT.write_text(str(watches_in_use() + spare))
        try:
            yield lambda: LIMIT.write_text(before)
        finally:
            LIMIT.write_text(before)
        return
    from watchdog.observers import inotify_c

    real = inotify_c.inotify_add_watch
    state = {"left": spare}
    fake_limit = Path(os.environ.get("TMPDIR", "/tmp")) / f"limit-{os.getpid()}"
    fake_limit.write_text("100")
    monkeypatch.setattr(coverage, "LIMIT_FILE", fake_limit)

    def add_watch(fd: int, path: bytes, mask: int) -> int:
        if state["left"] <= 0:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        state["left"] -= 1
        return int(real(fd, path, mask))

    def lift() -> None:
        state["left"] = 10**9
        fake_limit.write_text("524288")

    monkeypatch.setattr(inotify_c, "inotify_add_watch", add_watch)
    yield lift


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("spare", [0, 6])
def test_folders_past_the_watch_limit_are_rescanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare: int
) -> None:
    """With 20 folders and watches for 6 of them (or for none, the root itself
    refused), the daemon says so in one line and in status, keeps the folders
    it cannot watch right by rescanning them (at once for `status --wait`), and
    watches them all once the limit is raised."""
    timings = Timings(unwatched_rescan_s=1.0)
    root = tmp_path / "notes"
    for i in range(20):
        (root / f"f{i:02}").mkdir(parents=True)
        (root / f"f{i:02}" / "n.md").write_text(f"# Note {i}\n\nFolder {i}.\n")
    s = settings_for(tmp_path, [str(root)], quiet_period_ms=QUIET_MS)
    with watch_limit(spare, monkeypatch) as lift:
        d = Running(s, TinyEmbedder(), timings=timings).start()
        try:
            converges(d, tmp_path, root)
            status = d.daemon.status()
            assert status["phase"] == "degraded"
            assert "inotify watch limit reached" in status["reason"]
            assert "sysctl fs.inotify.max_user_watches=" in status["reason"]
            unwatched = d.daemon.shared.watcher.unwatched
            assert unwatched and all(Path(p).is_relative_to(root) for p in unwatched)
            last = Path(unwatched[-1]) if spare else root / "f19"
            # a `status --wait` looks at them at once
            (last / "n.md").write_text("# Changed\n\nEdited where no watch is.\n")
            started = time.monotonic()
            assert d.daemon.status(wait=30)["caught_up"]
            assert time.monotonic() - started < timings.unwatched_rescan_s * 5
            assert any("no watch" in p["text"] for p in d.points().values())
            # and the periodic rescan without one
            (last / "new.md").write_text("# New\n\nA note in an unwatched folder.\n")
            converges(d, tmp_path, root, timeout=15)
            # the limit raised: every folder watched, the reason gone
            lift()
            wait_for(
                lambda: d.daemon.status()["phase"] == "watching",
                20,
                f"watching again: {d.daemon.status()}",
            )
            assert d.daemon.shared.watcher.unwatched == []
            (last / "later.md").write_text("# Later\n\nWatched now.\n")
            converges(d, tmp_path, root, timeout=15)
        finally:
            d.stop()
