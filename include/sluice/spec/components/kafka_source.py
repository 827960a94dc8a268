"""``type: kafka``: topics on a broker, JSON (or raw) values (docs/kafka.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator

from sluice.spec.components.base import (
    NAME_RE,
    Flag,
    PositiveInt,
    Schema,
    SourceConfig,
    one_of,
    problem,
    several,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "KAFKA_METADATA",
    "OWNED_SETTINGS",
    "SECRET_SETTINGS",
    "KafkaSourceConfig",
    "kafka_source_spec",
]

# Settings a connection may hold but a spec must not (secrets), and those Sluice owns.
SECRET_SETTINGS = frozenset({
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.client.secret",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.truststore.password",
})  # fmt: skip
# Sluice's reads are assigned partitions with exact offsets and no consumer group.
OWNED_SETTINGS = frozenset({
    "group.id",
    "enable.auto.commit",
    "auto.offset.reset",
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
})  # fmt: skip
KAFKA_METADATA = ("key", "timestamp", "topic", "partition", "offset")
Pairs = tuple[tuple[str, str], ...]
_DECLARE = "declare it in the schema"
_FILES_ONLY = ("path", "max_files_per_epoch", "header", "partition_by")


def _topics(value: Any) -> Any:
    topics = [value] if isinstance(value, str) else value
    if (
        not isinstance(topics, list | tuple)
        or not topics
        or not all(isinstance(t, str) and t for t in topics)
    ):
        raise problem(f"{value!r} is not a topic or a list of topics", "e.g. topics: [clicks]")
    return tuple(topics)


def _connection(value: Any) -> Any:
    if value is not None and not (isinstance(value, str) and NAME_RE.match(value.lower())):
        raise problem(
            f"{value!r} is not a connection id",
            "the id of an Airflow connection of type kafka, e.g. kafka_default",
        )
    return value.lower() if isinstance(value, str) else value


def _servers(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not value):
        raise problem(f"{value!r} is not host:port[,host:port]", _SERVERS_FIX)
    return value


_SERVERS_FIX = ("e.g. bootstrap_servers: 127.0.0.1:9092, or name an Airflow connection of "
                "type kafka with connection: kafka_default")  # fmt: skip


def _pairs(example: str, what: str) -> BeforeValidator:
    """A mapping of text to text, kept as sorted pairs."""

    def check(value: Any) -> Any:
        if isinstance(value, tuple):
            value = dict(value)
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise problem(f"expected a mapping, got {type(value).__name__}", example)
        if not all(isinstance(v, str) and v.strip() for v in value.values()):
            raise problem(f"expected a mapping of {what}", example)
        return tuple(sorted(value.items()))

    return BeforeValidator(check)


def _settings(value: Any) -> Any:
    if isinstance(value, tuple):
        value = dict(value)
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | bool) for k, v in value.items()
    ):
        raise problem("expected a mapping of Kafka client settings",
                      "e.g. {security.protocol: SASL_SSL}")  # fmt: skip
    text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return tuple(sorted(text.items()))


class KafkaSourceConfig(SourceConfig):
    type: Literal["kafka"] = "kafka"
    topics: Annotated[tuple[str, ...], BeforeValidator(_topics)]
    bootstrap_servers: Annotated[str | None, BeforeValidator(_servers)] = None
    connection: Annotated[str | None, BeforeValidator(_connection)] = None
    columns: Schema = Field(alias="schema")
    # the record value: JSON (one object per record) or raw bytes read through ``decode``
    format: Annotated[Literal["jsonl", "raw"], one_of(("jsonl", "raw"))] = "jsonl"
    metadata: Annotated[Pairs, _pairs("e.g. {ts: timestamp, user: key}", "column: field")] = ()
    decode: Annotated[
        Pairs,
        _pairs("e.g. {user: 'cast(key as string)'}", "column: Spark SQL expression"),
    ] = ()
    max_records_per_epoch: PositiveInt | None = None
    on_missing_offsets: Annotated[Literal["fail", "earliest"], one_of(("fail", "earliest"))] = (
        "fail"
    )
    kafka: Annotated[tuple[tuple[str, str], ...], BeforeValidator(_settings)] = ()
    # type-check every schema column, also those the pipeline never reads (docs/dead-letters.md)
    strict_schema: Flag = False

    # checked once the fields they depend on (declared above them) are valid
    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: Pairs, info: ValidationInfo) -> Pairs:
        columns, found = dict(info.data.get("columns", ())), []
        for column, field in value:
            if "columns" in info.data and column not in columns:
                found.append((column, "is not a column of source.schema", _DECLARE))
            if field not in KAFKA_METADATA and not (field.startswith("header:") and field[7:]):
                found.append((column, f"{field!r} is not a Kafka record field",
                              f"one of {list(KAFKA_METADATA)} or header:<name>"))  # fmt: skip
        if found:
            raise several(found)
        return value

    @field_validator("decode")
    @classmethod
    def _decode(cls, value: Pairs, info: ValidationInfo) -> Pairs:
        columns, decoded, found = dict(info.data.get("columns", ())), dict(value), []
        raw = info.data.get("format") == "raw"
        if raw and columns and "metadata" in info.data:
            undecoded = [
                c for c in columns if c not in decoded and c not in dict(info.data["metadata"])
            ]
            if undecoded:
                found.append(("", f"columns {undecoded} have no decode expression",
                              "with format: raw every schema column comes from decode or "
                              "metadata, e.g. decode: {user: 'cast(key as string)'}"))  # fmt: skip
        for column in decoded:
            if "columns" in info.data and column not in columns:
                found.append((column, "is not a column of source.schema", _DECLARE))
            if not raw and "format" in info.data:
                found.append(
                    (column, "only applies to format: raw", "remove it, or set format: raw")
                )
        if found:
            raise several(found)
        return value

    @property
    def location(self) -> str:
        """The topics as one name, for messages: ``kafka://<servers>/<topic,...>``."""
        return f"kafka://{self.bootstrap_servers or self.connection}/{','.join(self.topics)}"

    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        if key in _FILES_ONLY:
            takes = sorted(set(cls.field_names()) - {"type"})
            return "does not apply to a kafka source", f"remove it; a kafka source takes {takes}"
        return super().unknown(key)

    def connection_ids(self) -> tuple[str, ...]:
        return (self.connection,) if self.connection else ()

    def describe(self) -> str:
        return f"kafka {self.format} from {self.location}"

    def problems(self) -> list[tuple[str, str, str]]:
        found = []
        if self.bootstrap_servers is None and not self.connection:
            found.append(("bootstrap_servers", "None is not host:port[,host:port]", _SERVERS_FIX))
        found += self._setting_problems()
        return found

    def _setting_problems(self) -> list[tuple[str, str, str]]:
        found = []
        for name, _ in self.kafka:
            if name in SECRET_SETTINGS:
                found.append((f"kafka.{name}", "is a credential: it does not belong in a spec",
                              "put it in the extra of an Airflow connection of type kafka and "
                              "name that with source.connection"))  # fmt: skip
            elif name in OWNED_SETTINGS or name == "bootstrap.servers":
                found.append((f"kafka.{name}", "is set by Sluice",
                              "remove it (offsets live in Sluice's checkpoints; the servers "
                              "are source.bootstrap_servers)"))  # fmt: skip
        return found


def kafka_source_spec(
    topics: list[str],
    bootstrap_servers: str | None,
    schema: tuple[tuple[str, str], ...],
    *,
    connection: str | None = None,
    metadata: Mapping[str, str] | None = None,
    max_records_per_epoch: int | None = None,
    on_missing_offsets: str = "fail",
    kafka: Mapping[str, str] | None = None,
    value_format: str = "jsonl",
    decode: Mapping[str, str] | None = None,
) -> KafkaSourceConfig:
    """A kafka source's config, built in code (tests, benchmarks)."""
    return KafkaSourceConfig.model_validate({
        "topics": list(topics), "bootstrap_servers": bootstrap_servers, "schema": dict(schema),
        "connection": connection, "metadata": dict(metadata or {}),
        "max_records_per_epoch": max_records_per_epoch, "on_missing_offsets": on_missing_offsets,
        "kafka": dict(kafka or {}), "format": value_format, "decode": dict(decode or {}),
    })  # fmt: skip
