"""The ``iceberg`` sink: rows into an Apache Iceberg table, exactly once, one snapshot per
epoch (docs/iceberg.md). One job per module, each importing only those listed before it:

* :mod:`~sluice.sinks.iceberg.catalog`: the catalog a connection URI names, under the spec's
  ``catalog_name``;
* :mod:`~sluice.sinks.iceberg.stage`: the staged Parquet, its handle, and reading it back;
* :mod:`~sluice.sinks.iceberg.epochs`: which epochs the table holds, and the snapshot a rewind
  goes back to;
* :mod:`~sluice.sinks.iceberg.schema`: table creation, schema evolution, rows as data files;
* :mod:`~sluice.sinks.iceberg.upsert`: the copy-on-write overwrites of upserts and rewinds;
* :mod:`~sluice.sinks.iceberg.sink`: :class:`IcebergSink`, staging and the commit loop.
"""

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
