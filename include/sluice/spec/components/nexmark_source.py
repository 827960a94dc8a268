"""``type: nexmark``: one event kind of the generated Nexmark stream (docs/nexmark.md)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import (
    PositiveInt,
    SourceConfig,
    problem,
    several,
)

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_EVENTS_PER_EPOCH", "NexmarkSourceConfig", "nexmark_source_spec"]

DEFAULT_EVENTS_PER_EPOCH = 100_000
_FILES_ONLY = ("path", "format", "max_files_per_epoch", "header", "partition_by")


def _events(value: Any) -> Any:
    from sluice.nexmark import EventKind

    kinds = [k.value for k in EventKind]
    if value not in kinds:
        raise problem(f"{value!r} is not valid", f"use one of {kinds}")
    return value


def _first_event(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise problem(f"{value!r} is not a whole number >= 0", "e.g. 0, the start of the stream")
    return value


def _generator(value: Any) -> Any:
    """NexmarkConfig overrides, validated; kept as sorted pairs."""
    from sluice.nexmark import InvalidNexmarkConfig, NexmarkConfig

    if isinstance(value, tuple):
        value = dict(value)
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise problem(f"expected a mapping, got {type(value).__name__}", "see README 'Spec'")
    known = sorted(NexmarkConfig().to_dict())
    found = []
    for key in value:
        close = difflib.get_close_matches(str(key), known, n=1)
        if key not in known:
            fix = f"did you mean '{close[0]}'?" if close else f"allowed: {known}"
            found.append((str(key), "unknown field", fix))
    try:
        NexmarkConfig(**{k: v for k, v in value.items() if k in known})
    except InvalidNexmarkConfig as exc:
        for text in exc.problems:
            name, _, reason = text.partition(": ")
            fix = "see docs/nexmark.md 'Configuration' for the valid values"
            found.append((name, reason, fix))
    if found:
        raise several(found)
    return tuple(sorted(value.items()))


class NexmarkSourceConfig(SourceConfig):
    type: Literal["nexmark"] = "nexmark"
    events: Annotated[str, BeforeValidator(_events)]
    max_events: PositiveInt | None = None
    events_per_epoch: PositiveInt = DEFAULT_EVENTS_PER_EPOCH
    partitions: PositiveInt = 1
    first_event: Annotated[int, BeforeValidator(_first_event)] = 0
    generator: Annotated[tuple[tuple[str, int], ...], BeforeValidator(_generator)] = ()

    @property
    def schema(self) -> tuple[tuple[str, str], ...]:  # type: ignore[override]
        """The columns of ``events``, set by the generator."""
        from sluice.nexmark import SPEC_SCHEMAS, EventKind

        return tuple(SPEC_SCHEMAS[EventKind(self.events)].items())

    @property
    def location(self) -> str:
        return f"nexmark://{self.events}"

    @property
    def rereads_cheaply(self) -> bool:
        return False

    def describe(self) -> str:
        return f"nexmark {self.events} events"

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        if key == "schema":
            return (
                "is set by the generator for a nexmark source",
                "remove it; the columns are those of source.events (docs/nexmark.md)",
            )
        if key in _FILES_ONLY:
            takes = sorted(set(cls.field_names()) - {"type"})
            return (
                "does not apply to a nexmark source",
                f"remove it; a nexmark source takes {takes}",
            )
        return super().unknown(key)

    def problems(self) -> list[tuple[str, str, str]]:
        from sluice.nexmark import InvalidEventRange, NexmarkConfig, check_range

        stop = self.first_event + (self.max_events or 0)
        try:
            check_range(self.first_event, stop, NexmarkConfig(**dict(self.generator)))
        except InvalidEventRange as exc:
            return [("max_events" if self.max_events else "first_event",
                     f"the generator cannot produce events [{self.first_event}, {stop}): "
                     f"{exc.reason}", "lower first_event / max_events")]  # fmt: skip
        return []


def nexmark_source_spec(
    events: str = "bid",
    *,
    max_events: int | None = None,
    events_per_epoch: int = DEFAULT_EVENTS_PER_EPOCH,
    partitions: int = 1,
    first_event: int = 0,
    generator: dict[str, int] | None = None,
) -> NexmarkSourceConfig:
    """A nexmark source's config, built in code (tests, benchmarks)."""
    return NexmarkSourceConfig(
        events=events,
        max_events=max_events,
        events_per_epoch=events_per_epoch,
        partitions=partitions,
        first_event=first_event,
        generator=generator or {},  # type: ignore[arg-type]
    )
