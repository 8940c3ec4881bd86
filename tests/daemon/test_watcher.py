"""The real observer: the barrier that `status --wait` rests on, and the kernel
dropping events (the debouncer is tests/daemon/test_debouncer.py's)."""

from __future__ import annotations

import logging
import os
import queue
import time
from pathlib import Path

import pytest

from mdindex.config import Root
from mdindex.daemon.watcher import Watcher


def queued(watcher: Watcher) -> list[str]:
    out = []
    while True:
        try:
            out.extend(change.path for change in watcher.events.get_nowait())
        except queue.Empty:
            return out


def test_a_barrier_passes_after_every_event_before_it(tmp_path: Path) -> None:
    """status --wait's mark: once the barrier's opens come through, every event the
    kernel queued before them is in the watcher's queue, whatever the tree's size."""
    root = tmp_path / "docs"
    (root / "deep" / "er").mkdir(parents=True)
    (root / "index.md").write_text("# Index\n")
    watcher = Watcher([Root("docs", root)])
    watcher.start()
    try:
        for round_ in range(5):
            written = []
            for i in range(200):
                path = root / "deep" / "er" / f"r{round_}n{i}.md"
                path.write_text(f"# {i}\n")
                written.append(str(path))
            barrier = watcher.barrier()
            assert barrier is not None
            assert barrier.passed.wait(10), "the barrier never came through"
            assert set(written) <= set(queued(watcher))
        # a barrier's own opens are not changes
        barrier = watcher.barrier()
        assert barrier is not None and watcher.wait(barrier, 10)
        time.sleep(0.2)
        assert queued(watcher) == []
    finally:
        watcher.stop()


def test_both_ends_of_a_move_are_one_item_of_the_queue(tmp_path: Path) -> None:
    """The debouncer takes a move's two paths at once. Put one by one, a watcher
    thread paused between them (a loaded machine) let the first go alone: a
    delete, then a new file to embed (the daemon's rename re-embedded its note
    with 0.4 s between the two puts)."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("# A\n")
    (root / "sub" / "c.md").write_text("# C\n")
    watcher = Watcher([Root("docs", root)])
    watcher.start()
    try:
        (root / "a.md").rename(root / "b.md")
        (root / "sub").rename(root / "moved")
        barrier = watcher.barrier()
        assert barrier is not None and watcher.wait(barrier, 10)
        items = []
        while not watcher.events.empty():
            items.append(tuple((c.path, c.is_dir) for c in watcher.events.get_nowait()))
        assert ((str(root / "a.md"), False), (str(root / "b.md"), False)) in items
        assert ((str(root / "sub"), True), (str(root / "moved"), True)) in items
    finally:
        watcher.stop()


QUEUE_LIMIT = Path("/proc/sys/fs/inotify/max_queued_events")


def start_with_queue(watcher: Watcher, events: int) -> bool:
    """Start the watcher with the kernel's event queue cut to ``events`` where
    this test may set it (as root); True if it could. A new inotify instance
    takes the size when it starts, so the limit is put back at once."""
    if not (os.geteuid() == 0 and os.access(QUEUE_LIMIT, os.W_OK)):
        watcher.start()
        return False
    before = QUEUE_LIMIT.read_text()
    QUEUE_LIMIT.write_text(str(events))
    try:
        watcher.start()
    finally:
        QUEUE_LIMIT.write_text(before)
    return True


def open_masks(watcher: Watcher) -> list[bool]:
    """For each of the observer's kernel watches: does it ask for opens (IN_OPEN)?"""
    fd = watcher._observer._inotify_fd._inotify_fd  # type: ignore[union-attr]
    lines = Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
    masks = [line.split(" mask:")[1].split()[0] for line in lines if line.startswith("inotify ")]
    return [bool(int(mask, 16) & 0x20) for mask in masks]


@pytest.mark.serial  # it cuts the machine's inotify queue: no watcher may start beside it
def test_a_scan_of_the_whole_tree_cannot_flood_the_kernel_queue(tmp_path: Path) -> None:
    """A scan opens every folder and each changed file. With opens asked for on
    every folder, a scan of 9,000 folders overflowed the kernel's queue (16,384)
    and watchdog then opened every folder again, for ever. Opens are asked for
    only in the barrier's folder: with the queue cut to 64 events (where this
    test may set it), whole scans of 300 folders overflow nothing."""
    root = tmp_path / "docs"
    for i in range(300):
        (root / f"f{i}").mkdir(parents=True)
        (root / f"f{i}" / "a.md").write_text(f"# {i}\n")
    (root / "index.md").write_text("# Index\n")
    watcher = Watcher([Root("docs", root)])
    try:
        start_with_queue(watcher, 64)
        masks = open_masks(watcher)
        assert len(masks) == 301 and not any(masks)
        barrier = watcher.barrier()
        assert barrier is not None and watcher.wait(barrier, 10)
        assert sum(open_masks(watcher)) == 1  # one folder without subfolders, not the root
        for _ in range(5):  # whole scans, reading every file
            for folder, _dirs, files in os.walk(root):
                for name in files:
                    (Path(folder) / name).read_bytes()
        barrier = watcher.barrier()
        assert barrier is not None and watcher.wait(barrier, 10)
        time.sleep(0.2)
        assert not watcher.overflowed.is_set()
        assert queued(watcher) == []  # reads change nothing
    finally:
        watcher.stop()


def test_a_barrier_survives_its_folder_being_watched_anew(tmp_path: Path) -> None:
    """watchdog sets a folder's whole mask when it watches it again, dropping the
    opens; each barrier asks for them again."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# A\n")
    watcher = Watcher([Root("docs", root)])
    watcher.start()
    try:
        barrier = watcher.barrier()
        assert barrier is not None and watcher.wait(barrier, 10)
        for _ in range(20):  # a barrier set before watchdog's thread re-watches it
            (root / "sub").rename(tmp_path / "away")
            (tmp_path / "away").rename(root / "sub")  # watched again, under a new mask
            for _ in range(3):
                barrier = watcher.barrier()
                assert barrier is not None and watcher.wait(barrier, 10)
        assert set(queued(watcher)) >= {str(root / "sub")}
    finally:
        watcher.stop()


def test_no_barrier_without_a_file_to_open_or_without_inotify(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "only" / "folders").mkdir(parents=True)
    watcher = Watcher([Root("empty", empty)])
    watcher.start()
    try:
        assert watcher.barrier() is None  # the caller then reconciles
        (empty / "only" / "a.md").write_text("# A\n")
        barrier = watcher.barrier()  # one a level down will do
        assert barrier is not None and watcher.wait(barrier, 10)
    finally:
        watcher.stop()
    assert watcher.barrier() is None  # stopped: no observer


@pytest.mark.serial  # it cuts the machine's inotify queue: no watcher may start beside it
@pytest.mark.parametrize("log_level", ["WARNING", "ERROR"])
def test_an_inotify_overflow_makes_the_watcher_rescan(tmp_path: Path, log_level: str) -> None:
    """The kernel's queue cut to 16 events (where this test may set it; 16,384
    elsewhere) and watchdog's reader held still (its lock taken, as a busy
    process would starve it), a burst of files overflows it for real, whatever
    level silences watchdog's own log line of it."""
    root = tmp_path / "docs"
    root.mkdir()
    watchdog_log = logging.getLogger("watchdog")
    level = watchdog_log.level
    watchdog_log.setLevel(log_level)  # as `--log-level ERROR` sets it
    watcher = Watcher([Root("docs", root)], max_queue=100_000)  # the kernel's overflow, not ours
    try:
        burst = 100 if start_with_queue(watcher, 16) else 17_000
        inotify = watcher._observer._inotify_fd  # type: ignore[union-attr]
        with inotify._lock:
            for i in range(burst):
                (root / f"{i}.md").write_text("x")
            assert not watcher.overflowed.is_set()
        deadline = time.monotonic() + 10
        while not watcher.overflowed.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.overflowed.is_set()
    finally:
        watchdog_log.setLevel(level)
        watcher.stop()
