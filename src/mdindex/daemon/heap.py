"""The C heap's free pages given back to the system once a whole scan is done.

A reconcile lists every file and plans what changed, then frees it all; glibc
keeps what was freed for later. bench/daemon_memory.py at 20,000 files
(109,068 points, the stand-in embedder): 63 MB of malloc's heap free but
held after the daemon's start and 30 searches, of 476 MB anonymous;
malloc_trim gave 44 MB of it back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back() -> bool:
    """Return the heap's free pages to the system (malloc_trim(0): a few ms);
    False where the C library cannot."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
