"""Durations: units, plain seconds, rejects, and the shortest exact rendering."""

from __future__ import annotations

import pytest
from sluice.spec import format_duration, parse_duration_us


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("500ms", 500_000),
        ("5s", 5_000_000),
        ("1m", 60_000_000),
        ("2h", 7_200_000_000),
        ("1d", 86_400_000_000),
        ("250us", 250),
        ("1.5s", 1_500_000),
        (" 10 s ", 10_000_000),
        ("0s", 0),
        (3, 3_000_000),
        (0.25, 250_000),
    ],
)
def test_parse(text: object, us: int) -> None:
    assert parse_duration_us(text) == us


@pytest.mark.parametrize("bad", ["", "5", "5 minutes", "-5s", "1w", "s", "1m30s", True, -1, None])
def test_rejects_with_accepted_forms(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration_us(bad)
    assert repr(bad) in str(info.value) or "negative" in str(info.value)


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (60_000_000, "1m"),
        (5_000_000, "5s"),
        (500_000, "500ms"),
        (86_400_000_000, "1d"),
        (90_000_000, "90s"),
        (7, "7us"),
        (0, "0s"),
        (3_600_000_000, "1h"),
    ],
)
def test_format(us: int, text: str) -> None:
    assert format_duration(us) == text


@pytest.mark.parametrize("text", ["500ms", "5s", "1m", "2h", "1d", "90s", "250us"])
def test_round_trip(text: str) -> None:
    assert format_duration(parse_duration_us(text)) == text
