"""Facts about event numbers that need no generator: kind, event time, which ranges can be
generated, how many events one generator batch holds.

Plain Python (no numpy or pyarrow), so the spec loader and the source's planner use them
without loading what generating events needs (:mod:`sluice.nexmark.generator`).
"""

from __future__ import annotations

from sluice.nexmark.exceptions import InvalidEventRange
from sluice.nexmark.model import (
    AUCTION_PROPORTION,
    MAX_TIME_US,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    EventKind,
    NexmarkConfig,
)

__all__ = [
    "DEFAULT_CONFIG",
    "check_range",
    "chunk_size",
    "event_kind",
    "event_time_us",
    "horizon_events",
]

DEFAULT_CONFIG = NexmarkConfig()
_MAX_CHUNK = 1 << 17


def event_kind(n: int, config: NexmarkConfig = DEFAULT_CONFIG) -> EventKind:
    """The kind of event number ``n``."""
    offset = (config.first_event_id + n) % PROPORTION_DENOMINATOR
    if offset < PERSON_PROPORTION:
        return EventKind.PERSON
    if offset < PERSON_PROPORTION + AUCTION_PROPORTION:
        return EventKind.AUCTION
    return EventKind.BID


def event_time_us(n: int, config: NexmarkConfig = DEFAULT_CONFIG) -> int:
    """Event time of event number ``n`` in µs since the Unix epoch (UTC):
    ``base_time_us + floor(n * 1e6 / events_per_second)``, non-decreasing in ``n``."""
    return config.base_time_us + n * 1_000_000 // config.events_per_second


def horizon_events(config: NexmarkConfig) -> int:
    """Events until ``num_in_flight_auctions`` more auctions have been created."""
    return config.num_in_flight_auctions * PROPORTION_DENOMINATOR // AUCTION_PROPORTION


def check_range(start: int, stop: int, config: NexmarkConfig = DEFAULT_CONFIG) -> None:
    """Raise :class:`InvalidEventRange` unless ``[start, stop)`` can be generated."""
    for value in (start, stop):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidEventRange(start, stop, f"event numbers are integers, not {value!r}")
    if not 0 <= start <= stop:
        raise InvalidEventRange(start, stop, "need 0 <= start <= stop")
    if config.first_event_id + stop > 2**62:
        raise InvalidEventRange(start, stop, "event ids past 2^62")
    # Auctions of the last events may expire up to ~2 horizons later; keep that a valid time.
    if event_time_us(stop + 2 * horizon_events(config) + 1, config) >= MAX_TIME_US:
        raise InvalidEventRange(start, stop, "event times would pass the year 9999")


def chunk_size(config: NexmarkConfig) -> int:
    """Events per internal batch: bounded so one string column stays far below 2 GiB."""
    widest = max(config.avg_person_byte_size, config.avg_auction_byte_size, 100) * 2 + 1024
    return max(1, min(_MAX_CHUNK, 2**30 // widest))
