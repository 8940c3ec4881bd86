"""A local store's folder: the signature of its files."""

from __future__ import annotations

import os
from pathlib import Path

from mdindex.sinks.folder import files_signature


def test_files_signature_of_a_folder_with_odd_entries(tmp_path: Path) -> None:
    """Offline status reads it: a name that is not UTF-8 raised an internal
    error out of it, and a link loop made status exit 2 (hostile review)."""
    folder = tmp_path / "store"
    folder.mkdir()
    assert files_signature(folder) == "absent" == files_signature(tmp_path / "none")
    (folder / "a.dat").write_bytes(b"12")
    plain = files_signature(folder)
    assert len(plain) == 32
    open(os.fsencode(folder) + b"/junk\xff", "w").close()
    odd = files_signature(folder)
    assert len(odd) == 32 and odd != plain
    (folder / "loop").symlink_to("loop")
    assert files_signature(folder) == ""  # cannot tell: nothing is taken as unchanged
