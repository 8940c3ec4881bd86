"""The daemon gives the heap's free pages back after a whole scan."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mdindex.daemon.heap import give_back


def anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssAnon is Linux's")
def test_freed_heap_goes_back_to_the_system() -> None:
    """200 MB of blocks freed between blocks still held (one in 64) stay with
    the process (glibc trims only the heap's top) until give_back returns them."""
    size = 4000  # a variable: b"x" * 4000 would be one constant
    blocks = [b"x" * size for _ in range(50_000)]
    kept = blocks[::64]
    before = anon_mb()
    del blocks
    held = anon_mb()
    assert give_back()
    after = anon_mb()
    assert before - held < 50 < held - after, (before, held, after)
    assert len(kept) == 782
