"""The typed answers: each reads the command line's ``--json`` form, keeps it
whole in ``fields``, and a key missing (an older daemon's answer) is its empty value."""

from __future__ import annotations

from mdindex.answers import Hit, Status, Switch, Version
from mdindex.index.summary import Summary


def test_a_hit_keeps_every_key_and_types_the_known_ones() -> None:
    data = {
        "score": 0.5,
        "text": "Otters hold hands.",
        "doc_path": "a.md",
        "heading_path": ["A", "Otters"],
        "tags": ["x"],
        "line_start": 3,
        "line_end": "4",  # not a whole number: 0, not a crash
        "content_hash": "abc",
    }
    hit = Hit.from_dict(data)
    assert (hit.score, hit.doc_path, hit.heading_path, hit.tags) == (
        0.5,
        "a.md",
        ("A", "Otters"),
        ("x",),
    )
    assert (hit.line_start, hit.line_end, hit.root, hit.meta) == (3, 0, "", {})
    assert hit.fields == data and hit.fields is not data
    empty = Hit.from_dict({})
    assert (empty.score, empty.text, empty.heading_path) == (0.0, "", ())


def test_a_status_types_its_versions_and_says_whether_it_waited() -> None:
    row = {"fingerprint": "ab12", "status": "complete", "live": True, "points": 7}
    status = Status.from_dict({"phase": "watching", "daemon": True, "versions": [row]})
    assert status.caught_up is None and status.daemon and status.failed == []
    assert status.versions == [Version.from_dict(row)]
    assert (status.versions[0].points, status.versions[0].documents) == (7, 0)
    assert Status.from_dict({"caught_up": False}).caught_up is False


def test_a_switch_is_done_once_the_version_asked_for_is_live() -> None:
    assert Switch(target="ab", live="ab", daemon=False, summary=Summary()).done
    assert not Switch(target="ab", live="cd", daemon=True).done
    assert not Switch(target="ab", live=None, daemon=True).done
