"""The object events under one source path, read from a Kafka topic (docs/file-notifications.md).

Instead of listing a folder of millions of files every plan, a plan of the ``files`` source can
read the store's object events since the last plan: ``notifications`` in the spec names the
topic and its format (:class:`~sluice.spec.components.files_source.NotificationsConfig`). The
offsets are exact: :meth:`StoreEvents.read` takes a ``[start, end)`` per partition and returns
the same events for the same range every time (a retried plan reads what the first attempt
read), or fails naming what is missing; a message it cannot decode fails the read naming
topic, partition and offset, never skipped.

Each :class:`ObjectEvent` carries what an S3 LIST of that object shows (``Size``,
``LastModified`` through :func:`listing_time_ns`, ``ETag`` without quotes), so a file found by
an event and the same file found by a listing compare equal. Planning only: no Spark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sluice.kafka_client import planner_settings
from sluice.sources.store_events.exceptions import (
    StoreEventsError,
    StoreEventsGone,
    Undecodable,
    UndecodableStoreEvent,
)
from sluice.sources.store_events.formats import ObjectEvent, s3_events, seaweedfs_events
from sluice.spec.components.files_source import NotificationsConfig
from sluice.storage import normalized_uri

__all__ = [
    "DECODERS",
    "SEAWEEDFS_BUCKETS",
    "ObjectEvent",
    "StoreEvents",
    "StoreEventsError",
    "StoreEventsGone",
    "UndecodableStoreEvent",
    "default_event_prefix",
    "listing_time_ns",
]

DECODERS: dict[str, Callable[[bytes | None, bytes | None], list[ObjectEvent]]] = {
    "seaweedfs": seaweedfs_events,
    "s3": s3_events,
}
SEAWEEDFS_BUCKETS = "/buckets"  # the filer folder of the S3 buckets (filer.toml's default)
_TIMEOUT_S = 30.0  # a broker that gives nothing for this long fails the read
_BATCH = 10_000
_LOG = logging.getLogger("sluice.store_events")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def listing_time_ns(last_modified: datetime | None) -> int:
    """An S3 LIST's ``LastModified`` (boto3's timezone-aware datetime; a naive one is UTC) as
    ns since the epoch, exactly (no float on the way): what :attr:`ObjectEvent.modified_ns` of
    the same object equals. SeaweedFS lists whole seconds, AWS S3 whole seconds, MinIO
    milliseconds; an event's finer time is cut to what the LIST shows."""
    if last_modified is None:
        return 0
    if last_modified.tzinfo is None:
        last_modified = last_modified.replace(tzinfo=UTC)
    return (last_modified - _EPOCH) // timedelta(microseconds=1) * 1000


def default_event_prefix(format: str, source_uri: str) -> str:
    """How the events of ``format`` name the source path ``s3://bucket/prefix``, with a
    trailing '/': SeaweedFS's filer path ``/buckets/bucket/prefix/``, S3 events'
    ``bucket/prefix/``. Another URI needs ``event_prefix`` in the spec (ValueError)."""
    uri = normalized_uri(source_uri)
    if not uri.startswith("s3://"):
        raise ValueError(
            f"{source_uri}: the events' name for a path that is not s3://bucket/prefix cannot "
            "be derived; set notifications.event_prefix (e.g. the filer path of a weed mount)"
        )
    location = uri[len("s3://") :].strip("/")
    if format == "seaweedfs":
        return f"{SEAWEEDFS_BUCKETS}/{location}/"
    return f"{location}/"


def _normalized_prefix(format: str, prefix: str) -> str:
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    if format == "seaweedfs" and not prefix.startswith("/"):
        raise ValueError(f"event_prefix {prefix!r}: a SeaweedFS filer path starts with '/'")
    if format == "s3" and prefix.startswith("/"):
        raise ValueError(f"event_prefix {prefix!r}: S3 events name bucket/key, no leading '/'")
    return prefix


class StoreEvents:
    """The object events under one source path, from a Kafka topic (NotificationsConfig)."""

    def __init__(
        self, config: NotificationsConfig, source_uri: str, settings: Mapping[str, str]
    ) -> None:
        """``settings``: the librdkafka client settings (``bootstrap.servers``, security...),
        as :mod:`sluice.kafka_client` gives them for the config's connection; the
        config's ``bootstrap_servers`` goes over them. Java-only settings are dropped."""
        self.config = config
        self.topic: str = config.topic
        self.format: str = config.format
        self.source_uri = source_uri
        self.event_prefix = _normalized_prefix(
            config.format, config.event_prefix or default_event_prefix(config.format, source_uri)
        )
        self.settings = planner_settings(settings)
        if config.bootstrap_servers:
            self.settings["bootstrap.servers"] = config.bootstrap_servers
        self._decode = DECODERS[config.format]

    @property
    def location(self) -> str:
        servers = self.settings.get("bootstrap.servers") or self.config.connection or "?"
        return f"kafka://{servers}/{self.topic}"

    def __repr__(self) -> str:
        return f"StoreEvents({self.format} events of {self.event_prefix} at {self.location})"

    # -- offsets ------------------------------------------------------------------------------

    def end_offsets(self) -> dict[int, int]:
        """The next offset of every partition of the topic now."""
        return {p: high for p, (_, high) in self._watermarks().items()}

    def start_offsets(self) -> dict[int, int]:
        """The earliest offset still held (retention), per partition."""
        return {p: low for p, (low, _) in self._watermarks().items()}

    # -- events -------------------------------------------------------------------------------

    def read(self, start: Mapping[int, int], end: Mapping[int, int]) -> list[ObjectEvent]:
        """Every event in ``[start, end)`` per partition (a partition ``start`` does not name
        starts at 0) whose key falls under the source path, in (partition, offset) order;
        events of other paths and of folders are left out.

        Raises :class:`StoreEventsGone` when the broker no longer holds part of the range,
        :class:`UndecodableStoreEvent` for a message that is not an event of the format, and
        :class:`StoreEventsError` when the range goes past a partition's end or the broker
        does not answer."""
        starts = {int(p): int(o) for p, o in start.items()}
        ranges = {int(p): (starts.get(int(p), 0), int(e)) for p, e in end.items()}
        todo = {p: (s, e) for p, (s, e) in sorted(ranges.items()) if s < e}
        if not todo:
            return []
        with self._consumer() as consumer:
            marks = self._watermarks(consumer)
            self._check_range(todo, marks)
            found = self._consume(consumer, todo)
        return [event for p in sorted(found) for event in found[p]]

    def _check_range(
        self, todo: Mapping[int, tuple[int, int]], marks: Mapping[int, tuple[int, int]]
    ) -> None:
        gone = [(p, s, marks[p][0]) for p, (s, _) in todo.items() if p in marks and s < marks[p][0]]
        if gone:
            raise StoreEventsGone(self.location, self.topic, gone)
        for p, (_, e) in todo.items():
            if p not in marks:
                raise StoreEventsError(
                    f"store events {self.location}: topic {self.topic} has no partition {p}",
                    source=self.location,
                )
            if e > marks[p][1]:
                raise StoreEventsError(
                    f"store events {self.location}: topic {self.topic} partition {p} ends at "
                    f"offset {marks[p][1]}, the range asks up to {e} (not written yet)",
                    source=self.location,
                )

    def _consume(
        self, consumer: Any, todo: Mapping[int, tuple[int, int]]
    ) -> dict[int, list[ObjectEvent]]:
        from confluent_kafka import KafkaException, TopicPartition

        found: dict[int, list[ObjectEvent]] = {p: [] for p in todo}
        left = set(todo)
        at = {p: s for p, (s, _) in todo.items()}  # the next offset expected per partition
        consumer.assign([TopicPartition(self.topic, p, s) for p, (s, _) in todo.items()])
        deadline = time.monotonic() + _TIMEOUT_S
        while left:
            # consume() returns once it has that many messages or the timeout passed: ask for
            # what is left (fewer only where records are missing: compacted, or transaction
            # markers), so a read never waits when every record is there
            wanted = min(_BATCH, max(1, sum(todo[p][1] - at[p] for p in left)))
            try:
                batch = consumer.consume(num_messages=wanted, timeout=0.2)
            except KafkaException as exc:
                raise self._broker_error(exc) from None
            if batch:
                deadline = time.monotonic() + _TIMEOUT_S
            elif time.monotonic() > deadline:
                waiting = {p: todo[p] for p in sorted(left)}
                raise StoreEventsError(
                    f"store events {self.location}: no records for {_TIMEOUT_S:.0f} s with "
                    f"partitions [start, end) {waiting} still to read",
                    source=self.location,
                )
            for msg in batch:
                partition, offset = msg.partition(), msg.offset()
                error = msg.error()
                if error is not None:
                    self._on_error(error, partition, offset, todo, left)
                    continue
                if partition not in left:
                    continue
                if offset >= todo[partition][1]:  # the range's last records are gone (compacted)
                    left.discard(partition)
                    continue
                found[partition].extend(self._events(msg.key(), msg.value(), partition, offset))
                at[partition] = offset + 1
                if offset + 1 >= todo[partition][1]:
                    left.discard(partition)
                    consumer.pause([TopicPartition(self.topic, partition)])
        return found

    def _on_error(
        self,
        error: Any,
        partition: int | None,
        offset: int | None,
        todo: Mapping[int, tuple[int, int]],
        left: set[int],
    ) -> None:
        from confluent_kafka import KafkaError

        code = error.code()
        if code == KafkaError._PARTITION_EOF and partition is not None:
            if partition in left and (offset or 0) >= todo[partition][1]:
                left.discard(partition)  # the last records of the range were not data records
            return
        gone = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
        if code in gone and partition is not None:
            low = self._watermarks().get(partition, (0, 0))[0]
            raise StoreEventsGone(self.location, self.topic, [(partition, todo[partition][0], low)])
        raise StoreEventsError(
            f"store events {self.location}: reading partition {partition}: {error.str()}",
            source=self.location,
        )

    def _events(
        self, key: bytes | None, value: bytes | None, partition: int, offset: int
    ) -> list[ObjectEvent]:
        try:
            return [
                event
                for raw in self._decode(key, value)
                if (event := self._under_path(raw)) is not None
            ]
        except Undecodable as exc:
            raise UndecodableStoreEvent(
                self.location, self.topic, partition, offset, self.format, str(exc)
            ) from None

    def _under_path(self, event: ObjectEvent) -> ObjectEvent | None:
        """``event`` with its key relative to the source path; None for a name outside it."""
        if not event.key.startswith(self.event_prefix):
            return None
        key = event.key[len(self.event_prefix) :]
        if not key or key.endswith("/"):  # the folder itself, or an S3 "folder/" marker
            return None
        if self.format == "seaweedfs":
            folders = key.split("/")[:-1]
            if ".uploads" in folders:  # a multipart upload's parts: never listed
                return None
            if any(f.endswith(".versions") for f in folders):
                raise Undecodable(
                    f"{event.key!r} is a version of a versioned bucket's object: these events "
                    "do not tell which version a LIST shows (versioned buckets are not supported; "
                    "suspend versioning, or read the path without notifications)"
                )
        return replace(event, key=key)

    # -- the broker ---------------------------------------------------------------------------

    def _consumer(self) -> _Consumer:
        return _Consumer(self)

    def _watermarks(self, consumer: Any = None) -> dict[int, tuple[int, int]]:
        """(earliest held, next to be written) of every partition of the topic."""
        from confluent_kafka import KafkaException, TopicPartition

        if consumer is None:
            with self._consumer() as own:
                return self._watermarks(own)
        try:
            meta = _metadata(consumer, self.topic).topics.get(self.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                reason = meta.error if meta is not None and meta.error else "no such topic"
                raise StoreEventsError(
                    f"store events {self.location}: topic {self.topic!r}: {reason}",
                    source=self.location,
                )
            marks = {}
            for partition in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=_TIMEOUT_S, cached=False
                )
                marks[partition] = (int(low), int(high))
            return marks
        except KafkaException as exc:
            raise self._broker_error(exc) from None

    def _broker_error(self, exc: Exception) -> StoreEventsError:
        error: Any = exc.args[0] if exc.args else exc
        reason = getattr(error, "str", error.__str__)()
        return StoreEventsError(
            f"store events {self.location}: the broker did not answer: {reason}",
            source=self.location,
        )


class _Consumer:
    """A short-lived consumer (closed again: no connection outlives a call); it never joins
    a group nor commits: the offsets live in the files source's offsets."""

    def __init__(self, events: StoreEvents) -> None:
        self.events = events
        self.consumer: Any = None

    def __enter__(self) -> Any:
        from confluent_kafka import Consumer, KafkaException

        events = self.events
        if not events.settings.get("bootstrap.servers"):
            raise StoreEventsError(
                f"store events {events.location}: no bootstrap servers: set "
                "notifications.bootstrap_servers or bootstrap.servers in the connection",
                source=events.location,
            )
        try:
            self.consumer = Consumer({
                **events.settings,
                "group.id": "sluice-store-events",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",  # a start no longer held fails, never skips
                "enable.partition.eof": True,
                "logger": _LOG,
            })  # fmt: skip
        except KafkaException as exc:
            raise StoreEventsError(
                f"store events {events.location}: the client settings are refused: {exc}",
                source=events.location,
            ) from None
        return self.consumer

    def __exit__(self, *exc_info: object) -> None:
        if self.consumer is not None:
            self.consumer.close()


def _metadata(consumer: Any, topic: str) -> Any:
    """``list_topics(topic)``, asked again each second until _TIMEOUT_S."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            return consumer.list_topics(topic, timeout=1.0)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
