"""The Nexmark data model (Person, Auction, Bid), its column schemas and the generator config.

Field names are Beam's / Flink's Nexmark names in snake_case (``dateTime`` → ``date_time``).
Ids, prices (in cents) and categories are 64-bit integers; times are UTC instants with
microsecond resolution. Every generated table also carries ``event_id``, the Nexmark event id
(``config.first_event_id + n`` for event number ``n``), which orders the stream.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sluice.nexmark.exceptions import InvalidNexmarkConfig

__all__ = [
    "AUCTION_ID_LEAD",
    "AUCTION_PROPORTION",
    "BID_PROPORTION",
    "DEFAULT_BASE_TIME_US",
    "FIRST_AUCTION_ID",
    "FIRST_CATEGORY_ID",
    "FIRST_PERSON_ID",
    "NUM_CATEGORIES",
    "PERSON_ID_LEAD",
    "PERSON_PROPORTION",
    "PROPORTION_DENOMINATOR",
    "RECORD_TYPES",
    "SPEC_SCHEMAS",
    "Auction",
    "Bid",
    "EventKind",
    "NexmarkConfig",
    "Person",
    "record_from_row",
]

# Beam's GeneratorConfig / *Generator constants (not configurable there either).
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION  # 50
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = 10  # how many not-yet-created people a random pick may name
AUCTION_ID_LEAD = 10  # same for auctions

DEFAULT_BASE_TIME_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
MAX_TIME_US = 253_402_300_800_000_000  # 10000-01-01T00:00:00Z: Python datetimes stop before
MAX_EVENTS_PER_SECOND = 10**9
MAX_AVG_BYTE_SIZE = 100_000  # keeps every padding string inside the random text pool


class EventKind(StrEnum):
    PERSON = "person"
    AUCTION = "auction"
    BID = "bid"


@dataclass(frozen=True)
class Person:
    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: datetime
    extra: str


@dataclass(frozen=True)
class Auction:
    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: datetime
    expires: datetime
    seller: int
    category: int
    extra: str


@dataclass(frozen=True)
class Bid:
    auction: int
    bidder: int
    price: int
    channel: str
    url: str
    date_time: datetime
    extra: str


RECORD_TYPES: dict[EventKind, type[Person] | type[Auction] | type[Bid]] = {
    EventKind.PERSON: Person,
    EventKind.AUCTION: Auction,
    EventKind.BID: Bid,
}

_SPEC_TYPES = {"int": "long", "str": "string", "datetime": "timestamp"}

# The same columns as a pipeline spec's ``source.schema`` (files written by write_files).
SPEC_SCHEMAS: dict[EventKind, dict[str, str]] = {
    kind: {"event_id": "long"} | {f.name: _SPEC_TYPES[str(f.type)] for f in dataclasses.fields(t)}
    for kind, t in RECORD_TYPES.items()
}


def record_from_row(kind: EventKind | str, row: dict[str, Any]) -> Person | Auction | Bid:
    """The typed record of one row of ``generate_rows`` (extra keys such as ``event_id``
    and ``kind`` are ignored)."""
    record = RECORD_TYPES[EventKind(kind)]
    return record(**{f.name: row[f.name] for f in dataclasses.fields(record)})


@dataclass(frozen=True)
class NexmarkConfig:
    """What the generator needs besides the event number; every field has Beam's default.

    ``seed`` keys the per-event random stream; ``events_per_second`` sets event time
    (event ``n`` happens at ``base_time_us + n / events_per_second`` seconds);
    ``first_event_id`` shifts the id space (Beam's ``firstEventId``), e.g. to give parallel
    generators disjoint ids. The ratios: ``1/hot_*_ratio`` of the picks are random, the rest
    go to the current hot auction / bidder / seller (``1`` turns hot picks off).
    """

    seed: int = 0
    events_per_second: int = 10_000
    base_time_us: int = DEFAULT_BASE_TIME_US
    first_event_id: int = 0
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    hot_auction_ratio: int = 2
    hot_bidders_ratio: int = 4
    hot_sellers_ratio: int = 4
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100

    def __post_init__(self) -> None:
        problems = tuple(p for p in (self._problem(f.name) for f in _FIELDS) if p)
        if problems:
            raise InvalidNexmarkConfig(problems)

    def _problem(self, name: str) -> str | None:
        value = getattr(self, name)
        low, high = _BOUNDS[name]
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name}: expected an integer, got {value!r}"
        if not low <= value <= high:
            return f"{name}: {value} is outside [{low}, {high}]"
        return None

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NexmarkConfig:
        """The config for ``data`` (missing keys take their defaults; unknown keys are errors)."""
        unknown = sorted(set(data) - {f.name for f in _FIELDS})
        if unknown:
            known = ", ".join(f.name for f in _FIELDS)
            raise InvalidNexmarkConfig(
                tuple(f"{k}: unknown field; known: {known}" for k in unknown)
            )
        return cls(**data)


_FIELDS = dataclasses.fields(NexmarkConfig)
_BOUNDS: dict[str, tuple[int, int]] = {
    "seed": (0, 2**64 - 1),
    "events_per_second": (1, MAX_EVENTS_PER_SECOND),
    "base_time_us": (0, MAX_TIME_US - 1),
    "first_event_id": (0, 2**62),
    "num_in_flight_auctions": (1, 10**9),
    "num_active_people": (1, 10**9),
    "hot_auction_ratio": (1, 2**31 - 1),
    "hot_bidders_ratio": (1, 2**31 - 1),
    "hot_sellers_ratio": (1, 2**31 - 1),
    "avg_person_byte_size": (0, MAX_AVG_BYTE_SIZE),
    "avg_auction_byte_size": (0, MAX_AVG_BYTE_SIZE),
    "avg_bid_byte_size": (0, MAX_AVG_BYTE_SIZE),
}
