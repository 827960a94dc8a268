""":class:`KafkaSink`: the sink contract over the jobs of the package (see its docstring for
the protocol). *prepare* stages the epoch's rows as Parquet under the pipeline's checkpoint
storage, ``kafka-staging/<sink>/<epoch:012d>-<attempt>/``; *commit* publishes them through
the :class:`~sluice.sinks.kafka.publish.Publisher` unless the markers show them published,
then deletes the staging; *publish* (qos 0) and *write* (qos 1) produce without a
transaction; a rewind past published epochs is refused unless ``on_rewind: republish``."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.contracts.records import Prepared
from sluice.kafka_client import client_settings
from sluice.sinks.exceptions import KafkaSinkError
from sluice.sinks.kafka.encoding import CHANGELOG_COLUMNS, Record, encode, staged_records
from sluice.sinks.kafka.markers import Marker
from sluice.sinks.kafka.publish import Publisher
from sluice.sinks.staging import FieldsHandle, StagingSink
from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.storage import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["STAGING", "KafkaSink", "KafkaStaged"]

STAGING = "kafka-staging"


@dataclass(frozen=True)
class KafkaStaged(FieldsHandle):
    """A kafka sink's handle: the transaction that publishes the epoch (its
    ``transactional.id``), the topic, how many transactions (chunks) it takes and the staged
    Parquet prefix (None: no rows staged). Every field is optional: recovery aborts with a bare
    Prepared."""

    transactional_id: str | None = None
    topic: str | None = None
    chunks: int | None = None
    staging: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KafkaStaged:
        chunks = data.get("chunks")
        return cls(data.get("transactional_id"), data.get("topic"),
                   None if chunks is None else int(chunks), data.get("staging"))  # fmt: skip


class KafkaSink(StagingSink[KafkaStaged]):
    """Publishes to ``config.topic`` (see the package docstring for the protocol).

    ``store`` is the pipeline's checkpoint store (the stage lives under it); ``settings`` the
    client settings of the connection, if any (the spec's ``kafka:`` and ``bootstrap_servers``
    go over them); ``qos`` picks the direct write's producer."""

    handle_type = KafkaStaged

    def __init__(
        self,
        config: KafkaSinkConfig,
        store: ObjectStore,
        pipeline: str,
        settings: Mapping[str, str] | None = None,
        *,
        qos: int = 2,
    ) -> None:
        self.name = config.name
        self.config = config
        self.pipeline = pipeline
        self.store = store
        self.topic = config.topic
        self.marker_topic = config.markers
        self.qos = qos
        self.supports_retraction = config.on_rewind == "republish"
        client = client_settings(settings or {}, config.kafka, config.bootstrap_servers)
        if not client.get("bootstrap.servers"):
            raise KafkaSinkError(
                f"pipeline {pipeline}, sink {config.name}: no bootstrap servers: set "
                f"bootstrap_servers or bootstrap.servers in connection {config.connection!r}'s "
                "extra",
                pipeline=pipeline,
                sink=config.name,
                topic=config.topic,
            )
        self.client: dict[str, Any] = client
        self.publisher = Publisher(client, config, pipeline, qos)
        self.tid = self.publisher.tid
        if config.mode == "upsert" and not config.keys:
            raise KafkaSinkError.without_keys(pipeline, config.name, topic=config.topic)

    def __repr__(self) -> str:
        return f"KafkaSink({self.pipeline}/{self.name} -> {self.topic})"

    # -- naming ---------------------------------------------------------------------------------

    def stages(self) -> str:
        return f"{STAGING}/{self.name}/"

    def _prepared(self, epoch: int, attempt: str, rows: int, staging: str | None) -> Prepared:
        staged = KafkaStaged(self.tid, self.topic, self._chunks(rows), staging)
        return Prepared.of(self.name, f"kafka://{self.topic}", epoch, attempt, rows, staged)

    def _chunks(self, rows: int) -> int:
        return math.ceil(rows / self.config.max_records_per_transaction) if rows else 0

    # -- prepare --------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Stage the rows as Parquet under the attempt's prefix (nothing for no rows)."""
        if rows is None:
            rows = df.count()
        if rows == 0:
            return self._prepared(epoch, attempt, 0, None)
        df = self._checked(df, epoch, attempt)
        prefix = self.staging_prefix(epoch, attempt)
        self.stage(df, prefix)
        return self._prepared(epoch, attempt, rows, prefix)

    def _checked(self, df: DataFrame, epoch: int, attempt: str) -> DataFrame:
        """``df`` with the columns a record needs (append sinks drop the changelog's), or a
        :class:`KafkaSinkError` naming the missing ones."""
        needed = {"key": self.config.record_key, "headers": [c for _, c in self.config.headers]}
        if self.config.value_column:
            needed["value_column"] = [self.config.value_column]
        if self.config.mode == "upsert":
            needed["(changelog)"] = list(CHANGELOG_COLUMNS)
        for setting, columns in needed.items():
            missing = [c for c in columns if c not in df.columns]
            if missing:
                raise self.publisher.error(
                    KafkaSinkError, epoch, attempt,
                    f"{setting} names {missing}, not among the output columns {df.columns}; "
                    f"name output columns in sinks.{self.name}.{setting}",
                )  # fmt: skip
        if self.config.mode == "append":
            return df.drop(*CHANGELOG_COLUMNS)
        return df

    # -- commit ---------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> str | None:
        """Publish the staged rows in one transaction per chunk, each with its marker, unless
        the markers show it published; then delete the staging. Idempotent. Returns the
        receipt ``sluice checkpoints`` shows: the transactional id, how many transactions
        and the key of their markers, as a consumer of the marker topic reads it."""
        if prepared.rows == 0:
            return None  # nothing staged, nothing to publish (a rewind's replay: no retraction)
        staging = self.staging_of(prepared)
        chunks = self.handle(prepared).chunks or self._chunks(prepared.rows)
        if self.publisher.next_chunk(prepared.epoch, chunks) < chunks:
            self._publish(prepared, staging, chunks)
        self.store.delete_prefix(staging)
        return (
            f"{self.topic}: {chunks} transaction{'s' if chunks != 1 else ''} of "
            f"{self.tid}, marked {self.publisher.marker_key(prepared.epoch).decode()} in "
            f"{self.marker_topic}"
        )

    def _publish(self, prepared: Prepared, staging: str, chunks: int) -> None:
        files = self._staged_files(staging)
        if not files:
            if self.publisher.next_chunk(prepared.epoch, chunks) >= chunks:
                return  # a racing commit published it and deleted the staging meanwhile
            raise self.publisher.error(
                KafkaSinkError, prepared.epoch, prepared.attempt,
                f"the epoch is not published and its staged rows at {self.store.uri(staging)} "
                "are gone; its rows would be lost",
            )  # fmt: skip
        self.publisher.publish(prepared, chunks, lambda skip: self._records(files, skip))

    def publish(self, prepared: Prepared) -> str | None:
        """qos 0: the staged rows with the no-retry producer, right after the checkpoint: no
        transaction, no marker (never retried: a failed delivery is lost, as qos 0 allows);
        then the staging is deleted."""
        if prepared.rows == 0:
            return None
        epoch, attempt, staging = prepared.epoch, prepared.attempt, self.staging_of(prepared)
        files = self._staged_files(staging)
        self.publisher.ensure_topics(epoch, attempt)
        producer = self.publisher.producer(transactional=False)
        sent = self.publisher.produce(
            producer, self._records(files), prepared.rows + 1, epoch, attempt
        )
        self.store.delete_prefix(staging)
        return f"{self.topic}: {sent} records, no transaction (qos 0)"

    def _staged_files(self, staging: str) -> list[str]:
        """The stage's Parquet files, by name (the order records are published in)."""
        return sorted(i.key for i in self.store.list(staging) if i.key.endswith(".parquet"))

    def _records(self, files: list[str], skip: int = 0) -> Iterator[Record]:
        return staged_records(self.store, files, self.config, skip)

    def encode(self, table: pa.Table) -> Iterator[Record]:
        """Each row of ``table`` as a Kafka record (key, value, headers)."""
        return encode(table, self.config)

    # -- markers --------------------------------------------------------------------------------

    def markers(self) -> list[Marker]:
        """Every committed transaction of this sink, as the marker topic shows it to a
        ``read_committed`` consumer (read from the start to the last stable offset)."""
        return self.publisher.markers()

    def committed_epochs(self) -> list[int]:
        """The epochs the markers show fully published, ascending."""
        return sorted({m.epoch for m in self.markers() if m.last})

    # -- direct write (qos 0 / 1) ---------------------------------------------------------------

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Publish straight from ``df``: qos 1 with the idempotent producer (a replay publishes
        again), qos 0 with no retries (a failed delivery is lost). No transaction, no marker."""
        if rows is None:
            rows = df.count()
        if rows:
            df = self._checked(df, epoch, attempt)
            self.publisher.ensure_topics(epoch, attempt)
            producer = self.publisher.producer(transactional=False)
            self.publisher.produce(producer, self.encode(df.toArrow()), rows + 1, epoch, attempt)
        staged = KafkaStaged(None, self.topic, None, None)
        return Prepared.of(self.name, f"kafka://{self.topic}", epoch, attempt, rows, staged)

    # -- rewinds --------------------------------------------------------------------------------

    def retraction_problem(self, after: int) -> str | None:
        """``on_rewind: refuse``: the epochs above ``after`` the markers show published (Kafka
        cannot take them back); None when there are none, or with ``on_rewind: republish``."""
        if self.config.on_rewind == "republish":
            return None
        above = [e for e in self.committed_epochs() if e > after]
        if not above:
            return None
        return (
            f"pipeline {self.pipeline}, sink {self.name!r} (kafka) published epochs "
            f"{_ranges(above)} to topic {self.topic!r} (markers on {self.marker_topic}); Kafka "
            "cannot unpublish records its consumers may have read. To replay anyway, set "
            f"on_rewind: republish on sinks.{self.name} (mode: upsert; on a compacted topic the "
            "replay's value per key wins, docs/kafka-sink.md), or publish to a new topic"
        )


def _ranges(epochs: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``1-3, 5``."""
    out: list[str] = []
    start = prev = epochs[0]
    for e in [*epochs[1:], None]:
        if e is not None and e == prev + 1:
            prev = e
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if e is not None:
            start = prev = e
    return ", ".join(out)
