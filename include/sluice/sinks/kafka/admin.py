"""The kafka sink's topics: the data topic and the marker topic, created when missing (the
marker topic with one partition and compacted, an upsert sink's data topic compacted, broker
defaults otherwise), and a partition's offsets read while its leader may not be elected yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sluice.sinks.kafka.producer import POLL_S, TIMEOUT_S

__all__ = ["Topics", "watermarks"]


class Topics:
    """One admin client (made on first use) of the client settings ``client``."""

    def __init__(self, client: Mapping[str, Any]) -> None:
        self.client = dict(client)
        self._admin_client: Any = None
        self._ready = False

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin_client is None:
            self._admin_client = AdminClient(dict(self.client))
        return self._admin_client

    def exists(self, topic: str) -> bool:
        meta = self.admin().list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        return meta is not None and meta.error is None and bool(meta.partitions)

    def ensure(
        self, marker_topic: str, topic: str, compacted: bool, failed: Callable[[str], Exception]
    ) -> None:
        """Create the marker topic (one partition, compacted) and the data topic (compacted
        when ``compacted``), broker defaults otherwise, if missing; losing the race is fine.
        ``failed`` makes the sink's error of a reason. Once per instance."""
        if self._ready:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        wanted = [
            NewTopic(marker_topic, num_partitions=1, replication_factor=-1,
                     config={"cleanup.policy": "compact"}),
            NewTopic(topic, num_partitions=-1, replication_factor=-1,
                     config={"cleanup.policy": "compact"} if compacted else {}),
        ]  # fmt: skip
        missing = [t for t in wanted if not self.exists(t.topic)]
        if missing:
            futures = admin.create_topics(missing, operation_timeout=TIMEOUT_S)
            for name, future in futures.items():
                try:
                    future.result()
                except KafkaException as exc:
                    if exc.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS
                        raise failed(f"cannot create topic {name}: {exc}") from exc
            deadline = time.monotonic() + TIMEOUT_S
            while not all(self.exists(t.topic) for t in missing):
                if time.monotonic() > deadline:
                    raise failed("created topics have no leader")
                time.sleep(POLL_S)
        self._ready = True


def watermarks(consumer: Any, tp: Any) -> tuple[int, int]:
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
