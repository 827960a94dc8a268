"""Collects the problems of one spec while its sections are read (every problem at once)."""

from __future__ import annotations

import difflib
from typing import Any

from sluice.spec.durations import parse_duration_us
from sluice.spec.exceptions import SpecError, SpecProblem

__all__ = ["Checker", "kind"]


def kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


class Checker:
    """Problems found so far, and helpers that check one value each and record what is
    wrong with it (the field, the problem, the fix)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.problems: list[SpecProblem] = []

    def add(self, field: str, problem: str, fix: str = "") -> None:
        self.problems.append(SpecProblem(field, problem, fix))

    def extend(self, problems: list[SpecProblem]) -> None:
        self.problems.extend(problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(self.origin, self.problems)

    def mapping(self, value: Any, field: str, allowed: set[str]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(field, f"expected a mapping, got {kind(value)}", "see README 'Spec'")
            return None
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"allowed: {sorted(allowed)}"
                self.add(f"{field}.{key}".lstrip("."), "unknown field", hint)
        return value

    def string(
        self,
        data: dict[str, Any],
        key: str,
        field: str,
        choices: tuple[str, ...] = (),
        default: str | None = None,
        hint: str = "",
    ) -> str | None:
        value = data.get(key, default)
        where = f"{field}.{key}".lstrip(".")
        more = f" {hint}" if hint else ""
        if value is None:
            self.add(where, "is required", f"one of {list(choices)}{more}" if choices else "add it")
            return None
        if not isinstance(value, str) or (choices and value not in choices):
            self.add(where, f"{value!r} is not valid", f"use one of {list(choices)}{more}")
            return None
        if not value.strip():
            self.add(where, "is empty", "give it a value")
            return None
        return value

    def duration(
        self,
        data: dict[str, Any],
        key: str,
        field: str,
        default: Any = None,
        positive: bool = False,
    ) -> int:
        value = data.get(key, default)
        where = f"{field}.{key}".lstrip(".")
        if value is None:
            self.add(where, "is required", "write a duration like 5s or 1m")
            return 0
        try:
            us = parse_duration_us(value)
        except ValueError as exc:
            self.add(where, str(exc), "write a duration like 500ms, 5s, 1m, 2h or 1d")
            return 0
        if positive and us <= 0:
            self.add(where, "must be greater than zero", "write a duration like 1m")
        return us

    def positive_int(
        self, data: dict[str, Any], key: str, field: str, default: int | None
    ) -> int | None:
        value = data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.add(f"{field}.{key}", f"{value!r} is not a positive whole number", "e.g. 10")
            return default
        return value
