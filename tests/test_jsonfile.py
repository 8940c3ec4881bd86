"""The one JSON writer: all or nothing, and a reader that takes garbage as empty."""

from __future__ import annotations

import json
from pathlib import Path

from mdindex.jsonfile import read_json, write_json


def test_write_json_leaves_the_file_whole_and_nothing_beside(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_read_json_takes_missing_or_garbled_files_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    assert read_json(path) == {}
    for garbage in ("{not json", "[1, 2]", "null", ""):
        path.write_text(garbage)
        assert read_json(path) == {}
    write_json(path, {"k": [1, "x"]})
    assert read_json(path) == {"k": [1, "x"]}
