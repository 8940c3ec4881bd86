"""The barrier's file: one regular file, opened without following a link or
waiting on a FIFO (the barrier itself, on a real observer, is
tests/daemon/test_watcher.py's)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mdindex.daemon.barrier import file_to_open, open_and_close


@pytest.mark.serial
def test_the_barrier_opens_only_a_regular_file_and_never_waits(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    (tmp_path / "target").write_text("x")
    link.symlink_to(tmp_path / "target")
    started = time.monotonic()
    assert not open_and_close(str(fifo))  # opened without blocking, then refused
    assert not open_and_close(str(link))  # O_NOFOLLOW
    assert not open_and_close(str(tmp_path / "gone"))
    assert open_and_close(str(tmp_path / "target"))
    assert time.monotonic() - started < 1
    # and the search for one skips both
    (tmp_path / "target").unlink()
    assert file_to_open(str(tmp_path)) is None
