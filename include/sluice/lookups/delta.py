"""``type: delta``: a Delta Lake table; a version is its newest commit when pinned, the one file
``_delta_log/<version>.json`` (a Delta version's log file is written once), read with Delta's
time travel (``versionAsOf``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sluice.contracts.lookups import LookupTable, PinRequest
from sluice.contracts.records import TablePin
from sluice.exceptions import TableUnavailable
from sluice.lookups.common import pinned_now
from sluice.storage import open_store, to_spark_uri

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DeltaTable", "delta_version"]

_DELTA_COMMIT = re.compile(r"^_delta_log/\d{20}\.json$")  # a Delta version's commit file


def delta_version(pin: TablePin) -> int:
    """A delta pin's table version (the number its log file is named by)."""
    [(key, _)] = pin.files
    return int(key.rsplit("/", 1)[-1].split(".", 1)[0])


class DeltaTable(LookupTable):
    type = "delta"

    def pin(self, request: PinRequest) -> TablePin:
        store = open_store(request.lookup.path, s3=request.s3)
        commits = sorted(i.key for i in store.list("_delta_log/") if _DELTA_COMMIT.match(i.key))
        files = tuple(
            (key, print_) for key in commits[-1:] if (print_ := store.fingerprint(key)) is not None
        )
        if not files:
            raise TableUnavailable(
                f"no Delta table (no _delta_log/<version>.json) under {store.root_uri}",
                "write the table there or fix lookup.path",
            )
        return TablePin(store.root_uri, files, self.type)

    def check(self, pin: TablePin, s3: Any) -> Mapping[str, str]:
        return pinned_now(pin, s3)

    def read(self, spark: Any, pin: TablePin, s3: Any) -> Any:
        reader = spark.read.format("delta").option("versionAsOf", delta_version(pin))
        return reader.load(to_spark_uri(open_store(pin.uri, s3=s3).root_uri))

    def label(self, pin: TablePin) -> str:
        return f"v{delta_version(pin)}"
