"""Errors of reading the store's object events (:mod:`sluice.sources.store_events`)."""

from __future__ import annotations

from sluice.sources.exceptions import SourceError
from sluice.words import count

__all__ = ["StoreEventsError", "StoreEventsGone", "Undecodable", "UndecodableStoreEvent"]


class StoreEventsError(SourceError):
    """The store's events cannot be read as the plan needs (the broker does not answer, the
    topic or a partition is missing, the range goes past what was written)."""


class StoreEventsGone(StoreEventsError):
    """Events the plan must read are no longer held by the broker (retention): a listing must
    find what they told. ``missing`` holds ``(partition, first missing, first still held)``."""

    def __init__(self, source: str, topic: str, missing: list[tuple[int, int, int]]) -> None:
        self.topic = topic
        self.missing = missing
        listed = "; ".join(
            f"partition {p}: offsets {lo}..{hi - 1} ({count(hi - lo, 'events')})"
            for p, lo, hi in missing
        )
        super().__init__(
            f"store events {source}: topic {topic} no longer holds events the plan needs "
            f"({listed}); retention deleted them. Nothing was read: list the source path in "
            "full to find the files they named",
            source=source,
        )


class UndecodableStoreEvent(StoreEventsError):
    """A message on the events topic is not an event of the configured format. It is never
    skipped: a skipped event could be a file never read."""

    def __init__(
        self, source: str, topic: str, partition: int, offset: int, format: str, reason: str
    ) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.format, self.reason = format, reason
        super().__init__(
            f"store events {source}: topic {topic} partition {partition} offset {offset} is "
            f"not a {format} object event: {reason}. Nothing was skipped: fix what produces "
            "to the topic, or notifications.format",
            source=source,
        )


class Undecodable(SourceError):
    """Raised by a format's decoder with why a message is not one of its events; the reader
    turns it into :class:`UndecodableStoreEvent`, naming topic, partition and offset."""
