"""What every built-in sink config shares: names, modes, partition columns, and the message
for a setting another sink type takes."""

from __future__ import annotations

import difflib
from typing import Any

from sluice.spec.components.base import NAME_RE, SinkConfig, problem

__all__ = ["SINK_SETTINGS", "BuiltinSink", "partition_columns", "sink_name"]

# every setting some sink type takes: naming one another type lacks says so
SINK_SETTINGS = ("name", "type", "path", "format", "mode", "table", "connection",
                 "partition_by", "options", "warehouse", "topic", "bootstrap_servers", "key",
                 "value", "value_column", "headers", "on_rewind", "max_records_per_transaction",
                 "marker_topic", "kafka")  # fmt: skip


def sink_name(value: Any) -> Any:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise problem(f"{value!r} is not a valid sink name", "e.g. out")
    return value


def partition_columns(value: Any) -> Any:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) and n for n in names):
        raise problem(f"{value!r} is not a column list", "e.g. [user]")
    return tuple(names)


class BuiltinSink(SinkConfig):
    @classmethod
    def unknown(cls, key: str) -> tuple[str, str]:
        takes = sorted(set(cls.field_names()) - {"name", "type"})
        if key in SINK_SETTINGS:
            kind = cls.model_fields["type"].default
            return f"is not a setting of a {kind} sink", f"{kind} sinks take {takes}"
        close = difflib.get_close_matches(key, takes, n=1)
        return "unknown field", f"did you mean '{close[0]}'?" if close else f"allowed: {takes}"
