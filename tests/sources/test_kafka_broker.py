"""The Kafka test broker (tests/fixtures/kafka.py) and what Spark's batch Kafka reader does
with it: the ground the Kafka source (#8) stands on.

Spark reads with ``spark.read.format("kafka")`` and exact per-partition ``startingOffsets`` /
``endingOffsets`` (``[start, end)``, as a Sluice plan fixes them). Measured here with Spark
4.2.0 (kafka-clients 3.9.2) against Kafka 4.3.1 — what a Kafka source must plan around:

* A range that starts below the partition's log start offset (records deleted by retention or
  ``delete_records``): with ``failOnDataLoss=true`` (the default) the job fails in the task
  with ``KafkaIllegalStateException: Some data may have been lost ... Could not read records
  in offset [2, 10) ...`` (cause: ``OffsetOutOfRangeException``). With ``false`` it silently
  returns what is left (offsets 4..9 of [2, 10)), an entirely deleted range comes back empty;
  only a WARN in the executor log says so. Neither tells the driver which offsets were lost:
  compare the plan with ``start_offsets`` (Kafka's earliest offsets) before reading.
* ``startingOffsets`` -2 (earliest) resolves to the current log start offset at planning.
* A range that ends beyond the high watermark does not fail fast: the task polls for
  ``kafkaConsumer.pollTimeoutMs`` (default ``spark.network.timeout``, 120 s) waiting for the
  missing offsets, then fails (``true``) or returns the records that exist (``false``). Plan
  ends from ``end_offsets`` (the high watermark), never beyond.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from tests.fixtures.kafka import KafkaServer, Record, Written, spark_offsets

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: older than any broker default retention
DATA_LOSS = "Some data may have been lost"
COLUMNS = ("topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts",
           "timestampType", "headers")  # fmt: skip


def _read(
    spark: Any,
    kafka: KafkaServer,
    topic: str,
    start: dict[int, int],
    end: dict[int, int],
    **options: str,
) -> list[dict[str, Any]]:
    """Spark's batch Kafka read of ``[start, end)`` per partition, as plain dicts."""
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", spark_offsets(topic, start))
        .option("endingOffsets", spark_offsets(topic, end))
        .option("includeHeaders", "true")
        .options(**options)
        .load()
        .selectExpr(*COLUMNS)
    )
    rows = [_plain(row.asDict()) for row in df.collect()]
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("key", "value"):
        row[name] = None if row[name] is None else bytes(row[name])
    row["headers"] = [(h["key"], bytes(h["value"])) for h in row["headers"] or []]
    return row


def _offsets(rows: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in rows]


def _topic(name: str) -> str:
    return f"{name}-{time.monotonic_ns()}"  # the broker is shared by the whole session


def _records(partition: int, count: int) -> list[Record]:
    """``count`` keyed, timestamped records with headers for ``partition``; one value is a
    dict (JSON), one a tombstone, one header name repeats."""
    out = []
    for i in range(count):
        value: Any = f"p{partition}-{i}".encode()
        if i == 1:
            value = {"user": f"u{partition}", "n": i}
        elif i == 3:
            value = None
        headers: list[tuple[str, bytes | str]] = [
            ("trace", f"t{partition}{i}"),
            ("trace", b"\x00\xff"),
            ("n", str(i)),
        ]
        ts = BASE_MS + 1000 * partition + i
        out.append(Record(value, f"k{partition}", partition, ts, headers))
    return out


def test_spark_reads_exactly_the_planned_offsets(spark: Any, kafka_server: KafkaServer) -> None:
    kafka = kafka_server
    topic = kafka.create_topic(_topic("exact"), partitions=3)
    batches = {p: _records(p, 5) for p in range(3)}
    for p, records in batches.items():
        assert kafka.produce(topic, records) == [Written(p, i) for i in range(5)]
    assert kafka.start_offsets(topic) == {0: 0, 1: 0, 2: 0}
    assert kafka.end_offsets(topic) == {0: 5, 1: 5, 2: 5}

    rows = _read(spark, kafka, topic, {0: 1, 1: 0, 2: 4}, {0: 4, 1: 2, 2: 5})

    assert _offsets(rows) == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 4)]
    for row in rows:
        sent = batches[row["partition"]][row["offset"]]
        assert row["topic"] == topic
        assert row["key"] == f"k{row['partition']}".encode()
        assert row["value"] == sent.value_bytes()
        assert row["ts"] == sent.timestamp_ms
        assert row["timestampType"] == 0  # CreateTime: the producer's timestamp is kept
        assert row["headers"] == sent.header_list()  # order and repeated names kept
    by_offset = {(r["partition"], r["offset"]): r for r in rows}
    assert json.loads(by_offset[0, 1]["value"]) == {"user": "u0", "n": 1}
    assert by_offset[0, 3]["value"] is None  # a tombstone


def test_added_partitions_are_read_from_their_first_offset(
    spark: Any, kafka_server: KafkaServer
) -> None:
    kafka = kafka_server
    topic = kafka.create_topic(_topic("grow"), partitions=1)
    kafka.produce(topic, [Record(b"old", key=b"a", partition=0, timestamp_ms=BASE_MS)])

    kafka.add_partitions(topic, 3)
    written = kafka.produce(topic, [Record(b"new", key=b"b", partition=2, timestamp_ms=BASE_MS)])

    assert written == [Written(2, 0)]
    assert kafka.partitions(topic) == [0, 1, 2]
    assert kafka.end_offsets(topic) == {0: 1, 1: 0, 2: 1}
    rows = _read(spark, kafka, topic, {0: 0, 1: 0, 2: 0}, {0: 1, 1: 0, 2: 1})
    assert [(r["partition"], r["offset"], r["value"]) for r in rows] == [
        (0, 0, b"old"),
        (2, 0, b"new"),
    ]


def test_deleted_records_move_the_start_offset_and_spark_reports_the_loss(
    spark: Any, kafka_server: KafkaServer
) -> None:
    """delete_records is retention expiry on demand. See the module docstring for what
    Spark does with ``failOnDataLoss`` true / false."""
    kafka = kafka_server
    topic = kafka.create_topic(_topic("expired"), partitions=1)
    kafka.produce(topic, [Record(f"v{i}", partition=0, timestamp_ms=BASE_MS) for i in range(10)])

    assert kafka.delete_records(topic, {0: 4}) == {0: 4}
    assert kafka.start_offsets(topic) == {0: 4}
    assert kafka.end_offsets(topic) == {0: 10}

    with pytest.raises(Py4JJavaError, match=DATA_LOSS):
        _read(spark, kafka, topic, {0: 2}, {0: 10})  # failOnDataLoss defaults to true
    lenient = _read(spark, kafka, topic, {0: 2}, {0: 10}, failOnDataLoss="false")
    assert _offsets(lenient) == [(0, o) for o in range(4, 10)]  # 2 and 3 silently skipped
    gone = _read(spark, kafka, topic, {0: 0}, {0: 3}, failOnDataLoss="false")
    assert gone == []
    kept = _read(spark, kafka, topic, {0: 5}, {0: 8})
    assert _offsets(kept) == [(0, 5), (0, 6), (0, 7)]
    earliest = _read(spark, kafka, topic, {0: -2}, {0: 10})
    assert _offsets(earliest)[0] == (0, 4)


def test_an_end_beyond_the_high_watermark_waits_for_the_poll_timeout(
    spark: Any, kafka_server: KafkaServer
) -> None:
    """Spark polls for offsets past the end until kafkaConsumer.pollTimeoutMs (1 s here,
    120 s by default), then fails or, with failOnDataLoss=false, returns what exists."""
    kafka = kafka_server
    topic = kafka.create_topic(_topic("short"), partitions=1)
    kafka.produce(topic, [Record(f"v{i}", partition=0) for i in range(3)])
    poll = {"kafkaConsumer.pollTimeoutMs": "1000"}

    with pytest.raises(Py4JJavaError, match=DATA_LOSS):
        _read(spark, kafka, topic, {0: 0}, {0: 5}, **poll)
    rows = _read(spark, kafka, topic, {0: 0}, {0: 5}, failOnDataLoss="false", **poll)
    assert _offsets(rows) == [(0, 0), (0, 1), (0, 2)]


def test_delete_topic(kafka_server: KafkaServer) -> None:
    topic = kafka_server.create_topic(_topic("gone"), partitions=2)
    kafka_server.produce(topic, [{"value": {"a": 1}, "key": "k"}])
    kafka_server.delete_topic(topic)
    assert topic not in kafka_server.admin().list_topics(timeout=10).topics
