"""``type: iceberg``: a table of an Iceberg catalog; a version is the metadata file of its current
snapshot when pinned (a new one each commit), read with pyiceberg (a small table)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.contracts.lookups import LookupTable, PinRequest
from sluice.contracts.records import TablePin
from sluice.exceptions import TableUnavailable
from sluice.lookups.common import connection_url, pinned_now
from sluice.storage import open_store

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["IcebergTable"]


class IcebergTable(LookupTable):
    type = "iceberg"

    def pin(self, request: PinRequest) -> TablePin:
        from sluice.storage.catalogs import open_catalog

        lookup = request.lookup
        where = lookup.describe()
        url = connection_url(request, "http://catalog:8181 or postgresql://... (docs/iceberg.md)")
        *namespace, name = str(lookup.table).split(".")
        try:
            table = open_catalog(url, None, request.s3).load_table((*namespace, name))
        except Exception as exc:  # pyiceberg's: no such table, catalog unreachable...
            lines = str(exc).strip().splitlines()
            detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
            raise TableUnavailable(
                f"loading it failed: {detail}", "check the table and the catalog", where
            ) from None
        if table.current_snapshot() is None:
            raise TableUnavailable(
                "it has no snapshot (no data was ever committed)", "write the table first", where
            )
        folder, _, key = str(table.metadata_location).rpartition("/")
        store = open_store(folder, s3=request.s3)
        print_ = store.fingerprint(key)
        if print_ is None:
            raise TableUnavailable(
                f"its metadata file {table.metadata_location} is missing", "check the table", where
            )
        return TablePin(store.root_uri, ((key, print_),), self.type)

    def check(self, pin: TablePin, s3: Any) -> Mapping[str, str]:
        return pinned_now(pin, s3)

    def read(self, spark: Any, pin: TablePin, s3: Any) -> Any:
        from pyiceberg.table import StaticTable

        from sluice.storage.catalogs import fileio_properties

        [(key, _)] = pin.files
        location = open_store(pin.uri, s3=s3).uri(key)
        props = fileio_properties(location, s3)
        return spark.createDataFrame(StaticTable.from_metadata(location, props).scan().to_arrow())

    def label(self, pin: TablePin) -> str:
        key = pin.files[-1][0].rsplit("/", 1)[-1] if pin.files else ""
        return f"metadata {key.split('-', 1)[0]}"
