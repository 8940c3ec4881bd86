"""Values from outside: checked numbers, and text escaped before a terminal shows it."""

from __future__ import annotations

from mdindex.outside import shown


def test_shown_escapes_keys_as_well_as_values() -> None:
    """Found by a hostile review: `mdindex status` printed its ``languages``
    mapping's keys raw, so a language written into the state file as
    ESC]0;...BEL ESC[2J set the terminal's title and cleared its screen."""
    hostile = "\x1b]0;PWNED\x07\x1b[2J"
    got = shown({"languages": {hostile: 1}, "list": [{hostile: hostile}]})
    assert got == {
        "languages": {"\\u001b]0;PWNED\\u0007\\u001b[2J": 1},
        "list": [{"\\u001b]0;PWNED\\u0007\\u001b[2J": "\\u001b]0;PWNED\\u0007\\u001b[2J"}],
    }
    assert shown({"plain": "text", 1: None}) == {"plain": "text", 1: None}
