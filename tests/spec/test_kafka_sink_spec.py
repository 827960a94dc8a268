"""``type: kafka`` sinks in a spec: what is accepted, and every wrong setting named with its
fix (docs/kafka-sink.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.spec import KafkaSinkConfig, parse_spec

from tests.spec.test_loader import ORIGIN, base, only_problem

SERVERS = {"bootstrap_servers": "127.0.0.1:9092"}


def test_a_kafka_sink_with_its_defaults(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["sinks"] = [{"name": "out", "type": "kafka", "topic": "clicks", "key": "user", **SERVERS}]
    (sink,) = parse_spec(data, origin=ORIGIN).sinks
    assert isinstance(sink, KafkaSinkConfig)
    assert (sink.topic, sink.key, sink.value, sink.on_rewind) == (
        "clicks", ("user",), "json", "refuse",
    )  # fmt: skip
    assert sink.markers == "clicks.sluice-epochs"
    assert sink.max_records_per_transaction == 100_000
    assert sink.record_key == ("user",)


def test_an_upsert_kafka_sink_is_keyed_by_the_row_identity(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["emit"] = "on_update"
    data["sinks"] = [{"name": "out", "type": "kafka", "topic": "clicks", "mode": "upsert",
                      "on_rewind": "republish", "connection": "kafka_default"}]  # fmt: skip
    (sink,) = parse_spec(data, origin=ORIGIN).sinks
    assert isinstance(sink, KafkaSinkConfig)
    assert sink.record_key == ("user", "window_start", "window_end")
    assert sink.connection_ids() == ("kafka_default",)


@pytest.mark.parametrize(
    ("sink", "field", "words"),
    [
        ({**SERVERS}, "sinks[0].topic", "is required"),
        ({"topic": "a b", **SERVERS}, "sinks[0].topic", "not a Kafka topic name"),
        ({"topic": "t"}, "sinks[0].bootstrap_servers", "host:port"),
        ({"topic": "t", "value": "avro", **SERVERS}, "sinks[0].value", "'avro' is not valid"),
        ({"topic": "t", "value": "string", **SERVERS}, "sinks[0].value_column", "is required"),
        ({"topic": "t", "value_column": "url", **SERVERS}, "sinks[0].value_column",
         "only applies to value: string or bytes"),
        ({"topic": "t", "on_rewind": "republish", **SERVERS}, "sinks[0].on_rewind",
         "republish needs mode: upsert"),
        ({"topic": "t", "key": 3, **SERVERS}, "sinks[0].key", "not a column list"),
        ({"topic": "t", "headers": ["user"], **SERVERS}, "sinks[0].headers",
         "header name to column"),
        ({"topic": "t", "marker_topic": "t", **SERVERS}, "sinks[0].marker_topic",
         "must differ from topic"),
        ({"topic": "t", "max_records_per_transaction": 0, **SERVERS},
         "sinks[0].max_records_per_transaction", "not a positive whole number"),
        ({"topic": "t", "kafka": {"sasl.password": "x"}, **SERVERS},
         "sinks[0].kafka.sasl.password", "is a credential"),
        ({"topic": "t", "kafka": {"transactional.id": "x"}, **SERVERS},
         "sinks[0].kafka.transactional.id", "is set by Sluice"),
        ({"topic": "t", "format": "jsonl", **SERVERS}, "sinks[0].format",
         "not a setting of a kafka sink"),
    ],
)  # fmt: skip
def test_bad_kafka_sink_settings_are_named(
    tmp_path: Path, sink: dict[str, Any], field: str, words: str
) -> None:
    data = base(tmp_path)
    data["sinks"] = [{"name": "out", "type": "kafka", **sink}]
    problem, _ = only_problem(data, field)
    assert words in problem


def test_an_upsert_kafka_sink_takes_no_key_of_its_own(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["emit"] = "on_update"
    data["sinks"] = [{"name": "out", "type": "kafka", "topic": "t", "mode": "upsert",
                      "key": ["user"], **SERVERS}]  # fmt: skip
    problem, fix = only_problem(data, "sinks[0].key")
    assert "row identity" in problem and "remove key" in fix
