"""``type: files``: a folder of Parquet files; a version is the folder's data files with their
fingerprints (names starting with ``_`` or ``.`` are not data: ``_SUCCESS``, a writer's
``_temporary``). A writer adds a version as new files and removes the old ones once no epoch
it may replay pins them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.contracts.lookups import LookupTable, PinRequest
from sluice.contracts.records import TablePin
from sluice.exceptions import TableUnavailable
from sluice.storage import open_store, to_spark_uri

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["FilesTable"]


class FilesTable(LookupTable):
    type = "files"

    def pin(self, request: PinRequest) -> TablePin:
        lookup = request.lookup
        store = open_store(lookup.path, s3=request.s3)
        suffix = f".{lookup.format}"
        files = tuple(
            sorted(
                (key, print_)
                for key, print_ in store.fingerprints("").items()
                if key.endswith(suffix) and not any(s[0] in "_." for s in key.split("/"))
            )
        )
        if not files:
            raise TableUnavailable(
                f"no {lookup.format} files under {store.root_uri}",
                "write the table there or fix lookup.path",
            )
        return TablePin(store.root_uri, files, self.type)

    def check(self, pin: TablePin, s3: Any) -> Mapping[str, str]:
        return open_store(pin.uri, s3=s3).fingerprints("")  # one listing: every file

    def read(self, spark: Any, pin: TablePin, s3: Any) -> Any:
        store = open_store(pin.uri, s3=s3)
        return spark.read.parquet(*[to_spark_uri(store.uri(k)) for k, _ in pin.files])
