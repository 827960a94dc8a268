"""Several named sources read as one, for a pipeline that joins two streams (docs/joins.md).

The protocol treats a source as opaque: it stores what ``to_dict`` wrote, asks ``plan_range``
for the next range, ``units_of`` for what to remember, ``is_before`` to order offsets. A
:class:`MultiSource` answers each of those for all its components at once, so plan, recovery,
retention, rewind, the report and the Airflow trigger work unchanged. Each component keeps
its own offsets; an epoch's range holds each one's slice, ``None`` for a source with nothing
new (an empty slice: its end is its start), and the epoch commits them all together::

    {"type": "multi", "start": {"type": "multi", "sources": {"persons": {...}, ...}},
     "sources": {"persons": {"type": "files", ...}, "auctions": None}}

The process step reads each component on its own (:meth:`MultiSource.parts`: a name, the
component and its slice), as it reads a pipeline's one source: what a join does with two
inputs is the join operator's. A component's units are named ``<name>:`` here
(``persons:a.jsonl``, for :meth:`MultiSource.release`), so a source name holds no ``:``
(nor ``/``: the join names its sides' partitions ``<name>/<partition>``).

Stored offsets and ranges read back without the sources too (``from_dict``): each part then
stays as it was stored (:class:`StoredOffset` / :class:`StoredRange`), enough to store, compare
and show it again; :meth:`MultiSource.decode_offset` gives each part its own source's type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import Offset, Source, SourcePart, SourceRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MultiOffset", "MultiRange", "MultiSource", "StoredOffset", "StoredRange"]


@dataclass(frozen=True)
class StoredOffset(Offset):
    """A component's offset as it was stored, read without its source."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredOffset:
        return cls(dict(data))

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.data.items() if k != "type")


@dataclass(frozen=True)
class StoredRange(SourceRange):
    """A component's slice as it was stored, read without its source: stored again as it
    was; what it holds (its end, its units) only its source can say."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredRange:
        return cls(dict(data))

    @property
    def end(self) -> Offset:
        raise TypeError(_UNDECODED.format("end"))

    @property
    def units(self) -> int:
        raise TypeError(_UNDECODED.format("units"))


_UNDECODED = (
    "a stored slice read without its source has no {}: read the range with its "
    "MultiSource (decode_range)"
)


@dataclass(frozen=True)
class MultiOffset(Offset):
    """Each source's offset, by name, in the sources' order (left, right)."""

    parts: tuple[tuple[str, Offset], ...]

    @property
    def by_name(self) -> dict[str, Offset]:
        return dict(self.parts)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "multi", "sources": {name: o.to_dict() for name, o in self.parts}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MultiOffset:
        """The stored form back, each part as stored (:class:`StoredOffset`)."""
        parts = _stored(data, "offset")
        return cls(tuple((name, StoredOffset.from_dict(part)) for name, part in parts.items()))

    def describe(self) -> str:
        return ", ".join(f"{name}={o.describe()}" for name, o in self.parts)


@dataclass(frozen=True)
class MultiRange(SourceRange):
    """Each source's slice of one epoch, by name (None: nothing new there), from ``start``."""

    start: MultiOffset
    parts: tuple[tuple[str, SourceRange | None], ...]

    def part(self, name: str) -> SourceRange | None:
        return dict(self.parts)[name]

    @property
    def end(self) -> MultiOffset:
        starts = self.start.by_name
        return MultiOffset(
            tuple((name, starts[name] if r is None else r.end) for name, r in self.parts)
        )

    @property
    def units(self) -> int:
        return sum(r.units for _, r in self.parts if r is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "multi",
            "start": self.start.to_dict(),
            "sources": {name: None if r is None else r.to_dict() for name, r in self.parts},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MultiRange:
        """The stored form back, each part as stored (:class:`StoredRange`; None stays)."""
        parts = _stored(data, "range")
        return cls(
            MultiOffset.from_dict(data["start"]),
            tuple((n, None if p is None else StoredRange.from_dict(p)) for n, p in parts.items()),
        )


class MultiSource(Source[MultiOffset, MultiRange]):
    """The named ``sources`` (left first) as one source.

    Caps apply to each source on its own: ``max_units=10`` plans up to 10 units of each.
    """

    offset_type = MultiOffset
    range_type = MultiRange

    def __init__(self, sources: Mapping[str, Source[Any, Any]]) -> None:
        _check_names(list(sources))
        self.sources = dict(sources)
        units = {s.unit_name for s in self.sources.values()}
        self.unit_name = units.pop() if len(units) == 1 else "units"

    @property
    def location(self) -> str:
        return ", ".join(f"{name}={s.location}" for name, s in self.sources.items())

    def initial_offset(self) -> MultiOffset:
        return MultiOffset(tuple((n, s.initial_offset()) for n, s in self.sources.items()))

    def decode_offset(self, data: dict[str, Any]) -> MultiOffset:
        stored = self._stored_parts(data, "offset")
        return MultiOffset(tuple((n, s.decode_offset(stored[n])) for n, s in self.sources.items()))

    def decode_range(self, data: dict[str, Any]) -> MultiRange:
        stored = self._stored_parts(data, "range")
        parts = tuple(
            (n, None if stored[n] is None else s.decode_range(stored[n]))
            for n, s in self.sources.items()
        )
        return MultiRange(self.decode_offset(data["start"]), parts)

    def _stored_parts(self, data: dict[str, Any], what: str) -> dict[str, Any]:
        """The ``sources`` of a stored multi offset or range; it must name exactly ours."""
        stored = _stored(data, what)
        if sorted(stored) != sorted(self.sources):
            raise ValueError(
                f"the stored {what} is of the sources {_and(sorted(stored))}, but this "
                f"pipeline reads {_and(list(self.sources))}"
            )
        return stored

    def plan_range(
        self, start: MultiOffset, max_units: int | None, max_records: int | None = None
    ) -> MultiRange | None:
        """Every source's next slice from its part of ``start``, each capped on its own;
        None only when no source has anything new."""
        starts = start.by_name
        parts = tuple(
            (n, s.plan_range(starts[n], max_units, max_records)) for n, s in self.sources.items()
        )
        if all(r is None for _, r in parts):
            return None
        return MultiRange(start, parts)

    def offset_from_user(self, data: dict[str, Any]) -> MultiOffset:
        """Every source's offset as that source takes it, by name:
        ``{"persons": {"after_key": "p-0003.jsonl"}, "auctions": {"next_event": 5000}}``
        (the stored form ``{"type": "multi", "sources": {...}}`` too)."""
        given = data.get("sources") if data.get("type") == "multi" else data
        if not isinstance(given, dict):
            raise ValueError(f"expected each source's offset by name ({self._example()})")
        names = list(self.sources)
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(
                f"unknown source(s) {unknown}; this pipeline joins {_and(names)} "
                f"({self._example()})"
            )
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(
                f"no offset for {_and(missing)}: the sources of a join move together, since "
                f"the join's state holds rows of both; give an offset for {_and(names)} "
                f"({self._example()}), or rewind to a checkpoint instead "
                "(restore_from=checkpoint with its epoch)"
            )
        return MultiOffset(tuple((n, self._user_part(n, given[n])) for n in names))

    def _user_part(self, name: str, value: Any) -> Offset:
        if not isinstance(value, dict):
            raise ValueError(f"{name}: expected that source's offset as a mapping, not {value!r}")
        try:
            offset: Offset = self.sources[name].offset_from_user(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from exc
        return offset

    def _example(self) -> str:
        return "{" + ", ".join(f'"{n}": {{...}}' for n in self.sources) + "}"

    def is_before(self, a: MultiOffset, b: MultiOffset) -> bool:
        """True when any source's part of ``a`` is before its part of ``b``."""
        ours, theirs = a.by_name, b.by_name
        return any(s.is_before(ours[n], theirs[n]) for n, s in self.sources.items())

    def offset_parts(self, start: MultiOffset) -> dict[str, tuple[Source[Any, Any], Offset]]:
        starts = start.by_name
        return {name: (source, starts[name]) for name, source in self.sources.items()}

    def pending_units(self, start: MultiOffset) -> int | None:
        starts = start.by_name
        counts = [s.pending_units(starts[n]) for n, s in self.sources.items()]
        return None if any(c is None for c in counts) else sum(c for c in counts if c)

    def missing_units(self, rng: MultiRange) -> list[str]:
        return [
            f"{name}: {unit}"
            for name, r in rng.parts
            if r is not None
            for unit in self.sources[name].missing_units(r)
        ]

    def units_of(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        """Each source's units of its slice, ``<name>:`` prefixed."""
        return tuple(
            f"{name}:{unit}"
            for name, s in self.sources.items()
            if (part := _stored_part(range_data, name))
            for unit in s.units_of(part)
        )

    def planning(self, epoch: int) -> MultiSource:
        return MultiSource({n: s.planning(epoch) for n, s in self.sources.items()})

    def forget(self, kept: list[dict[str, Any]], through: int) -> int:
        """Each source's :meth:`~Source.forget`, with its part of every kept offset."""
        return sum(
            s.forget([part for o in kept if (part := _offset_part(o, n)) is not None], through)
            for n, s in self.sources.items()
        )

    def remarks(self, range_data: dict[str, Any]) -> tuple[str, ...]:
        return tuple(
            f"{name}: {line}"
            for name, s in self.sources.items()
            if (part := _stored_part(range_data, name))
            for line in s.remarks(part)
        )

    @property
    def releases_input(self) -> bool:
        return any(s.releases_input for s in self.sources.values())

    def release(self, units: list[str], latest: dict[str, Any] | None) -> int:
        """Each source's units (``<name>:`` prefixed, as :meth:`units_of` gave them) to it."""
        released = 0
        for name, source in self.sources.items():
            prefix = f"{name}:"
            mine = [u[len(prefix) :] for u in units if u.startswith(prefix)]
            if mine and source.releases_input:
                part = _offset_part(latest, name) if latest is not None else None
                released += source.release(mine, part)
        return released

    def skipping_missing_input(self) -> MultiSource:
        skipping = {n: s.skipping_missing_input() for n, s in self.sources.items()}
        return MultiSource(skipping)

    def parts(self, range_data: dict[str, Any]) -> tuple[SourcePart, ...]:
        """Each source with its slice (None: nothing new from it), by name, left first."""
        rng = self.decode_range(range_data)
        return tuple(SourcePart(name, self.sources[name], r) for name, r in rng.parts)

    def read(self, spark: SparkSession, rng: MultiRange) -> DataFrame:
        """Refused: the records of several sources are not one frame; the process step reads
        each of :meth:`parts` on its own."""
        raise TypeError(
            f"{self.location}: several sources are read one at a time (MultiSource.parts)"
        )


def _stored(data: dict[str, Any], what: str) -> dict[str, Any]:
    """The ``sources`` of a stored multi offset or range."""
    stored = data.get("sources") if data.get("type") == "multi" else None
    if not isinstance(stored, dict):
        raise ValueError(f"not a multi {what}: {data!r}")
    return stored


def _stored_part(range_data: dict[str, Any], name: str) -> dict[str, Any] | None:
    """Source ``name``'s slice of a stored multi range (None: none, or not a multi range)."""
    if range_data.get("type") != "multi":
        return None
    part: dict[str, Any] | None = (range_data.get("sources") or {}).get(name)
    return part


def _offset_part(offset: dict[str, Any], name: str) -> dict[str, Any] | None:
    """Source ``name``'s part of a stored multi offset (None: not a multi offset)."""
    if offset.get("type") != "multi":
        return None
    part: dict[str, Any] | None = (offset.get("sources") or {}).get(name)
    return part


def _check_names(sources: list[str]) -> None:
    if not sources:
        raise ValueError("a MultiSource reads one source or more: none given")
    bad = [n for n in sources if not n or "/" in n or ":" in n]
    if bad:
        raise ValueError(f"source names {bad}: a name is not empty and holds no '/' or ':'")


def _and(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)
