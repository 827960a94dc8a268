"""The Kafka client settings live in :mod:`sluice.kafka_client`, below sources and sinks,
which share them; the two the source's wiring and its store events import are named here
too."""

from sluice.kafka_client import connection_settings, planner_settings

__all__ = ["connection_settings", "planner_settings"]
