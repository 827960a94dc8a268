"""The Iceberg catalog a connection URI names (pyiceberg), and the FileIO settings its
warehouse needs: what the ``iceberg`` sink writes through and an ``iceberg`` lookup table is
pinned through (docs/iceberg.md, docs/joins.md).

========================================  =================================================
connection URI                            catalog
========================================  =================================================
``postgresql://user:pw@host:5432/db``     pyiceberg ``SqlCatalog`` (the JDBC catalog's
                                          tables ``iceberg_tables`` ... in that database)
``sqlite:////abs/catalog.db``             ``SqlCatalog`` on a SQLite file (one machine)
``http(s)://host:8181/prefix?k=v``        ``RestCatalog``; the query's ``k=v`` are catalog
                                          properties (``token``, ``credential``, ``scope``,
                                          ``warehouse``, ``header.X-Name``...); user:password
                                          becomes ``credential`` (OAuth2 client credentials)
========================================  =================================================

Credentials stay in the URI, which comes from a connection (``SLUICE_CONN_<ID>``, Airflow);
:func:`redacted` is what messages show. S3 credentials come from the standard AWS chain
(environment, profile, instance role), endpoint and region from the spec's ``s3:`` section.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from sluice.storage import S3Options, normalized_uri
from sluice.storage.exceptions import UnsupportedCatalog

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["UnsupportedCatalog", "catalog_properties", "open_catalog", "redacted"]

_LOCK = threading.Lock()
_CATALOGS: dict[tuple[str, tuple[tuple[str, str], ...]], Catalog] = {}


def redacted(url: str) -> str:
    """``url`` without its password and query (what an error message may show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if parts.username:
        host = f"{parts.username}:***@{host}" if parts.password else f"{parts.username}@{host}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def fileio_properties(warehouse: str | None, s3: S3Options | None) -> dict[str, str]:
    """pyiceberg FileIO settings for a warehouse (PyArrow's; S3 endpoint and region). No
    warehouse (a catalog only read from, its tables anywhere): the S3 settings too."""
    props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    if warehouse is None or warehouse.startswith("s3://"):
        options = s3 or S3Options.from_env()
        if options.endpoint_url:
            props["s3.endpoint"] = options.endpoint_url
            # SeaweedFS / MinIO: bucket in the path, not the host name
            props["s3.force-virtual-addressing"] = "false"
        if options.region:
            props["s3.region"] = options.region
    return props


def catalog_properties(url: str, warehouse: str | None, s3: S3Options | None) -> dict[str, str]:
    """The pyiceberg catalog properties of a connection URI (see the module docstring); no
    ``warehouse``: a catalog only read from (a SQL catalog then creates no table)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    props = fileio_properties(warehouse, s3)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg2"):
        props["type"] = "sql"
        props["uri"] = "postgresql+psycopg2://" + url.split("://", 1)[1]
        if warehouse is not None:
            props["warehouse"] = normalized_uri(warehouse)
    elif scheme == "sqlite":
        props["type"] = "sql"
        props["uri"] = url
        if warehouse is not None:
            props["warehouse"] = normalized_uri(warehouse)
    elif scheme in ("http", "https"):
        props["type"] = "rest"
        base = parts.netloc.rsplit("@", 1)[-1]
        props["uri"] = urlunsplit((scheme, base, parts.path, "", ""))
        if parts.username:
            secret = unquote(parts.password or "")
            props["credential"] = f"{unquote(parts.username)}:{secret}"
        props.update(parse_qsl(parts.query, keep_blank_values=True))
    else:
        raise UnsupportedCatalog(
            f"iceberg catalog connection {redacted(url)}",
            f"unsupported scheme {scheme!r}; use postgresql:// or sqlite:/// (SQL catalog) or "
            "http(s):// (REST catalog)",
        )
    return props


def open_catalog(url: str, warehouse: str | None, s3: S3Options | None) -> Catalog:
    """The catalog of ``url``, one per process and settings (catalogs are thread-safe: every
    call opens its own session or request). A SQL catalog creates its two tables if missing."""
    props = catalog_properties(url, warehouse, s3)
    key = (url, tuple(sorted(props.items())))
    with _LOCK:
        found = _CATALOGS.get(key)
        if found is not None:
            return found
        catalog = _build(props)
        _CATALOGS[key] = catalog
        return catalog


def _build(props: dict[str, str]) -> Catalog:
    kind = props.pop("type")
    if kind == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog("sluice", **props)
    from pyiceberg.catalog.sql import SqlCatalog

    try:
        return SqlCatalog("sluice", **props)
    except Exception:  # two processes creating the catalog's tables at once: the loser retries
        return SqlCatalog("sluice", **props)
