"""``type: kafka``: records published to a Kafka topic, one transaction per epoch at qos 2
(docs/kafka-sink.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator

from sluice.spec.components.base import PositiveInt, Text, one_of, problem
from sluice.spec.components.kafka_source import (
    _SERVERS_FIX,
    SECRET_SETTINGS,
    _connection,
    _servers,
    _settings,
)
from sluice.spec.components.sinks import BuiltinSink, sink_name

if TYPE_CHECKING:
    pass

__all__ = ["DEFAULT_RECORDS_PER_TRANSACTION", "PRODUCER_OWNED", "KafkaSinkConfig"]

# An epoch above this many records is published as several transactions (chunks): a
# transaction must finish within the producer's transaction.timeout.ms.
DEFAULT_RECORDS_PER_TRANSACTION = 100_000
# Producer settings the sink decides (qos and exactly-once depend on them).
PRODUCER_OWNED = frozenset({
    "bootstrap.servers",
    "transactional.id",
    "enable.idempotence",
    "acks",
    "retries",
    "partitioner",
    "isolation.level",
    "group.id",
    "key.serializer",
    "value.serializer",
})  # fmt: skip
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _topic(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, str) or not value or not set(value) <= _TOPIC_CHARS:
        fix = "letters, digits, '.', '_' and '-', e.g. topic: clicks-per-minute"
        raise problem(f"{value!r} is not a Kafka topic name", fix)
    if len(value) > 249 or value in (".", ".."):
        raise problem(f"{value!r} is not a Kafka topic name", "at most 249 characters")
    return value


def _columns(value: Any) -> Any:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) and n for n in names):
        raise problem(f"{value!r} is not a column list", "e.g. key: [user]")
    return tuple(names)


def _headers(value: Any) -> Any:
    if isinstance(value, tuple):
        value = dict(value)
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()
    ):
        raise problem("expected a mapping of header name to column",
                      "e.g. headers: {source-user: user}")  # fmt: skip
    return tuple(sorted(value.items()))


class KafkaSinkConfig(BuiltinSink):
    name: Annotated[str, BeforeValidator(sink_name)]
    type: Literal["kafka"] = "kafka"
    topic: Annotated[Text, BeforeValidator(_topic)]
    bootstrap_servers: Annotated[str | None, BeforeValidator(_servers)] = None
    connection: Annotated[str | None, BeforeValidator(_connection)] = None
    # the record key's columns (append sinks; an upsert sink's key is its row identity)
    key: Annotated[tuple[str, ...], BeforeValidator(_columns)] = ()
    value: Annotated[Literal["json", "string", "bytes"], one_of(("json", "string", "bytes"))] = (
        "json"
    )
    value_column: str | None = None
    headers: Annotated[tuple[tuple[str, str], ...], BeforeValidator(_headers)] = ()
    on_rewind: Annotated[Literal["refuse", "republish"], one_of(("refuse", "republish"))] = "refuse"
    max_records_per_transaction: PositiveInt = DEFAULT_RECORDS_PER_TRANSACTION
    # where the epoch markers go (default ``<topic>.sluice-epochs``, compacted, created if missing)
    marker_topic: Annotated[str | None, BeforeValidator(_topic)] = None
    kafka: Annotated[tuple[tuple[str, str], ...], BeforeValidator(_settings)] = ()

    REQUIRED_FIX: ClassVar = {"topic": "add it: the topic to publish to, e.g. topic: clicks"}

    @property
    def markers(self) -> str:
        """The topic of the epoch markers."""
        return self.marker_topic or f"{self.topic}.sluice-epochs"

    @property
    def record_key(self) -> tuple[str, ...]:
        """The columns of the record key: the row identity of an upsert sink, else ``key``."""
        return self.keys if self.mode == "upsert" else self.key

    def output_ref(self) -> str:
        """The topic, by its servers or its connection id (never a secret)."""
        if self.bootstrap_servers:
            return f"kafka://{self.bootstrap_servers.split(',')[0]}/{self.topic}"
        return f"sluice-kafka://{(self.connection or '').lower()}/{self.topic}"

    def connection_ids(self) -> tuple[str, ...]:
        return (self.connection,) if self.connection else ()

    def describe(self) -> str:
        where = self.bootstrap_servers or self.connection
        return f"kafka topic {self.topic} on {where} ({self.value} values)"

    def problems(self) -> list[tuple[str, str, str]]:
        found: list[tuple[str, str, str]] = []
        if self.bootstrap_servers is None and not self.connection:
            found.append(("bootstrap_servers", "None is not host:port[,host:port]", _SERVERS_FIX))
        if self.value == "json" and self.value_column is not None:
            fix = "remove it (a json value is the whole row), or set value: string"
            found.append(("value_column", "only applies to value: string or bytes", fix))
        if self.value != "json" and not self.value_column:
            found.append(("value_column", f"is required with value: {self.value}",
                          "name the column that holds each record's value, e.g. "
                          "value_column: payload"))  # fmt: skip
        if self.mode == "upsert" and self.key:
            found.append(("key", "an upsert sink's record key is its row identity",
                          "remove key: the pipeline's keys and window are the key"))  # fmt: skip
        if self.on_rewind == "republish" and self.mode != "upsert":
            found.append(("on_rewind", "republish needs mode: upsert (a keyed changelog whose "
                          "last value per key wins on a compacted topic)",
                          "set mode: upsert, or leave on_rewind: refuse"))  # fmt: skip
        if self.marker_topic is not None and self.marker_topic == self.topic:
            found.append(("marker_topic", "must differ from topic",
                          f"leave it out (default {self.topic}.sluice-epochs)"))  # fmt: skip
        for name, _ in self.kafka:
            if name in SECRET_SETTINGS:
                found.append((f"kafka.{name}", "is a credential: it does not belong in a spec",
                              "put it in the extra of an Airflow connection of type kafka and "
                              "name that with connection"))  # fmt: skip
            elif name in PRODUCER_OWNED:
                found.append((f"kafka.{name}", "is set by Sluice",
                              "remove it (the sink sets it from qos; the servers are "
                              "bootstrap_servers)"))  # fmt: skip
        return found
