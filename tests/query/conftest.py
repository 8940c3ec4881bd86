"""What the client's and the daemon finder's tests share: a root of one note."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "notes"
    r.mkdir()
    (r / "a.md").write_text("# A\n\nAlpha apples, a secret recipe.\n")
    return r
