"""Durations written as ``500ms``, ``5s``, ``1m``, ``2h``, ``1d`` (or a plain number of seconds)."""

from __future__ import annotations

import re

__all__ = ["format_duration", "parse_duration_us"]

_UNITS_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_UNITS_US["d"] = 24 * _UNITS_US["h"]
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)\s*$")


def parse_duration_us(value: object) -> int:
    """Microseconds in ``value``; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return round(value * 1_000_000)
    match = _PATTERN.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration like 500ms, 5s, 1m, 2h or 1d")
    return round(float(match.group(1)) * _UNITS_US[match.group(2)])


def format_duration(us: int) -> str:
    """The shortest exact rendering: 60_000_000 -> '1m'."""
    if us == 0:
        return "0s"
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNITS_US[unit]
        if us and us % size == 0:
            return f"{us // size}{unit}"
    return f"{us}us"
