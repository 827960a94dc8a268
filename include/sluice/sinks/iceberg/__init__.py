"""The ``iceberg`` sink: rows into an Apache Iceberg table, exactly once, one snapshot per
epoch (docs/iceberg.md). :mod:`~sluice.sinks.iceberg.catalog` opens the catalog a connection
URI names; :mod:`~sluice.sinks.iceberg.sink` is :class:`IcebergSink`."""

from sluice.sinks.exceptions import IcebergSinkError
from sluice.sinks.iceberg.sink import (
    CHANGELOG_COLUMNS,
    COMMIT_ATTEMPTS,
    STAGING,
    IcebergSink,
    IcebergStaged,
    epoch_property,
)

__all__ = [
    "CHANGELOG_COLUMNS",
    "COMMIT_ATTEMPTS",
    "STAGING",
    "IcebergSink",
    "IcebergSinkError",
    "IcebergStaged",
    "epoch_property",
]
