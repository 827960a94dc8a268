"""The kafka sink's producers: their settings by qos, and how a producer's failure is read.

qos 2 publishes with a transactional producer (idempotent, ``acks=all``) whose
``transactional.id`` is stable per pipeline and sink, so a new producer fences every older
one; qos 1 with the idempotent producer; qos 0 without idempotence nor retries. The client
settings (the connection's, the spec's ``kafka:`` over them) go over the sink's defaults and
under the settings exactly-once and the qos depend on, which the spec refuses
(:data:`~sluice.spec.components.kafka_sink.PRODUCER_OWNED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "POLL_S",
    "TIMEOUT_S",
    "TRANSACTION_TIMEOUT_MS",
    "fenced",
    "kafka_error_in",
    "producer_settings",
    "transactional_id",
]

TIMEOUT_S = 60.0  # one broker request (init, commit, metadata) at most
TRANSACTION_TIMEOUT_MS = 300_000  # the broker aborts a transaction left open this long
POLL_S = 0.2


def transactional_id(pipeline: str, sink: str) -> str:
    """The ``transactional.id`` of one sink of one pipeline (stable across runs and attempts:
    a new producer with it fences every older one)."""
    return f"sluice-{pipeline}-{sink}"


def producer_settings(
    client: Mapping[str, Any], tid: str, qos: int, *, transactional: bool
) -> dict[str, Any]:
    """qos 2: transactional (idempotent, acks=all); qos 1: idempotent; qos 0: no retry. The
    client settings go over the defaults (``linger.ms``, the queue size) and under what
    exactly-once and the qos depend on."""
    settings: dict[str, Any] = {
        "linger.ms": 20,  # defaults for a throughput the commit can reach; a user's win
        "queue.buffering.max.messages": 500_000,
        **client,
        "partitioner": "murmur2_random",  # the Java client's: partition = murmur2(key)
    }
    if transactional:
        settings.update({
            "transactional.id": tid,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "enable.idempotence": True,
            "acks": "all",
        })  # fmt: skip
    elif qos >= 1:
        settings.update({"enable.idempotence": True, "acks": "all"})
    else:
        settings.update({"enable.idempotence": False, "acks": 1, "retries": 0})
    return settings


def kafka_error_in(exc: BaseException | None) -> Any:
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


def fenced(error: Any) -> bool:
    """A KafkaError after which this producer cannot go on: fenced by a newer producer with
    our transactional.id (a racing commit), or any other fatal error — once fatal, even
    ``produce()`` fails with a bare ``_FATAL``. The caller waits for the markers, then takes the
    id back with a new producer."""
    from confluent_kafka import KafkaError

    codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
             KafkaError._FATAL}  # fmt: skip
    return bool(error.code() in codes or error.fatal())
