"""The kafka source's planning logic against a stand-in for the broker's offsets (the broker
itself: tests/sources/test_kafka_source.py). Only the two calls planning makes are replaced:
listing the partitions of a topic and reading a partition's (earliest, next) offsets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from sluice.sources.kafka import (
    KafkaOffset,
    KafkaOffsetsGone,
    KafkaRange,
    KafkaSource,
    KafkaSourceError,
    kafka_source_spec,
    spread,
)
from sluice.spec import KafkaSourceConfig, SpecError, parse_spec

SCHEMA = (("user", "string"), ("ts", "timestamp"))


class Offsets:
    """What a broker answers: partitions per topic and their (earliest, next) offsets."""

    def __init__(self, marks: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.marks = marks

    def list_topics(self, topic: str, timeout: float) -> Any:
        parts = {p: object() for (t, p) in self.marks if t == topic}
        meta = SimpleNamespace(partitions=parts, error=None) if parts else None
        return SimpleNamespace(topics={topic: meta} if meta else {})

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return self.marks[(tp.topic, tp.partition)]


def source(marks: dict[tuple[str, int], tuple[int, int]], **options: Any) -> KafkaSource:
    spec = kafka_source_spec(["clicks"], "127.0.0.1:9", SCHEMA, **options)
    return KafkaSource(spec, required=("ts",), client=Offsets(marks))


def test_spread_gives_equal_shares_and_passes_on_what_is_not_needed() -> None:
    available = {("t", 0): 100, ("t", 1): 3, ("t", 2): 50}
    assert spread(available, None) == available
    assert spread(available, 1000) == available
    assert spread(available, 60) == {("t", 0): 29, ("t", 1): 3, ("t", 2): 28}
    assert sum(spread(available, 60).values()) == 60
    assert spread({("t", 0): 5, ("t", 1): 5}, 1) == {("t", 0): 1, ("t", 1): 0}


def test_plans_per_partition_ranges_new_partitions_from_earliest_and_waits() -> None:
    src = source({("clicks", 0): (0, 10), ("clicks", 1): (0, 4)}, max_records_per_epoch=8)
    first = src.plan_range(src.initial_offset(), None)
    assert isinstance(first, KafkaRange)
    assert first.starts == {"clicks": {0: 0, 1: 0}}
    assert first.ends == {"clicks": {0: 4, 1: 4}}
    assert first.units == 8
    assert KafkaRange.from_dict(first.to_dict()) == first
    # partition 2 appears (retention already moved its start to 5): read from its earliest
    src._client.marks[("clicks", 2)] = (5, 7)  # type: ignore[attr-defined]
    second = src.plan_range(first.end, None)
    assert second is not None
    assert second.starts == {"clicks": {0: 4, 1: 4, 2: 5}}
    assert second.ends == {"clicks": {0: 10, 1: 4, 2: 7}}
    assert second.end == KafkaOffset({"clicks": {0: 10, 1: 4, 2: 7}})
    assert src.plan_range(second.end, None) is None
    # a cap that leaves a partition without records: it is waiting
    src._client.marks[("clicks", 0)] = (0, 20)  # type: ignore[attr-defined]
    src._client.marks[("clicks", 1)] = (0, 20)  # type: ignore[attr-defined]
    third = src.plan_range(second.end, 1)
    assert third is not None and third.units == 1 and third.waiting == ("clicks:1",)


def test_offsets_the_broker_deleted_fail_by_name_unless_earliest_is_asked() -> None:
    marks = {("clicks", 0): (50, 80), ("clicks", 1): (0, 10)}
    start = KafkaOffset({"clicks": {0: 20, 1: 10}})
    with pytest.raises(KafkaOffsetsGone) as gone:
        source(marks).plan_range(start, None)
    message = str(gone.value)
    assert "topic clicks partition 0: offsets 20..49 (30 records)" in message
    assert "on_missing_offsets: earliest" in message
    rng = source(marks, on_missing_offsets="earliest").plan_range(start, None)
    assert rng is not None
    assert rng.starts == {"clicks": {0: 50, 1: 10}} and rng.gaps == (("clicks", 0, 20, 50),)
    assert KafkaRange.from_dict(rng.to_dict()).gaps == rng.gaps
    # a partition of the committed offsets that no longer exists
    with pytest.raises(KafkaSourceError, match="partitions clicks:1 are in the committed"):
        source({("clicks", 0): (0, 80)}).plan_range(start, None)
    with pytest.raises(KafkaSourceError, match="topic 'clicks': no such topic"):
        source({}).plan_range(start, None)


def test_user_offsets_and_ordering() -> None:
    src = source({("clicks", 0): (0, 10)})
    assert src.offset_from_user({"next": {"clicks": {"0": 4}}}) == KafkaOffset({"clicks": {0: 4}})
    with pytest.raises(ValueError, match="not read by this source"):
        src.offset_from_user({"next": {"other": {"0": 4}}})
    with pytest.raises(ValueError, match="unknown field"):
        src.offset_from_user({"after_key": "x"})
    a, b = KafkaOffset({"clicks": {0: 3, 1: 9}}), KafkaOffset({"clicks": {0: 4, 1: 2}})
    assert src.is_before(a, b) and src.is_before(b, a)  # each is behind on one partition
    assert not src.is_before(b, KafkaOffset({"clicks": {0: 4}}))


def test_spec_fields_are_checked_by_name() -> None:
    body = {
        "name": "k",
        "source": {"type": "kafka", "topics": "clicks", "bootstrap_servers": "h:9092",
                   "schema": {"user": "string", "ts": "timestamp"},
                   "metadata": {"ts": "timestamp", "user": "header:user-id"},
                   "kafka": {"security.protocol": "PLAINTEXT"}},
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"n": "count(*)"},
        "sinks": [{"name": "out", "type": "files", "path": "/tmp/x"}],
        "checkpoint": {"storage": "/tmp/c"},
    }  # fmt: skip
    spec = parse_spec(body)
    assert isinstance(spec.source, KafkaSourceConfig) and spec.source.topics == ("clicks",)
    assert dict(spec.source.metadata) == {"ts": "timestamp", "user": "header:user-id"}
    bad = dict(body, source=dict(body["source"], metadata={"ts": "time", "nope": "key"},
                                 on_missing_offsets="skip", topics=[]))  # fmt: skip
    with pytest.raises(SpecError) as refused:
        parse_spec(bad)
    fields = {p.field for p in refused.value.problems}
    assert {"source.topics", "source.metadata.ts", "source.metadata.nope",
            "source.on_missing_offsets"} <= fields  # fmt: skip
