"""The C heap's free pages given back to the system once a whole scan is done.

A reconcile lists every file and plans what changed, then frees it all; glibc
keeps what was freed for later. bench/daemon_memory.py at 20,000 files
(109,068 points, the stand-in embedder): 63 MB of malloc's heap free but
held after the daemon's start and 30 searches, of 476 MB anonymous;
malloc_trim gave 44 MB of it back.
"""

from __future__ import annotations

from mdindex.embedding.engines import give_back_heap


def give_back() -> bool:
    """Return the heap's free pages to the system; False where the C library
    cannot (``give_back_heap``)."""
    return give_back_heap()
