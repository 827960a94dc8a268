"""The iceberg sink's catalog (:mod:`sluice.storage.catalogs`, shared with iceberg lookup
tables), its errors as the sink's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.sinks.exceptions import IcebergSinkError
from sluice.storage import catalogs
from sluice.storage.catalogs import redacted

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sluice.storage import S3Options

__all__ = ["catalog_properties", "open_catalog", "redacted"]


def catalog_properties(url: str, warehouse: str, s3: S3Options | None) -> dict[str, str]:
    """:func:`sluice.storage.catalogs.catalog_properties`; an unsupported URI is the sink's
    error."""
    try:
        return catalogs.catalog_properties(url, warehouse, s3)
    except catalogs.UnsupportedCatalog as exc:
        raise IcebergSinkError(str(exc)) from None


def open_catalog(url: str, warehouse: str, s3: S3Options | None) -> Catalog:
    """:func:`sluice.storage.catalogs.open_catalog`; an unsupported URI is the sink's error."""
    try:
        return catalogs.open_catalog(url, warehouse, s3)
    except catalogs.UnsupportedCatalog as exc:
        raise IcebergSinkError(str(exc)) from None
