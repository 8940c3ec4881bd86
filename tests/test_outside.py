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


# -- values quoted in an error line, and times, from outside ------------------

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mdindex.outside import QUOTED_CHARS, quoted, stamp  # noqa: E402

# what a quote may add to the value's first QUOTED_CHARS: quotes, escapes of
# the cut, "… (4,000,000 characters)"
QUOTE_SLACK = 40

huge = st.one_of(
    st.integers(min_value=10**60, max_value=10**61) | st.just(10**4000) | st.just(-(10**5000)),
    st.floats(),
    st.text(min_size=0, max_size=5000),
    st.binary(max_size=500),
    st.lists(st.text(max_size=300), max_size=30),
    st.dictionaries(st.text(max_size=100), st.integers(), max_size=20),
)


@given(huge)
# No deadline: its default of 200 ms an example is a time bound, and a worker
# paused that long on a loaded machine (xdist on two cores) reads as Flaky.
@settings(deadline=None)
def test_a_quoted_value_is_at_most_a_line_whatever_its_size(value: object) -> None:
    """Found by a hostile review: a 4,000-digit number or 4 KB string was
    repeated whole in the error line (4,079 characters)."""
    got = quoted(value)
    assert len(got) <= QUOTED_CHARS * 4 + QUOTE_SLACK  # repr escapes at most 4 chars each
    assert "\n" not in got


def test_a_quote_cut_short_says_how_long_the_value_was() -> None:
    # the quote shown is at most QUOTED_CHARS, its opening quote counted
    assert quoted("x" * 4000) == "'" + "x" * (QUOTED_CHARS - 1) + "… (4,000 characters)"
    assert quoted(10**4000) == "a number of about 4,000 digits"
    assert quoted("mode") == "'mode'" and quoted(1e300) == "1e+300" and quoted(12) == "12"
    assert quoted([1] * 100).endswith("… (300 characters)")


@pytest.mark.parametrize(
    "bad", [1e300, -1e300, "99999-01-01T00:00:00Z", "9" * 4000, 10**4000, "yesterday", None]
)
def test_a_time_from_outside_is_iso_8601_within_year_9999(bad: object) -> None:
    with pytest.raises(ValueError, match="created_at must be an ISO 8601 time, not ") as caught:
        stamp(bad, "created_at")
    assert len(str(caught.value)) <= 60 + QUOTED_CHARS + QUOTE_SLACK
    for good in ("", "2026-12-04T09:33:51.000Z", "2026-01-01T00:00:00+00:00"):
        assert stamp(good, "created_at") == good
