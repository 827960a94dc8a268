"""The kafka sink's epoch markers: one record per committed transaction on the marker topic
(``<topic>.sluice-epochs`` by default: one partition, compacted), produced inside the
transaction it marks, so a ``read_committed`` consumer sees it exactly when it sees the
records. Its key is ``<pipeline>/<sink>/<epoch:012d>`` (zero-padded: listed keys sort in epoch
order; the commit's receipt names the same key), its value a JSON object naming the epoch,
the chunk ``i`` of ``n``, the record count and the transactional id.

Commits run in epoch order, so the markers answer both "is this chunk published?" and "is any
later epoch?" (a late retry of an old epoch then publishes nothing).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.sinks.exceptions import KafkaSinkError
from sluice.sinks.kafka.admin import Topics, watermarks
from sluice.sinks.kafka.producer import POLL_S, TIMEOUT_S

__all__ = ["Marker", "marker_key", "next_chunk", "read_markers"]


@dataclass(frozen=True)
class Marker:
    """One committed transaction of the sink, as its marker record says."""

    epoch: int
    chunk: int
    chunks: int
    records: int
    transactional_id: str
    attempt: str

    def to_json(self, pipeline: str, sink: str, topic: str) -> bytes:
        body = {"pipeline": pipeline, "sink": sink, "topic": topic, "epoch": self.epoch,
                "chunk": self.chunk, "chunks": self.chunks, "records": self.records,
                "transactional_id": self.transactional_id, "attempt": self.attempt}  # fmt: skip
        return json.dumps(body, separators=(",", ":")).encode()

    @property
    def last(self) -> bool:
        return self.chunk == self.chunks - 1


def marker_key(pipeline: str, sink: str, epoch: int) -> bytes:
    """``<pipeline>/<sink>/<epoch:012d>``: zero-padded, so a consumer listing the keys sees
    them in epoch order; the receipt names the same key."""
    return f"{pipeline}/{sink}/{epoch:012d}".encode()


def next_chunk(markers: list[Marker], epoch: int, chunks: int) -> int:
    """The first chunk of ``epoch`` the markers do not show (``chunks``: all are)."""
    if any(m.epoch > epoch for m in markers):
        return chunks  # commits run in epoch order: a later epoch means this one is done
    done = [m.chunk for m in markers if m.epoch == epoch]
    return max(done) + 1 if done else 0


def read_markers(
    client: Mapping[str, Any], topics: Topics, pipeline: str, sink: str, marker_topic: str,
    topic: str,
) -> list[Marker]:  # fmt: skip
    """Every committed transaction of ``pipeline``'s ``sink``, as the marker topic shows it
    to a ``read_committed`` consumer (read from the start to the last stable offset); ``topic``
    is the data topic errors name."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    if not topics.exists(marker_topic):
        return []
    settings = {
        **client,
        "group.id": f"sluice-markers-{pipeline}-{sink}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10,  # the end is reached sooner (a few small records)
    }
    consumer = Consumer(settings)
    found: list[Marker] = []
    try:
        tp = TopicPartition(marker_topic, 0, OFFSET_BEGINNING)
        low, high = watermarks(consumer, tp)
        if high <= low:
            return []
        consumer.assign([tp])
        prefix = f"{pipeline}/{sink}/".encode()
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(POLL_S)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaSinkError(
                    f"pipeline {pipeline}, sink {sink}: reading the epoch markers on "
                    f"{marker_topic} failed: {error}",
                    pipeline=pipeline, sink=sink, topic=topic,
                )  # fmt: skip
            key, value = msg.key(), msg.value()
            if key and value and key.startswith(prefix):
                body = json.loads(value)
                found.append(Marker(int(body["epoch"]), int(body["chunk"]),
                                    int(body["chunks"]), int(body["records"]),
                                    str(body["transactional_id"]),
                                    str(body.get("attempt", ""))))  # fmt: skip
        raise KafkaSinkError(
            f"pipeline {pipeline}, sink {sink}: the epoch markers on {marker_topic} were not "
            f"read to their end in {TIMEOUT_S:.0f} s",
            pipeline=pipeline, sink=sink, topic=topic,
        )  # fmt: skip
    finally:
        consumer.close()
