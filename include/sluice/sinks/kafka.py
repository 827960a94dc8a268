"""The ``kafka`` sink: records published to a topic, exactly once through Kafka transactions
(docs/kafka-sink.md).

qos 2, two phases:

1. *prepare* writes the epoch's rows as Parquet (one Spark write) under the pipeline's
   checkpoint storage, at ``kafka-staging/<sink>/<epoch:012d>-<attempt>/``: durable, owned by
   that attempt, and invisible to every Kafka reader.
2. *commit* reads the staged files with pyarrow (no Spark) and publishes them with a
   transactional producer whose ``transactional.id`` is stable per pipeline and sink
   (:func:`transactional_id`). ``init_transactions()`` fences any other producer with that id
   (a zombie attempt, a commit racing this one) and aborts what it left open. Then the sink
   reads the **epoch markers** back with ``isolation.level=read_committed``: one record per
   committed transaction on the marker topic (``<topic>.sluice-epochs``, one partition,
   compacted), keyed ``<pipeline>/<sink>/<epoch:012d>``, whose value names the epoch, the chunk
   ``i`` of ``n`` and the transactional id. Each transaction holds its records **and** its
   marker, so the marker is visible exactly when the records are. A chunk already marked (or
   any later epoch: commits run in epoch order, so a late retry of an old epoch finds a later
   marker) is skipped; the others are produced and ``commit_transaction()``-ed one by one.
   Then the staging is deleted.

   An epoch above ``max_records_per_transaction`` records is published as
   ``ceil(rows / limit)`` transactions (chunks), each with its own marker, in a fixed order
   (staged files by name, rows in file order), so a commit killed between chunks resumes at
   the first chunk not marked, without duplicates. A reader may see the first chunks of such
   an epoch before the last one.

   Two commits racing: the second ``init_transactions()`` fences the first, whose produce or
   ``commit_transaction()`` then fails as fenced. The fenced one waits for the markers (the
   winner's commit makes them visible) and succeeds when they show the epoch; if they do not
   within a while (the winner died), it takes the id back and publishes what is missing.

qos 1: *write* publishes straight from the result frame with the idempotent producer
(``enable.idempotence``, ``acks=all``) and flushes; no transaction, no marker: a replayed epoch
is published again (duplicates only). qos 0: *prepare* stages as at qos 2 and *publish*, run
once right after the checkpoint, sends the staged rows without idempotence and with
``retries=0``, ``acks=1``, no transaction and no marker: a record the broker did not take is
lost, never resent.

Rewinds: Kafka cannot take records back. :meth:`KafkaSink.retraction_problem` refuses a
rewind past an epoch the markers show as published, unless ``on_rewind: republish`` (upsert
sinks only): then the replay is published like any epoch and, on a compacted topic, the
last value per key is the replay's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sluice.contracts.records import Prepared
from sluice.contracts.sinks import Sink
from sluice.sinks.exceptions import KafkaFenced as _Fenced
from sluice.sinks.exceptions import KafkaPublishError, KafkaSinkError
from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.storage import ObjectStore, to_spark_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "CHANGELOG_COLUMNS",
    "STAGING",
    "KafkaPublishError",
    "KafkaSink",
    "KafkaSinkError",
    "KafkaStaged",
    "Marker",
    "transactional_id",
]

STAGING = "kafka-staging"
CHANGELOG_COLUMNS = ("_op", "_epoch")
TIMEOUT_S = 60.0  # one broker request (init, commit, metadata) at most
TRANSACTION_TIMEOUT_MS = 300_000  # the broker aborts a transaction left open this long
FENCED_WAIT_S = 60.0  # a fenced commit waits this long for the winner's markers
POLL_S = 0.2
_ATTEMPTS = 4  # takeovers before a commit gives up


def transactional_id(pipeline: str, sink: str) -> str:
    """The ``transactional.id`` of one sink of one pipeline (stable across runs and attempts:
    a new producer with it fences every older one)."""
    return f"sluice-{pipeline}-{sink}"


@dataclass(frozen=True)
class KafkaStaged:
    """A kafka sink's handle: the transaction that publishes the epoch (its
    ``transactional.id``), the topic, how many transactions (chunks) it takes and the staged
    Parquet prefix (None: no rows staged). Every field is optional: recovery aborts with a bare
    Prepared."""

    transactional_id: str | None = None
    topic: str | None = None
    chunks: int | None = None
    staging: str | None = None

    def to_dict(self) -> dict[str, str | int | None]:
        return {"transactional_id": self.transactional_id, "topic": self.topic,
                "chunks": self.chunks, "staging": self.staging}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KafkaStaged:
        chunks = data.get("chunks")
        return cls(data.get("transactional_id"), data.get("topic"),
                   None if chunks is None else int(chunks), data.get("staging"))  # fmt: skip


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


class KafkaSink(Sink[KafkaStaged]):
    """Publishes to ``config.topic`` (see the module docstring for the protocol).

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
        self.tid = transactional_id(pipeline, config.name)
        self.supports_retraction = config.on_rewind == "republish"
        client = {**(settings or {}), **dict(config.kafka)}
        if config.bootstrap_servers:
            client["bootstrap.servers"] = config.bootstrap_servers
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
        self._topics_ready = False
        self._admin_client: Any = None
        if config.mode == "upsert" and not config.keys:
            raise KafkaSinkError(
                f"pipeline {pipeline}, sink {config.name}: upsert needs keys",
                pipeline=pipeline,
                sink=config.name,
                topic=config.topic,
            )

    def __repr__(self) -> str:
        return f"KafkaSink({self.pipeline}/{self.name} -> {self.topic})"

    # -- naming ---------------------------------------------------------------------------------

    def staging_prefix(self, epoch: int, attempt: str) -> str:
        return f"{STAGING}/{self.name}/{epoch:012d}-{attempt}/"

    def _where(self, epoch: int, attempt: str) -> str:
        return (
            f"pipeline {self.pipeline}, sink {self.name}, epoch {epoch}, attempt {attempt}, "
            f"topic {self.topic}"
        )

    def _error(
        self, cls: type[KafkaSinkError], epoch: int, attempt: str, message: str
    ) -> KafkaSinkError:
        return cls(
            f"{self._where(epoch, attempt)}: {message}",
            pipeline=self.pipeline,
            sink=self.name,
            epoch=epoch,
            attempt=attempt,
            topic=self.topic,
        )

    def _prepared(self, epoch: int, attempt: str, rows: int, staging: str | None) -> Prepared:
        chunks = math.ceil(rows / self.config.max_records_per_transaction) if rows else 0
        staged = KafkaStaged(self.tid, self.topic, chunks, staging)
        return Prepared.of(self.name, f"kafka://{self.topic}", epoch, attempt, rows, staged)

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Stage the rows as Parquet under the attempt's prefix (nothing for no rows)."""
        if rows is None:
            rows = df.count()
        if rows == 0:
            return self._prepared(epoch, attempt, 0, None)
        df = self._checked(df, epoch, attempt)
        prefix = self.staging_prefix(epoch, attempt)
        df.write.mode("errorifexists").parquet(to_spark_uri(self.store.uri(prefix.rstrip("/"))))
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
                raise self._error(
                    KafkaSinkError, epoch, attempt,
                    f"{setting} names {missing}, not among the output columns {df.columns}; "
                    f"name output columns in sinks.{self.name}.{setting}",
                )  # fmt: skip
        if self.config.mode == "append":
            return df.drop(*CHANGELOG_COLUMNS)
        return df

    # -- commit -------------------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> str | None:
        """Publish the staged rows in one transaction per chunk, each with its marker, unless
        the markers show it published; then delete the staging. Idempotent. Returns the
        receipt ``sluice checkpoints`` shows: the transactional id, how many transactions
        and where their markers are."""
        if prepared.rows == 0:
            return None  # nothing staged, nothing to publish (a rewind's replay: no retraction)
        staging = self._staging_of(prepared)
        chunks = self.handle(prepared).chunks or self._chunks(prepared.rows)
        if self._next_chunk(prepared.epoch, chunks) < chunks:
            self._publish(prepared, staging, chunks)
        self.store.delete_prefix(staging)
        return (
            f"{self.topic}: {chunks} transaction{'s' if chunks != 1 else ''} of "
            f"{transactional_id(self.pipeline, self.name)}, marked "
            f"{self._marker_key(prepared.epoch).decode()} in {self.marker_topic}"
        )

    def publish(self, prepared: Prepared) -> str | None:
        """qos 0: the staged rows with the no-retry producer, right after the checkpoint: no
        transaction, no marker (never retried: a failed delivery is lost, as qos 0 allows);
        then the staging is deleted."""
        from confluent_kafka import Producer

        if prepared.rows == 0:
            return None
        epoch, attempt, staging = prepared.epoch, prepared.attempt, self._staging_of(prepared)
        files = self._staged_files(staging)
        self._ensure_topics(epoch, attempt)
        producer = Producer(self._producer_settings(transactional=False))
        sent = self._produce(producer, self._records(files), prepared.rows + 1, epoch, attempt)
        self.store.delete_prefix(staging)
        return f"{self.topic}: {sent} records, no transaction (qos 0)"

    def _staged_files(self, staging: str) -> list[str]:
        """The stage's Parquet files, by name (the order records are published in)."""
        return sorted(i.key for i in self.store.list(staging) if i.key.endswith(".parquet"))

    def _chunks(self, rows: int) -> int:
        return math.ceil(rows / self.config.max_records_per_transaction)

    def _next_chunk(self, epoch: int, chunks: int, markers: list[Marker] | None = None) -> int:
        """The first chunk of ``epoch`` not yet published (``chunks``: all are)."""
        markers = self.markers() if markers is None else markers
        if any(m.epoch > epoch for m in markers):
            return chunks  # commits run in epoch order: a later epoch means this one is done
        done = [m.chunk for m in markers if m.epoch == epoch]
        return max(done) + 1 if done else 0

    def _publish(self, prepared: Prepared, staging: str, chunks: int) -> None:
        epoch, attempt = prepared.epoch, prepared.attempt
        files = self._staged_files(staging)
        if not files:
            if self._next_chunk(epoch, chunks) >= chunks:
                return  # a racing commit published it and deleted the staging meanwhile
            raise self._error(
                KafkaSinkError, epoch, attempt,
                f"the epoch is not published and its staged rows at {self.store.uri(staging)} "
                "are gone; its rows would be lost",
            )  # fmt: skip
        for _ in range(_ATTEMPTS):
            try:
                self._publish_as_owner(prepared, files, chunks)
                return
            except _Fenced:
                if self._wait_for_markers(epoch, chunks):
                    return  # the commit that fenced us published it
            except Exception:
                # e.g. the staged files deleted under us by a racing commit that finished
                if self._next_chunk(epoch, chunks) >= chunks:
                    return
                raise
        raise self._error(
            KafkaPublishError, epoch, attempt,
            f"fenced {_ATTEMPTS} times by other producers with transactional.id {self.tid} "
            "(other commits of this sink running?); the epoch is not published",
        )  # fmt: skip

    def _publish_as_owner(self, prepared: Prepared, files: list[str], chunks: int) -> None:
        """Take the transactional id (fencing every other producer of it), then publish each
        chunk the markers lack in a transaction of its own."""
        from confluent_kafka import KafkaException, Producer

        epoch, attempt = prepared.epoch, prepared.attempt
        self._ensure_topics(epoch, attempt)
        limit = self.config.max_records_per_transaction
        producer = Producer(self._producer_settings(transactional=True))
        try:
            producer.init_transactions(TIMEOUT_S)
            first = self._next_chunk(epoch, chunks)  # read after the fence: nothing in flight
            if first >= chunks:
                return
            rows = self._records(files, skip=first * limit)
            for chunk in range(first, chunks):
                producer.begin_transaction()
                count = self._produce(producer, rows, limit, epoch, attempt)
                marker = Marker(epoch, chunk, chunks, count, self.tid, attempt)
                producer.produce(
                    self.marker_topic, marker.to_json(self.pipeline, self.name, self.topic),
                    self._marker_key(epoch), partition=0,
                )  # fmt: skip
                producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and _fenced(error):
                raise _Fenced() from exc
            with contextlib.suppress(Exception):  # best effort, after a failure
                producer.abort_transaction(TIMEOUT_S)
            raise self._error(KafkaPublishError, epoch, attempt, f"publish failed: {exc}") from exc
        except KafkaPublishError:
            with contextlib.suppress(Exception):  # best effort, after a failure
                producer.abort_transaction(TIMEOUT_S)
            raise
        except Exception as exc:
            # librdkafka may surface a fatal error (fenced by a racing commit) from inside a
            # callback: flush() then raises SystemError caused by the KafkaException
            error = _kafka_error_in(exc)
            if error is not None and _fenced(error):
                raise _Fenced() from exc
            raise
        finally:
            with contextlib.suppress(Exception):  # a fenced producer raises even here
                producer.flush(0)

    def _produce(self, producer: Any, rows: Iterator[Record], limit: int, epoch: int,
                 attempt: str) -> int:  # fmt: skip
        """Produce up to ``limit`` records of ``rows``; returns how many."""
        errors: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None and len(errors) < 5:
                errors.append(err)

        count = 0
        for key, value, headers in rows:
            while True:
                try:
                    producer.produce(self.topic, value, key, headers=headers, on_delivery=report)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
            count += 1
            if count % 10_000 == 0:
                producer.poll(0)
            if count >= limit:
                break
        producer.flush(TIMEOUT_S)
        if any(_fenced(e) for e in errors):
            raise _Fenced()
        if errors:
            raise self._error(
                KafkaPublishError, epoch, attempt,
                f"deliveries failed: {'; '.join(str(e) for e in errors)}",
            )  # fmt: skip
        return count

    def _wait_for_markers(self, epoch: int, chunks: int) -> bool:
        """Fenced by another commit: whether its markers show the epoch within FENCED_WAIT_S
        (False: it died or is still running; the caller takes the id back)."""
        waited = 0.0
        while waited < FENCED_WAIT_S:
            if self._next_chunk(epoch, chunks) >= chunks:
                return True
            time.sleep(POLL_S * 5)
            waited += POLL_S * 5
        return False

    # -- markers ------------------------------------------------------------------------------

    def _marker_key(self, epoch: int) -> bytes:
        """``<pipeline>/<sink>/<epoch:012d>``: zero-padded, so a consumer listing the keys
        sees them in epoch order; the receipt names the same key."""
        return f"{self.pipeline}/{self.name}/{epoch:012d}".encode()

    def markers(self) -> list[Marker]:
        """Every committed transaction of this sink, as the marker topic shows it to a
        ``read_committed`` consumer (read from the start to the last stable offset)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        if not self._topic_exists(self.marker_topic):
            return []
        settings = {
            **self.client,
            "group.id": f"sluice-markers-{self.pipeline}-{self.name}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,  # the end is reached sooner (a few small records)
        }
        consumer = Consumer(settings)
        found: list[Marker] = []
        try:
            tp = TopicPartition(self.marker_topic, 0, OFFSET_BEGINNING)
            low, high = _watermarks(consumer, tp)
            if high <= low:
                return []
            consumer.assign([tp])
            prefix = f"{self.pipeline}/{self.name}/".encode()
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
                        f"pipeline {self.pipeline}, sink {self.name}: reading the epoch "
                        f"markers on {self.marker_topic} failed: {error}",
                        pipeline=self.pipeline, sink=self.name, topic=self.topic,
                    )  # fmt: skip
                key, value = msg.key(), msg.value()
                if key and value and key.startswith(prefix):
                    body = json.loads(value)
                    found.append(Marker(int(body["epoch"]), int(body["chunk"]),
                                        int(body["chunks"]), int(body["records"]),
                                        str(body["transactional_id"]),
                                        str(body.get("attempt", ""))))  # fmt: skip
            raise KafkaSinkError(
                f"pipeline {self.pipeline}, sink {self.name}: the epoch markers on "
                f"{self.marker_topic} were not read to their end in {TIMEOUT_S:.0f} s",
                pipeline=self.pipeline, sink=self.name, topic=self.topic,
            )  # fmt: skip
        finally:
            consumer.close()

    def committed_epochs(self) -> list[int]:
        """The epochs the markers show fully published, ascending."""
        return sorted({m.epoch for m in self.markers() if m.last})

    # -- topics -------------------------------------------------------------------------------

    def _admin(self) -> Any:
        """One admin client per sink instance (made on first use)."""
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient(self._plain_settings())
        return self._admin_client

    def _topic_exists(self, topic: str) -> bool:
        meta = self._admin().list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        return meta is not None and meta.error is None and bool(meta.partitions)

    def _ensure_topics(self, epoch: int, attempt: str) -> None:
        """Create the marker topic (one partition, compacted) and the data topic (compacted
        for upsert sinks), broker defaults otherwise, if missing; losing the race is fine."""
        if self._topics_ready:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self._admin()
        wanted = [
            NewTopic(self.marker_topic, num_partitions=1, replication_factor=-1,
                     config={"cleanup.policy": "compact"}),
            NewTopic(self.topic, num_partitions=-1, replication_factor=-1,
                     config={"cleanup.policy": "compact"} if self.config.mode == "upsert"
                     else {}),
        ]  # fmt: skip
        missing = [t for t in wanted if not self._topic_exists(t.topic)]
        if missing:
            futures = admin.create_topics(missing, operation_timeout=TIMEOUT_S)
            for name, future in futures.items():
                try:
                    future.result()
                except KafkaException as exc:
                    if exc.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS
                        raise self._error(
                            KafkaPublishError, epoch, attempt, f"cannot create topic {name}: {exc}"
                        ) from exc
            deadline = time.monotonic() + TIMEOUT_S
            while not all(self._topic_exists(t.topic) for t in missing):
                if time.monotonic() > deadline:
                    raise self._error(KafkaPublishError, epoch, attempt,
                                      "created topics have no leader")  # fmt: skip
                time.sleep(POLL_S)
        self._topics_ready = True

    # -- producers ----------------------------------------------------------------------------

    def _plain_settings(self) -> dict[str, Any]:
        return dict(self.client)

    def _producer_settings(self, *, transactional: bool) -> dict[str, Any]:
        """qos 2: transactional (idempotent, acks=all); qos 1: idempotent; qos 0: no retry.
        The client settings go over the sink's defaults (``linger.ms``, the queue size) and
        under what exactly-once and the qos depend on (the spec refuses those,
        :data:`~sluice.spec.components.kafka_sink.PRODUCER_OWNED`)."""
        settings: dict[str, Any] = {
            "linger.ms": 20,  # defaults for a throughput the commit can reach; a user's win
            "queue.buffering.max.messages": 500_000,
            **self.client,
            "partitioner": "murmur2_random",  # the Java client's: partition = murmur2(key)
        }
        if transactional:
            settings.update({
                "transactional.id": self.tid,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "enable.idempotence": True,
                "acks": "all",
            })  # fmt: skip
        elif self.qos >= 1:
            settings.update({"enable.idempotence": True, "acks": "all"})
        else:
            settings.update({"enable.idempotence": False, "acks": 1, "retries": 0})
        return settings

    # -- records ------------------------------------------------------------------------------

    def _records(self, files: list[str], skip: int = 0) -> Iterator[Record]:
        """The staged rows as (key, value, headers), files by name, rows in file order."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for key in files:
            table = pq.read_table(pa.BufferReader(self.store.get(key)))
            if skip >= table.num_rows:
                skip -= table.num_rows
                continue
            if skip:
                table = table.slice(skip)
                skip = 0
            yield from self.encode(table)

    def encode(self, table: pa.Table) -> Iterator[Record]:
        """Each row of ``table`` as a Kafka record (key, value, headers)."""
        config = self.config
        value_columns = [c for c in table.column_names if c not in CHANGELOG_COLUMNS]
        keys = config.record_key
        upsert = config.mode == "upsert"
        for batch in _iso_columns(table).to_batches(max_chunksize=50_000):
            for row in batch.to_pylist():
                key = _key_bytes(row, keys)
                value: bytes | None
                if upsert and row.get("_op") == "delete":
                    value = None  # a tombstone
                elif config.value == "json":
                    body = {c: row[c] for c in value_columns}
                    value = json.dumps(body, default=_json_default, separators=(",", ":")).encode()
                else:
                    value = _value_bytes(row[config.value_column])
                headers = [(n, _text(row[c]).encode()) for n, c in config.headers
                           if row[c] is not None] or None  # fmt: skip
                yield key, value, headers

    # -- abort / recovery ---------------------------------------------------------------------

    def _staging_of(self, prepared: Prepared) -> str:
        staging = self.handle(prepared).staging
        return staging or self.staging_prefix(prepared.epoch, prepared.attempt)

    def abort(self, prepared: Prepared) -> None:
        self.store.delete_prefix(self._staging_of(prepared))

    def abort_others(self, epoch: int, keep: str | None) -> int:
        """Delete the staging of every attempt of ``epoch`` except ``keep``."""
        mine = self.staging_prefix(epoch, keep) if keep else None
        root = f"{STAGING}/{self.name}/"
        folders = {
            root + i.key[len(root) :].split("/", 1)[0] + "/"
            for i in self.store.list(f"{root}{epoch:012d}-")
        }
        return sum(self.store.delete_prefix(f) for f in sorted(folders - {mine}))

    # -- direct write (qos 0 / 1) -------------------------------------------------------------

    def write(self, epoch: int, attempt: str, df: DataFrame, rows: int | None) -> Prepared:
        """Publish straight from ``df``: qos 1 with the idempotent producer (a replay publishes
        again), qos 0 with no retries (a failed delivery is lost). No transaction, no marker."""
        from confluent_kafka import Producer

        if rows is None:
            rows = df.count()
        if rows:
            df = self._checked(df, epoch, attempt)
            self._ensure_topics(epoch, attempt)
            producer = Producer(self._producer_settings(transactional=False))
            self._produce(producer, self.encode(df.toArrow()), rows + 1, epoch, attempt)
        staged = KafkaStaged(None, self.topic, None, None)
        return Prepared.of(self.name, f"kafka://{self.topic}", epoch, attempt, rows, staged)

    # -- rewinds ------------------------------------------------------------------------------

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


Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None]


def _watermarks(consumer: Any, tp: Any) -> tuple[int, int]:
    """A partition's (low, high) offsets, waiting out a leader not elected yet (a topic just
    created, a broker restarting) until TIMEOUT_S."""
    from confluent_kafka import KafkaError, KafkaException

    waiting = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
               KafkaError.UNKNOWN_TOPIC_OR_PART)  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retry = error is not None and (error.code() in waiting or error.retriable())
            if not retry or time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def _kafka_error_in(exc: BaseException | None) -> Any:
    """The KafkaError an exception is, or was caused by (a SystemError raised by a client call
    whose callback hit a KafkaException); None when there is none."""
    from confluent_kafka import KafkaException

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KafkaException) and exc.args:
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
    return None


def _fenced(error: Any) -> bool:
    """A KafkaError after which this producer cannot go on: fenced by a newer producer with
    our transactional.id (a racing commit), or any other fatal error — once fatal, even
    ``produce()`` fails with a bare ``_FATAL``. The caller waits for the markers, then takes the
    id back with a new producer."""
    from confluent_kafka import KafkaError

    codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
             KafkaError._FATAL}  # fmt: skip
    return bool(error.code() in codes or error.fatal())


def _iso_columns(table: pa.Table) -> pa.Table:
    """``table`` with its timestamps, dates and times as ISO-8601 text, computed by Arrow (a
    Python ``isoformat`` per value costs more than the rest of the encoding): timestamps in
    UTC with ``+00:00`` (Spark's may come without a zone), fractions of a second only when
    there are some, as :meth:`datetime.isoformat` writes them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        kind = field.type
        if pa.types.is_timestamp(kind):
            utc = table.column(i).cast(pa.timestamp(kind.unit))  # zoned values are UTC inside
            text = pc.replace_substring(utc.cast(pa.string()), " ", "T", max_replacements=1)
            text = pc.replace_substring_regex(text, r"\.0+$", "")
            text = pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
        elif pa.types.is_date(kind) or pa.types.is_time(kind):
            text = table.column(i).cast(pa.string())
        else:
            continue
        table = table.set_column(i, field.name, text)
    return table


def _iso(value: dt.datetime | dt.date | dt.time) -> str:
    """ISO-8601; a timestamp in UTC (Spark's Parquet and Arrow may give it without a zone)."""
    if isinstance(value, dt.datetime):
        zoned = value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
        return zoned.astimezone(dt.UTC).isoformat()
    return value.isoformat()


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    return json.dumps(value, default=_json_default)


def _key_bytes(row: Mapping[str, Any], keys: tuple[str, ...]) -> bytes | None:
    """One key column: its value as text; several: a JSON object of them; none: no key."""
    if not keys:
        return None
    if len(keys) == 1:
        value = row[keys[0]]
        return None if value is None else _text(value).encode()
    body = {k: row[k] for k in keys}
    return json.dumps(body, default=_json_default, separators=(",", ":")).encode()


def _value_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return _text(value).encode()


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
