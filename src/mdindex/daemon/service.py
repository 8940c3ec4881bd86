from __future__ import annotations

from mdindex.config import Settings


def run_daemon(settings: Settings) -> int:
    raise NotImplementedError
