"""The iceberg sink's catalog (:mod:`sluice.storage.catalogs`, shared with iceberg lookup
tables), its errors as the sink's, under the name the spec gives it: a SQL catalog files every
table under its catalog's name, so the sink must use the name its readers open the catalog
with (``catalog_name``, docs/iceberg.md)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sluice.sinks.exceptions import IcebergSinkError
from sluice.spec.components.iceberg_sink import DEFAULT_CATALOG_NAME
from sluice.storage import catalogs
from sluice.storage.catalogs import redacted

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sluice.storage import S3Options

__all__ = ["catalog_properties", "open_catalog", "redacted"]

_LOCK = threading.Lock()
_RENAMED: dict[tuple[int, str], Catalog] = {}  # (the shared catalog's id, name): one per process


def catalog_properties(url: str, warehouse: str, s3: S3Options | None) -> dict[str, str]:
    """:func:`sluice.storage.catalogs.catalog_properties`; an unsupported URI is the sink's
    error."""
    try:
        return catalogs.catalog_properties(url, warehouse, s3)
    except catalogs.UnsupportedCatalog as exc:
        raise IcebergSinkError(str(exc)) from None


def open_catalog(
    url: str, warehouse: str, s3: S3Options | None, name: str = DEFAULT_CATALOG_NAME
) -> Catalog:
    """:func:`sluice.storage.catalogs.open_catalog`, named ``name``; an unsupported URI is the
    sink's error. A SQL catalog under another name than the shared one's: the same catalog,
    its properties as the shared one holds them, opened again under that name (once per
    process). A REST catalog's server files the tables, whatever the client calls it."""
    from pyiceberg.catalog.sql import SqlCatalog

    try:
        shared = catalogs.open_catalog(url, warehouse, s3)
    except catalogs.UnsupportedCatalog as exc:
        raise IcebergSinkError(str(exc)) from None
    if shared.name == name or not isinstance(shared, SqlCatalog):
        return shared
    with _LOCK:
        key = (id(shared), name)
        if key not in _RENAMED:
            _RENAMED[key] = type(shared)(name, **shared.properties)
        return _RENAMED[key]
