"""The ``postgres`` sink: rows into a PostgreSQL table, exactly once (docs/sinks.md). One job
per module, each importing only those listed before it:

* :mod:`~sluice.sinks.postgres.url`: the connection URI, and a connection from it;
* :mod:`~sluice.sinks.postgres.names`: the names of the fence, staging and undo tables;
* :mod:`~sluice.sinks.postgres.types`: the target's column types, from Spark's;
* :mod:`~sluice.sinks.postgres.catalog`: catalog reads and the fence's DDL;
* :mod:`~sluice.sinks.postgres.undo`: what a rewind needs of the target, and the retraction;
* :mod:`~sluice.sinks.postgres.sink`: :class:`PostgresSink`, staging and the commit fence.
"""

from sluice.sinks.exceptions import PostgresSinkError, StagingTableMissing
from sluice.sinks.postgres.names import FENCE_TABLE, STAGING_SCHEMA, staging_name
from sluice.sinks.postgres.sink import CHANGELOG_COLUMNS, PostgresSink
from sluice.sinks.postgres.url import PostgresUrl

__all__ = [
    "CHANGELOG_COLUMNS",
    "FENCE_TABLE",
    "STAGING_SCHEMA",
    "PostgresSink",
    "PostgresSinkError",
    "PostgresUrl",
    "StagingTableMissing",
    "staging_name",
]
