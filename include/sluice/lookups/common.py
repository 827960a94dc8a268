"""What several lookup kinds share: the fingerprints of pinned files now, a connection's URI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.contracts.lookups import PinRequest
from sluice.exceptions import TableUnavailable
from sluice.storage import open_store

if TYPE_CHECKING:
    from sluice.contracts.records import TablePin

__all__ = ["connection_url", "pinned_now"]


def pinned_now(pin: TablePin, s3: Any) -> dict[str, str]:
    """The fingerprint of each pinned file now (one file for a Delta commit, Iceberg metadata
    or a copy: not every file of the table); a file gone is left out."""
    store = open_store(pin.uri, s3=s3)
    return {key: p for key, _ in pin.files if (p := store.fingerprint(key)) is not None}


def connection_url(request: PinRequest, example: str) -> str:
    """The URI of the lookup's connection; refuses naming how to define it."""
    lookup = request.lookup
    url = request.connections.get(lookup.connection or "")
    if url is None:
        raise TableUnavailable(
            f"connection {lookup.connection!r} is not defined",
            f"define it (an Airflow connection, or SLUICE_CONN_{str(lookup.connection).upper()}"
            f"={example})",
            lookup.describe(),
        )
    return url
