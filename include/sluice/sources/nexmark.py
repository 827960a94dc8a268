"""The ``nexmark`` source: one kind of the deterministic Nexmark stream (docs/nexmark.md).

The offset is an event number: an epoch reads events ``[next_event, stop)`` and keeps the
records of the configured kind (``bid``, ``auction`` or ``person``). Event ``n`` is a pure
function of ``(n, config)``, so any range replays identically; the rows are generated on the
executors (``spark.range`` over slices, then ``mapInArrow``), never on the driver.

Positions: event ``n`` is in partition ``str(n % partitions)`` at ``(_major=0, _line=n)``;
event times never decrease with ``n``, so every partition is in event-time order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import SPARK_TYPES, Offset, Source, SourceRange
from sluice.nexmark import EventKind, NexmarkConfig
from sluice.nexmark.model import AUCTION_PROPORTION, PERSON_PROPORTION, PROPORTION_DENOMINATOR
from sluice.nexmark.ranges import chunk_size
from sluice.spec.components.nexmark_source import (
    DEFAULT_EVENTS_PER_EPOCH,
    NexmarkSourceConfig,
    nexmark_source_spec,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULT_EVENTS_PER_EPOCH",
    "NexmarkOffset",
    "NexmarkRange",
    "NexmarkSource",
    "count_events",
    "nexmark_source_spec",
]

_MIN_SLICE = 4_096  # events per generator call on an executor, at least (amortises overhead)

# Where each kind sits in a block of PROPORTION_DENOMINATOR event ids: [low, high).
_BANDS: dict[EventKind, tuple[int, int]] = {
    EventKind.PERSON: (0, PERSON_PROPORTION),
    EventKind.AUCTION: (PERSON_PROPORTION, PERSON_PROPORTION + AUCTION_PROPORTION),
    EventKind.BID: (PERSON_PROPORTION + AUCTION_PROPORTION, PROPORTION_DENOMINATOR),
}


def count_events(kind: EventKind, start: int, stop: int, config: NexmarkConfig) -> int:
    """How many of the events ``[start, stop)`` are of ``kind`` (exact, O(1))."""
    low, high = _BANDS[kind]
    width = high - low

    def below(event_id: int) -> int:  # ids in [0, event_id) whose kind is ``kind``
        blocks, rest = divmod(event_id, PROPORTION_DENOMINATOR)
        return blocks * width + min(max(rest - low, 0), width)

    if stop <= start:
        return 0
    return below(config.first_event_id + stop) - below(config.first_event_id + start)


@dataclass(frozen=True)
class NexmarkOffset(Offset):
    """Every event before event number ``next_event`` has been read."""

    next_event: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"type": "nexmark", "next_event": self.next_event}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NexmarkOffset:
        if data.get("type") != "nexmark":
            raise ValueError(f"not a nexmark offset: {data!r}")
        return cls(int(data["next_event"]))

    def describe(self) -> str:
        return f"event {self.next_event}"


@dataclass(frozen=True)
class NexmarkRange(SourceRange):
    """Events ``[start.next_event, stop)``; units are events (of every kind)."""

    start: NexmarkOffset
    stop: int

    @property
    def end(self) -> NexmarkOffset:
        return NexmarkOffset(self.stop)

    @property
    def units(self) -> int:
        return self.stop - self.start.next_event

    def to_dict(self) -> dict[str, Any]:
        return {"type": "nexmark", "start": self.start.to_dict(), "stop": self.stop}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NexmarkRange:
        if data.get("type") != "nexmark":
            raise ValueError(f"not a nexmark range: {data!r}")
        return cls(NexmarkOffset.from_dict(data["start"]), int(data["stop"]))


class NexmarkSource(Source[NexmarkOffset, NexmarkRange]):
    """The ``options.events`` records of the Nexmark stream ``[first_event, first_event +
    max_events)`` (unbounded without ``max_events``), at most ``events_per_epoch`` events
    per epoch."""

    offset_type = NexmarkOffset
    range_type = NexmarkRange

    def __init__(self, config: NexmarkSourceConfig) -> None:
        self.config = config  # validated: counts positive, first_event >= 0
        self.kind = EventKind(config.events)
        self.generator = NexmarkConfig.from_dict(dict(config.generator))
        self.first_event = config.first_event
        max_events = config.max_events
        self.stop = None if max_events is None else self.first_event + max_events
        self.events_per_epoch = config.events_per_epoch
        self.partitions = config.partitions

    @property
    def location(self) -> str:
        return self.config.location

    def initial_offset(self) -> NexmarkOffset:
        return NexmarkOffset(self.first_event)

    unit_name = "events"

    def pending_units(self, start: Offset) -> int | None:
        assert isinstance(start, NexmarkOffset)
        return None if self.stop is None else max(0, self.stop - start.next_event)

    def plan_range(
        self, start: Offset, max_units: int | None, max_records: int | None = None
    ) -> NexmarkRange | None:
        """Up to ``events_per_epoch`` (and ``max_units``) events, ending at ``max_events``;
        with ``max_records``, the longest such range holding at most that many records of
        the kind (at least one event)."""
        assert isinstance(start, NexmarkOffset)
        first = start.next_event
        stop = first + min(self.events_per_epoch, max_units or self.events_per_epoch)
        if self.stop is not None:
            stop = min(stop, self.stop)
        if stop <= first:
            return None
        if max_records is not None:
            stop = self._cap_records(first, stop, max_records)
        return NexmarkRange(start, stop)

    def _cap_records(self, first: int, stop: int, max_records: int) -> int:
        """The largest ``s`` in ``[first + 1, stop]`` with at most ``max_records`` records of
        the kind in ``[first, s)`` (``first + 1`` if even one event is too many)."""
        low, high = first + 1, stop
        if count_events(self.kind, first, high, self.generator) <= max_records:
            return high
        while low < high:  # invariant: the answer is in [low, high)
            mid = (low + high + 1) // 2
            if count_events(self.kind, first, mid, self.generator) <= max_records:
                low = mid
            else:
                high = mid - 1
        return low

    def offset_from_user(self, data: dict[str, Any]) -> NexmarkOffset:
        """``{"next_event": N}``: read from event number ``N`` on."""
        unknown = sorted(set(data) - {"type", "next_event"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a nexmark offset is {{'next_event': N}}")
        if data.get("type", "nexmark") != "nexmark":
            raise ValueError(
                f"type {data['type']!r} is not 'nexmark' (this pipeline reads nexmark)"
            )
        value = data.get("next_event")
        last = "" if self.stop is None else f" and <= {self.stop} (first_event + max_events)"
        valid = f"an event number >= {self.first_event} (first_event){last}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"next_event must be {valid}, not {value!r}")
        if value < self.first_event or (self.stop is not None and value > self.stop):
            raise ValueError(f"next_event {value} is out of range; give {valid}")
        return NexmarkOffset(value)

    def is_before(self, a: Offset, b: Offset) -> bool:
        assert isinstance(a, NexmarkOffset) and isinstance(b, NexmarkOffset)
        return a.next_event < b.next_event

    def read(self, spark: SparkSession, rng: SourceRange) -> DataFrame:
        """The range's records, generated on the executors in slices of consecutive events
        (any slicing gives the same rows)."""
        assert isinstance(rng, NexmarkRange)
        first, total = rng.start.next_event, rng.units
        parallelism = max(1, spark.sparkContext.defaultParallelism)
        size = max(_MIN_SLICE, min(chunk_size(self.generator), math.ceil(total / parallelism)))
        slices = math.ceil(total / size)
        generate_slices = functools.partial(
            _generate_slices,
            first=first,
            stop=rng.stop,
            size=size,
            kind=self.kind,
            config=self.generator,
            partitions=self.partitions,
        )
        ids = spark.range(0, slices, numPartitions=max(1, min(slices, parallelism)))
        return ids.mapInArrow(generate_slices, self.spark_schema())

    def spark_schema(self) -> str:
        """The DDL of :meth:`read`'s rows."""
        columns = [f"`{c}` {SPARK_TYPES[t]}" for c, t in self.config.schema]
        head = "_partition string, _file string, _major int, _line bigint, _raw string"
        return ", ".join([head, "_error string", *columns])


def _generate_slices(
    batches: Iterator[pa.RecordBatch],
    *,
    first: int,
    stop: int,
    size: int,
    kind: EventKind,
    config: NexmarkConfig,
    partitions: int,
) -> Iterator[pa.RecordBatch]:
    """On an executor: slice ``i`` holds events ``[first + i*size, first + (i+1)*size)``, cut
    at ``stop``."""
    import pyarrow as pa  # the generator's libraries load where events are made, not to plan

    from sluice.nexmark.generator import generate

    labels = pa.array([str(p) for p in range(partitions)])
    label = pa.scalar(f"nexmark:{kind.value}")
    for batch in batches:
        for index in batch.column(0).to_numpy():
            low = first + int(index) * size
            table = generate(low, min(low + size, stop), config)[kind]
            numbers = table.column("event_id").to_numpy() - config.first_event_id
            rows = table.num_rows
            positions = pa.table(
                {
                    "_partition": labels.take(pa.array(numbers % partitions)),
                    "_file": pa.repeat(label, rows),
                    "_major": pa.repeat(pa.scalar(0, pa.int32()), rows),
                    "_line": pa.array(numbers, pa.int64()),
                    "_raw": pa.nulls(rows, pa.string()),
                    "_error": pa.nulls(rows, pa.string()),
                }
            )
            out = pa.Table.from_arrays(
                positions.columns + table.columns, positions.column_names + table.column_names
            )
            yield from out.to_batches()
