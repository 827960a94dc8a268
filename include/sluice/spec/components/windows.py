"""The window kinds: ``tumbling(size)``, ``hopping(size, slide)``, ``session(gap)`` and
``count(count, slide)``, each a frozen config: plain data. The runtime maps each config class
to its strategy (:mod:`sluice.windows.kinds`); nothing here imports it. Times are
microseconds so window arithmetic is exact."""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sluice.spec.components.base import PositiveDuration, PositiveInt, WindowConfig
from sluice.spec.durations import format_duration

__all__ = ["CountWindow", "HoppingWindow", "SessionWindow", "TumblingWindow"]

_SETTINGS = ("size", "slide", "gap", "count", "max_duration")  # of some window kind


class _Window(WindowConfig):
    REQUIRED_FIX: ClassVar = {
        "size": "write a duration like 5s or 1m",
        "slide": "write a duration like 5s or 1m",
        "gap": "write a duration like 5s or 1m",
        "count": "e.g. count: 100",
    }

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        kind = cls.model_fields["type"].default
        takes = sorted(set(cls.field_names()) - {"type"})
        if key in _SETTINGS:
            return f"does not apply to {kind} windows", f"{kind} windows take {takes}"
        close = difflib.get_close_matches(key, [*_SETTINGS, "type"], n=1)
        return "unknown field", f"did you mean '{close[0]}'?" if close else f"allowed: {takes}"


class TumblingWindow(_Window):
    type: Literal["tumbling"] = "tumbling"
    size_us: PositiveDuration = Field(validation_alias="size")
    SHAPE = ("size_us",)

    @property
    def slide_us(self) -> int:
        return self.size_us

    def describe(self) -> str:
        return f"tumbling {format_duration(self.size_us)}"


class HoppingWindow(_Window):
    type: Literal["hopping"] = "hopping"
    size_us: PositiveDuration = Field(validation_alias="size")
    slide_us: PositiveDuration = Field(validation_alias="slide")
    SHAPE = ("size_us", "slide_us")

    def problems(self) -> list[tuple[str, str, str]]:
        if self.slide_us > self.size_us:
            return [("slide", "is longer than window.size (records would be skipped)",
                     "make slide <= size; slide = size is a tumbling window")]  # fmt: skip
        return []

    def describe(self) -> str:
        return f"hopping {format_duration(self.size_us)} every {format_duration(self.slide_us)}"


class SessionWindow(_Window):
    type: Literal["session"] = "session"
    gap_us: PositiveDuration = Field(validation_alias="gap")
    # cut at aligned check points (0: no cap)
    max_duration_us: PositiveDuration = Field(default=0, validation_alias="max_duration")
    SHAPE = ("gap_us",)

    def shape(self) -> dict[str, object]:
        shape = super().shape()
        if self.max_duration_us:
            shape["max_duration_us"] = self.max_duration_us
        return shape

    @property
    def capped(self) -> bool:
        """Cut at ``max_duration`` check points."""
        return self.max_duration_us > 0

    def describe(self) -> str:
        cap = f", at most {format_duration(self.max_duration_us)}" if self.capped else ""
        return f"session gap {format_duration(self.gap_us)}{cap}"


class CountWindow(_Window):
    type: Literal["count"] = "count"
    count: PositiveInt  # records per window
    count_slide: PositiveInt = Field(validation_alias="slide")  # a new window every this many
    SHAPE = ("count", "count_slide")

    @model_validator(mode="before")
    @classmethod
    def _slide_defaults_to_count(cls, data: Any) -> Any:
        absent = isinstance(data, dict) and "slide" not in data and "count_slide" not in data
        if absent and data.get("count") is not None:
            return {**data, "slide": data["count"]}
        return data

    def problems(self) -> list[tuple[str, str, str]]:
        if self.count_slide > self.count:
            return [("slide", "is larger than window.count (records would be skipped)",
                     "make slide <= count")]  # fmt: skip
        return []

    @property
    def counted(self) -> bool:
        return True

    def describe(self) -> str:
        return f"count {self.count} every {self.count_slide}"
