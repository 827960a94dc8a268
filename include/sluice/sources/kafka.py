"""The ``kafka`` source: per-(topic, partition) offsets against a real broker (docs/kafka.md).

The offset is ``{topic: {partition: next offset}}``. A plan stores, per partition, the exact
``[start, end)`` it covers; ``read`` asks Spark's batch Kafka reader for exactly that range
(``assign`` + ``startingOffsets`` / ``endingOffsets`` JSON, ``failOnDataLoss``), so a replay
reads the same records. Planning talks to the broker directly (``confluent-kafka``), without
Spark:

* partitions of the topics are listed at every plan; a partition not in the start offset is
  new and is read from its earliest offset; a topic or partition that disappeared is an error;
* a start offset below the partition's earliest retained offset (the broker deleted records
  the pipeline has not read) fails with the topic, partition and the missing range, unless
  ``on_missing_offsets: earliest`` — then the range starts at the earliest offset and the plan
  records the gap (``gaps``); nothing is ever skipped silently;
* ``max_records_per_epoch`` is spread over the partitions with input (each gets an equal
  share, what one does not need goes to the others).

Positions: a record of partition ``p`` of topic ``t`` is in source partition ``"t:p"`` at
``(_major=0, _line=offset)``; ``_file`` is ``kafka://t/p``, so dead letters name the topic,
partition and offset. The value is JSON (``format: jsonl``) whose fields are the schema's
columns; ``metadata`` maps schema columns to the record's ``key``, ``timestamp``, ``topic``,
``partition``, ``offset`` or ``header:<name>`` instead. With ``format: raw`` the value is bytes
and every other column comes from ``decode``: a Spark SQL expression over the Kafka row
(``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``, ``headers``); the
dead letters' ``raw`` is then the value in base64.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.contracts.sources import Offset, Source, SourceRange
from sluice.kafka_client import client_settings as merged_settings
from sluice.kafka_client import (
    connection_settings,
    planner_settings,
    spark_settings,
)
from sluice.sources.exceptions import KafkaOffsetsGone, KafkaSourceError
from sluice.spec.components.kafka_source import KafkaSourceConfig, kafka_source_spec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "KafkaOffset",
    "KafkaOffsetsGone",
    "KafkaRange",
    "KafkaSource",
    "KafkaSourceError",
    "kafka_source_spec",
    "spread",
]

Partitions = dict[str, dict[int, int]]  # topic -> partition -> offset
METADATA = ("key", "timestamp", "topic", "partition", "offset")
_TIMEOUT_S = 30.0
_LOG = logging.getLogger("sluice.kafka")
# KafkaError codes of a refused login: SASL failed (-169) or the broker said so (58).
_AUTH_ERRORS = (-169, 58)


def _key(data: Mapping[str, Mapping[Any, Any]]) -> Partitions:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}


def _dump(parts: Partitions) -> dict[str, dict[str, int]]:
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(parts.items())}


@dataclass(frozen=True)
class KafkaOffset(Offset):
    """The next offset to read per (topic, partition); partitions not listed start at their
    earliest offset."""

    next: Partitions = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "kafka", "next": _dump(self.next)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KafkaOffset:
        if data.get("type") != "kafka":
            raise ValueError(f"not a kafka offset: {data!r}")
        return cls(_key(data.get("next", {})))

    def describe(self) -> str:
        if not self.next:
            return "earliest"
        return ", ".join(
            f"{t}:{p}@{o}" for t, ps in sorted(self.next.items()) for p, o in sorted(ps.items())
        )


@dataclass(frozen=True)
class KafkaRange(SourceRange):
    """Per partition ``[start, end)``; ``gaps`` are offsets the broker had deleted before they
    were read (only with ``on_missing_offsets: earliest``)."""

    start: KafkaOffset
    starts: Partitions = field(hash=False)  # where each partition's records begin
    ends: Partitions = field(hash=False)
    waiting: tuple[str, ...] = ()
    gaps: tuple[tuple[str, int, int, int], ...] = ()

    @property
    def end(self) -> KafkaOffset:
        merged = {t: dict(ps) for t, ps in self.start.next.items()}
        for t, ps in self.ends.items():
            merged.setdefault(t, {}).update(ps)
        return KafkaOffset(merged)

    @property
    def units(self) -> int:
        return sum(self.ends[t][p] - self.starts[t][p] for t in self.ends for p in self.ends[t])

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "kafka",
            "start": self.start.to_dict(),
            "starts": _dump(self.starts),
            "ends": _dump(self.ends),
        }
        if self.waiting:
            body["waiting"] = list(self.waiting)
        if self.gaps:
            body["gaps"] = [list(g) for g in self.gaps]
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KafkaRange:
        if data.get("type") != "kafka":
            raise ValueError(f"not a kafka range: {data!r}")
        return cls(
            KafkaOffset.from_dict(data["start"]),
            _key(data["starts"]),
            _key(data["ends"]),
            tuple(data.get("waiting", ())),
            tuple((str(t), int(p), int(lo), int(hi)) for t, p, lo, hi in data.get("gaps", ())),
        )


def spread(available: dict[tuple[str, int], int], cap: int | None) -> dict[tuple[str, int], int]:
    """How many records each partition contributes under ``cap``: equal shares, what a
    partition does not need goes to the others (water-filling); deterministic."""
    if cap is None or sum(available.values()) <= cap:
        return dict(available)
    taken = {tp: 0 for tp in available}
    left = cap
    open_ = sorted(tp for tp, n in available.items() if n > 0)
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for tp in list(open_):
            if left == 0:
                break
            more = min(share, available[tp] - taken[tp], left)
            taken[tp] += more
            left -= more
            if taken[tp] == available[tp]:
                open_.remove(tp)
    return taken


def _metadata(consumer: Any, topic: str, refused: list[str]) -> Any:
    """``list_topics(topic)``, asked again each second until _TIMEOUT_S; a refused login ends
    the wait at once (its KafkaException is re-raised)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            return consumer.list_topics(topic, timeout=1.0)
        except KafkaException:
            if refused or time.monotonic() > deadline:
                raise


class KafkaSource(Source[KafkaOffset, KafkaRange]):
    """The topics of a :class:`KafkaSourceConfig` (docs/kafka.md for the settings)."""

    offset_type = KafkaOffset
    range_type = KafkaRange

    unit_name = "records"

    def __init__(
        self,
        config: KafkaSourceConfig,
        *,
        required: tuple[str, ...] = (),
        read: tuple[str, ...] | None = None,
        client: Any = None,
        connection: str | None = None,
    ) -> None:
        """``connection`` is the URI of the Airflow connection ``source.connection`` names
        (None when it is not defined: the first use of the broker then says so)."""
        self.config = config
        self.required = required
        self.read_columns = read  # the schema columns the pipeline reads (None: all: parsing)
        self.topics: tuple[str, ...] = config.topics
        self.bootstrap: str | None = config.bootstrap_servers
        self.connection_id: str | None = config.connection
        self._connection = connection
        self.per_epoch: int | None = config.max_records_per_epoch
        self.on_missing: str = config.on_missing_offsets
        self.metadata: dict[str, str] = dict(config.metadata)
        self.settings: dict[str, str] = dict(config.kafka)
        self.raw = config.format == "raw"
        self.decode: dict[str, str] = dict(config.decode)
        self._client = client

    def skipping_missing_input(self) -> KafkaSource:
        if self.on_missing == "earliest":
            return self
        skipping = copy.copy(self)
        skipping.on_missing = "earliest"
        return skipping

    @property
    def location(self) -> str:
        return f"kafka://{self.bootstrap or self.connection_id}/{','.join(self.topics)}"

    def client_settings(self) -> dict[str, str]:
        """The connection's settings, the spec's ``kafka:`` over them, and the spec's
        ``bootstrap_servers`` over both (:func:`sluice.kafka_client.client_settings`)."""
        connection: dict[str, str] = {}
        if self.connection_id:
            if not self._connection:
                env = f"AIRFLOW_CONN_{self.connection_id.upper()}"
                raise KafkaSourceError(
                    f"kafka source {self.location}: connection {self.connection_id!r} is not "
                    f"defined: add it in Airflow (Admin > Connections, type kafka, the client "
                    f'settings in its extra, e.g. {{"bootstrap.servers": "host:9092"}}) or set '
                    f"{env} / SLUICE_CONN_{self.connection_id.upper()}",
                    source=self.location,
                )
            connection = connection_settings(self._connection)
        settings = merged_settings(connection, self.settings, self.bootstrap)
        if not settings.get("bootstrap.servers"):
            raise KafkaSourceError(
                f"kafka source {self.location}: no bootstrap servers: set "
                f"source.bootstrap_servers or bootstrap.servers in connection "
                f"{self.connection_id!r}'s extra",
                source=self.location,
            )
        return settings

    # -- the broker (planner side) ------------------------------------------------------------

    def watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest retained, next to be written) per (topic, partition) of the topics, from
        a short-lived consumer (closed again: no connection outlives the call)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = self._client
        refused: list[str] = []  # the broker refused our credentials (no point waiting)

        def on_error(error: Any) -> None:
            if error.code() in _AUTH_ERRORS:
                refused.append(error.str())

        if consumer is None:
            try:
                consumer = Consumer({
                    **planner_settings(self.client_settings()),
                    "group.id": "sluice-planner",  # never commits: offsets live in checkpoints
                    "enable.auto.commit": False,
                    "logger": _LOG,  # librdkafka's retries go to logging, not to stderr
                    "error_cb": on_error,
                })  # fmt: skip
            except KafkaException as exc:  # a setting librdkafka does not take
                raise KafkaSourceError(
                    f"kafka source {self.location}: the client settings are refused: "
                    f"{exc.args[0].str() if exc.args else exc}",
                    source=self.location,
                ) from None
        try:
            found: dict[tuple[str, int], tuple[int, int]] = {}
            for topic in self.topics:
                meta = _metadata(consumer, topic, refused).topics.get(topic)
                if meta is None or meta.error is not None or not meta.partitions:
                    reason = meta.error if meta is not None and meta.error else "no such topic"
                    raise KafkaSourceError(
                        f"kafka source {self.location}: topic {topic!r}: {reason}",
                        source=self.location,
                    )
                for partition in sorted(meta.partitions):
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=_TIMEOUT_S, cached=False
                    )
                    found[(topic, partition)] = (int(low), int(high))
            return found
        except KafkaException as exc:  # unreachable, refused credentials, a timeout
            error: Any = exc.args[0] if exc.args else exc
            reason = refused[-1] if refused else getattr(error, "str", error.__str__)()
            raise KafkaSourceError(
                f"kafka source {self.location}: the broker did not answer the planner: {reason}",
                source=self.location,
            ) from None
        finally:
            if consumer is not self._client:
                consumer.close()

    # -- the contract -------------------------------------------------------------------------

    def initial_offset(self) -> KafkaOffset:
        return KafkaOffset()

    def plan_range(
        self, start: Offset, max_units: int | None, max_records: int | None = None
    ) -> KafkaRange | None:
        assert isinstance(start, KafkaOffset)
        marks = self.watermarks()
        gone = [
            f"{t}:{p}"
            for t, ps in start.next.items()
            for p in ps
            if t in self.topics and (t, p) not in marks
        ]
        if gone:
            raise KafkaSourceError(
                f"kafka source {self.location}: partitions {', '.join(sorted(gone))} are in the "
                "committed offsets but no longer exist (a topic was deleted or recreated); "
                "refusing to guess where to continue",
                source=self.location,
            )
        begin: dict[tuple[str, int], int] = {}
        missing: list[tuple[str, int, int, int]] = []
        for (t, p), (low, _high) in marks.items():
            at = start.next.get(t, {}).get(p)
            if at is None:
                at = low  # a new partition: from its earliest offset
            elif at < low:
                missing.append((t, p, at, low))
                at = low
            begin[(t, p)] = at
        if missing and self.on_missing != "earliest":
            raise KafkaOffsetsGone(self.location, missing, "the next epoch")
        available = {tp: max(0, marks[tp][1] - begin[tp]) for tp in marks}
        caps = [c for c in (self.per_epoch, max_units, max_records) if c is not None]
        taken = spread(available, min(caps) if caps else None)
        if not any(taken.values()):
            return None
        starts: Partitions = {}
        ends: Partitions = {}
        for (t, p), n in taken.items():
            starts.setdefault(t, {})[p] = begin[(t, p)]
            ends.setdefault(t, {})[p] = begin[(t, p)] + n
        waiting = tuple(
            sorted(f"{t}:{p}" for (t, p), n in taken.items() if n == 0 and available[(t, p)] > 0)
        )
        return KafkaRange(start, starts, ends, waiting, tuple(missing))

    def pending_units(self, start: Offset) -> int | None:
        assert isinstance(start, KafkaOffset)
        marks = self.watermarks()
        return sum(
            max(0, high - max(low, start.next.get(t, {}).get(p, low)))
            for (t, p), (low, high) in marks.items()
        )

    def missing_units(self, rng: SourceRange) -> list[str]:
        assert isinstance(rng, KafkaRange)
        marks = self.watermarks()
        found = []
        for t, ps in sorted(rng.starts.items()):
            for p, lo in sorted(ps.items()):
                hi = rng.ends[t][p]
                low = marks.get((t, p), (hi, hi))[0]
                if hi > lo and low > lo:
                    found.append(f"topic {t} partition {p} offsets {lo}..{min(low, hi) - 1}")
        return found

    def waiting_partitions(self, rng: SourceRange) -> tuple[str, ...]:
        assert isinstance(rng, KafkaRange)
        return rng.waiting

    def offset_from_user(self, data: dict[str, Any]) -> KafkaOffset:
        """``{"next": {"topic": {"0": 120, "1": 98}}}``: partitions not named start at their
        earliest offset."""
        unknown = sorted(set(data) - {"type", "next"})
        if unknown:
            raise ValueError(
                f"unknown field(s) {unknown}; a kafka offset is "
                '{"next": {"<topic>": {"<partition>": <offset>}}}'
            )
        if data.get("type", "kafka") != "kafka":
            raise ValueError(f"type {data['type']!r} is not 'kafka' (this pipeline reads kafka)")
        value = data.get("next")
        if not isinstance(value, dict):
            shape = '{"<topic>": {"<partition>": <offset>}}'
            raise ValueError(f"next must be {shape}, not {value!r}")
        try:
            parts = _key(value)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"next: {exc}") from exc
        strange = sorted(set(parts) - set(self.topics))
        if strange:
            raise ValueError(
                f"next: topics {strange} are not read by this source {list(self.topics)}"
            )
        if any(o < 0 for ps in parts.values() for o in ps.values()):
            raise ValueError("next: offsets are whole numbers >= 0")
        return KafkaOffset(parts)

    def is_before(self, a: Offset, b: Offset) -> bool:
        assert isinstance(a, KafkaOffset) and isinstance(b, KafkaOffset)
        return any(
            a.next.get(t, {}).get(p, -1) < o for t, ps in b.next.items() for p, o in ps.items()
        )

    def read(self, spark: SparkSession, rng: SourceRange) -> DataFrame:
        """Exactly the planned offsets, checked against the broker first: records deleted
        since the plan are an error naming them (never silently fewer records)."""
        from pyspark.sql import functions as F

        from sluice.sources.parsing import parse_json_frame, valid_utf8

        assert isinstance(rng, KafkaRange)
        marks = self.watermarks()
        gone = [
            (t, p, lo, min(low, rng.ends[t][p]))
            for t, ps in rng.starts.items()
            for p, lo in ps.items()
            if rng.ends[t][p] > lo and (low := marks.get((t, p), (lo, lo))[0]) > lo
        ]
        if gone:
            raise KafkaOffsetsGone(self.location, gone, "this epoch's planned range")
        parts = {t: sorted(p for p in ps if rng.ends[t][p] > ps[p]) for t, ps in rng.starts.items()}
        parts = {t: ps for t, ps in parts.items() if ps}
        reader = (
            spark.read.format("kafka")
            .option("assign", json.dumps(parts))
            .option("startingOffsets", json.dumps(_dump({t: {p: rng.starts[t][p] for p in ps}
                                                          for t, ps in parts.items()})))
            .option("endingOffsets", json.dumps(_dump({t: {p: rng.ends[t][p] for p in ps}
                                                        for t, ps in parts.items()})))
            .option("failOnDataLoss", "true")
            .option("includeHeaders", "true")
        )  # fmt: skip
        try:
            settings = spark_settings(self.client_settings())
        except ValueError as exc:
            raise KafkaSourceError(
                f"kafka source {self.location}: {exc}", source=self.location
            ) from None
        for name, value in settings.items():
            reader = reader.option(f"kafka.{name}", value)
        rows = reader.load()
        if self.raw:  # the user's decode expressions see the Kafka row's own columns
            rows = rows.select(
                "*", *[F.expr(e).cast("string").alias(f"_d_{c}") for c, e in self.decode.items()]
            )
        checked: list[Column] = []
        if self.raw:
            raw = F.base64("value")
        else:  # JSON: the bytes must be UTF-8, as a file's line; else shown with U+FFFD
            text = F.col("value").cast("string")
            valid = valid_utf8(spark, F.col("value"))
            raw = F.when(valid, text).otherwise(F.make_valid_utf8(text))
            checked = [valid.alias("_utf8")]
        frame = rows.select(
            F.concat(F.lit("kafka://"), "topic", F.lit("/"), F.col("partition").cast("string"))
            .alias("_file"),
            F.lit(0).cast("int").alias("_major"),
            F.col("offset").cast("long").alias("_line"),
            raw.alias("_raw"),
            *checked,
            F.concat("topic", F.lit(":"), F.col("partition").cast("string")).alias("_kp"),
            *[self._metadata(source).alias(f"_m_{column}")
              for column, source in sorted(self.metadata.items())],
            *[F.col(f"_d_{c}") for c in self.decode if self.raw],
        )  # fmt: skip
        overrides = {c: F.col(f"_m_{c}") for c in self.metadata}
        if self.raw:
            overrides.update({c: F.col(f"_d_{c}") for c in self.decode})
        parsed = parse_json_frame(
            frame, self.config.schema, self.required, overrides, parse=not self.raw,
            valid_utf8=None if self.raw else "_utf8", read=self.read_columns,
        )  # fmt: skip
        return parsed.withColumn("_partition", F.col("_kp")).drop("_kp")

    @staticmethod
    def _metadata(source: str) -> Column:
        """A Kafka record field as text, as the JSON parser would see it."""
        from pyspark.sql import functions as F

        if source == "key":
            return F.col("key").cast("string")
        if source == "timestamp":
            return F.date_format("timestamp", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")
        if source in ("topic", "partition", "offset"):
            return F.col(source).cast("string")
        name = source.split(":", 1)[1].replace("'", "''")
        return F.expr(f"cast(filter(headers, h -> h.key = '{name}')[0].value as string)")
