"""The kafka sink's transactional publish (qos 2), and the plain produce qos 0 and 1 use.

A commit takes the sink's ``transactional.id`` with ``init_transactions()``, which fences
every other producer of it (a zombie attempt, a commit racing this one) and aborts what it
left open; then it reads the markers (read after the fence: nothing in flight) and publishes
each chunk they lack in a transaction of its own, records and marker together. A commit fenced
by a racing one waits for the markers to show the epoch (the winner publishes it); if they do
not within :data:`FENCED_WAIT_S` (the winner died), it takes the id back and publishes what is
missing, at most :data:`ATTEMPTS` times.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sluice.contracts.records import Prepared
from sluice.sinks.exceptions import KafkaFenced as _Fenced
from sluice.sinks.exceptions import KafkaPublishError, KafkaSinkError
from sluice.sinks.kafka.admin import Topics
from sluice.sinks.kafka.encoding import Record
from sluice.sinks.kafka.markers import Marker, marker_key, next_chunk, read_markers
from sluice.sinks.kafka.producer import (
    POLL_S,
    TIMEOUT_S,
    fenced,
    kafka_error_in,
    producer_settings,
    transactional_id,
)
from sluice.spec.components.kafka_sink import KafkaSinkConfig

__all__ = ["ATTEMPTS", "FENCED_WAIT_S", "Publisher"]

FENCED_WAIT_S = 60.0  # a fenced commit waits this long for the winner's markers
ATTEMPTS = 4  # takeovers before a commit gives up


class Publisher:
    """One kafka sink's side of the broker: its topics, markers and producers, and the
    transactional publish of a staged epoch. ``client``: the client settings."""

    def __init__(
        self, client: Mapping[str, Any], config: KafkaSinkConfig, pipeline: str, qos: int
    ) -> None:
        self.client = dict(client)
        self.config = config
        self.pipeline = pipeline
        self.sink = config.name
        self.topic = config.topic
        self.marker_topic = config.markers
        self.qos = qos
        self.tid = transactional_id(pipeline, config.name)
        self.topics = Topics(self.client)

    def error(
        self, cls: type[KafkaSinkError], epoch: int, attempt: str, message: str
    ) -> KafkaSinkError:
        """``cls`` naming the epoch attempt, the sink and the topic."""
        return cls(
            f"pipeline {self.pipeline}, sink {self.sink}, epoch {epoch}, attempt {attempt}, "
            f"topic {self.topic}: {message}",
            pipeline=self.pipeline,
            sink=self.sink,
            epoch=epoch,
            attempt=attempt,
            topic=self.topic,
        )

    # -- markers and topics ---------------------------------------------------------------------

    def markers(self) -> list[Marker]:
        """Every committed transaction of this sink (:func:`read_markers`)."""
        return read_markers(
            self.client, self.topics, self.pipeline, self.sink, self.marker_topic, self.topic
        )

    def next_chunk(self, epoch: int, chunks: int) -> int:
        """The first chunk of ``epoch`` not yet published (``chunks``: all are)."""
        return next_chunk(self.markers(), epoch, chunks)

    def marker_key(self, epoch: int) -> bytes:
        return marker_key(self.pipeline, self.sink, epoch)

    def ensure_topics(self, epoch: int, attempt: str) -> None:
        self.topics.ensure(
            self.marker_topic, self.topic, self.config.mode == "upsert",
            lambda reason: self.error(KafkaPublishError, epoch, attempt, reason),
        )  # fmt: skip

    # -- producers ------------------------------------------------------------------------------

    def producer_settings(self, *, transactional: bool) -> dict[str, Any]:
        return producer_settings(self.client, self.tid, self.qos, transactional=transactional)

    def producer(self, *, transactional: bool) -> Any:
        from confluent_kafka import Producer

        return Producer(self.producer_settings(transactional=transactional))

    def produce(
        self, producer: Any, rows: Iterator[Record], limit: int, epoch: int, attempt: str
    ) -> int:
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
        if any(fenced(e) for e in errors):
            raise _Fenced()
        if errors:
            raise self.error(
                KafkaPublishError, epoch, attempt,
                f"deliveries failed: {'; '.join(str(e) for e in errors)}",
            )  # fmt: skip
        return count

    # -- the transactional publish ----------------------------------------------------------------

    def publish(
        self, prepared: Prepared, chunks: int, rows: Callable[[int], Iterator[Record]]
    ) -> None:
        """Publish the chunks of ``prepared`` the markers lack; ``rows(skip)``: the staged
        records after the first ``skip``."""
        epoch, attempt = prepared.epoch, prepared.attempt
        for _ in range(ATTEMPTS):
            try:
                self._publish_as_owner(prepared, chunks, rows)
                return
            except _Fenced:
                if self._wait_for_markers(epoch, chunks):
                    return  # the commit that fenced us published it
            except Exception:
                # e.g. the staged files deleted under us by a racing commit that finished
                if self.next_chunk(epoch, chunks) >= chunks:
                    return
                raise
        raise self.error(
            KafkaPublishError, epoch, attempt,
            f"fenced {ATTEMPTS} times by other producers with transactional.id {self.tid} "
            "(other commits of this sink running?); the epoch is not published",
        )  # fmt: skip

    def _publish_as_owner(
        self, prepared: Prepared, chunks: int, rows: Callable[[int], Iterator[Record]]
    ) -> None:
        """Take the transactional id (fencing every other producer of it), then publish each
        chunk the markers lack in a transaction of its own."""
        from confluent_kafka import KafkaException

        epoch, attempt = prepared.epoch, prepared.attempt
        self.ensure_topics(epoch, attempt)
        limit = self.config.max_records_per_transaction
        producer = self.producer(transactional=True)
        try:
            producer.init_transactions(TIMEOUT_S)
            first = self.next_chunk(epoch, chunks)  # read after the fence: nothing in flight
            if first >= chunks:
                return
            records = rows(first * limit)
            for chunk in range(first, chunks):
                producer.begin_transaction()
                count = self.produce(producer, records, limit, epoch, attempt)
                marker = Marker(epoch, chunk, chunks, count, self.tid, attempt)
                producer.produce(
                    self.marker_topic, marker.to_json(self.pipeline, self.sink, self.topic),
                    self.marker_key(epoch), partition=0,
                )  # fmt: skip
                producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and fenced(error):
                raise _Fenced() from exc
            with contextlib.suppress(Exception):  # best effort, after a failure
                producer.abort_transaction(TIMEOUT_S)
            raise self.error(KafkaPublishError, epoch, attempt, f"publish failed: {exc}") from exc
        except KafkaPublishError:
            with contextlib.suppress(Exception):  # best effort, after a failure
                producer.abort_transaction(TIMEOUT_S)
            raise
        except Exception as exc:
            # librdkafka may surface a fatal error (fenced by a racing commit) from inside a
            # callback: flush() then raises SystemError caused by the KafkaException
            error = kafka_error_in(exc)
            if error is not None and fenced(error):
                raise _Fenced() from exc
            raise
        finally:
            with contextlib.suppress(Exception):  # a fenced producer raises even here
                producer.flush(0)

    def _wait_for_markers(self, epoch: int, chunks: int) -> bool:
        """Fenced by another commit: whether its markers show the epoch within FENCED_WAIT_S
        (False: it died or is still running; the caller takes the id back)."""
        waited = 0.0
        while waited < FENCED_WAIT_S:
            if self.next_chunk(epoch, chunks) >= chunks:
                return True
            time.sleep(POLL_S * 5)
            waited += POLL_S * 5
        return False
