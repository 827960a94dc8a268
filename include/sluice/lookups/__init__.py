"""The lookup table kinds (docs/joins.md, "Table types"), one module each, each a
:class:`~sluice.contracts.lookups.LookupTable` registered by its type in
:data:`sluice.pipeline.LOOKUP_KINDS` (docs/extending.md, "A new lookup kind")."""

from sluice.lookups.delta import DeltaTable
from sluice.lookups.files import FilesTable
from sluice.lookups.iceberg import IcebergTable
from sluice.lookups.postgres import PostgresTable

__all__ = ["DeltaTable", "FilesTable", "IcebergTable", "PostgresTable"]
