"""Checkpoint storage: one object-store interface, a local and an S3 backend, JSON manifests.

>>> store = open_store("s3://ckpt/orders")          # or "file:///var/sluice", "/abs", "rel/dir"
>>> to_spark_uri("s3://ckpt/orders/state")
's3a://ckpt/orders/state'
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from sluice.storage.base import ObjectInfo, ObjectStore, key_problem
from sluice.storage.exceptions import (
    CorruptObject,
    InvalidKey,
    InvalidStoreUri,
    ObjectAlreadyExists,
    ObjectNotFound,
    StorageError,
)
from sluice.storage.local import LocalObjectStore
from sluice.storage.manifest import (
    decode_manifest,
    encode_manifest,
    read_manifest,
    write_manifest,
)
from sluice.storage.s3options import S3Options

if TYPE_CHECKING:
    from sluice.storage.s3 import S3ObjectStore

__all__ = [
    "CorruptObject",
    "InvalidKey",
    "InvalidStoreUri",
    "LocalObjectStore",
    "ObjectAlreadyExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "S3ObjectStore",
    "S3Options",
    "StorageError",
    "decode_manifest",
    "encode_manifest",
    "key_problem",
    "normalized_uri",
    "open_store",
    "read_manifest",
    "storage_uri_problem",
    "to_spark_uri",
    "write_manifest",
]

ACCEPTED_FORMS = "file:///abs/path, /abs/path, relative/path (from the cwd), s3://bucket/prefix"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def open_store(uri: str, *, s3: S3Options | None = None) -> ObjectStore:
    """The store for ``uri``; ``s3`` sets endpoint / region for ``s3://`` (default: boto3's)."""
    scheme, location = _parse(uri)
    if scheme == "s3":
        from sluice.storage.s3 import S3ObjectStore

        bucket, _, prefix = location.partition("/")
        options = s3 or S3Options()
        return S3ObjectStore(
            bucket, prefix, endpoint_url=options.endpoint_url, region=options.region
        )
    return LocalObjectStore(location)


def __getattr__(name: str) -> Any:
    """``S3ObjectStore`` on first use: boto3 takes 0.05-0.1 s to import, which a DAG parse
    or a pipeline on local storage never needs."""
    if name == "S3ObjectStore":
        from sluice.storage.s3 import S3ObjectStore

        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_spark_uri(uri: str) -> str:
    """The URI Spark/Hadoop reads the same data at: ``s3://`` → ``s3a://``, paths → ``file:///abs``."""
    if uri.startswith("s3a://"):
        return uri
    scheme, location = _parse(uri)
    if scheme == "s3":
        return f"s3a://{location}"
    return f"file://{location}"


def storage_uri_problem(uri: str) -> str | None:
    """Why :func:`open_store` would refuse ``uri`` (scheme, form, an S3 prefix that could
    escape its bucket), or None. Opens nothing."""
    try:
        scheme, location = _parse(uri)
    except InvalidStoreUri as exc:
        return exc.reason
    if scheme == "s3":
        prefix = location.partition("/")[2]
        problem = key_problem(prefix) if prefix else None
        if problem is not None:
            return f"S3 prefix {prefix!r}: {problem}"
    return None


def normalized_uri(uri: str) -> str:
    """``s3://bucket/prefix`` or ``file:///abs/path`` for a valid ``uri`` (paths absolute and
    normalised, no trailing '/'), so two spellings of one location compare equal."""
    scheme, location = _parse(uri)
    return f"s3://{location}" if scheme == "s3" else f"file://{location.rstrip('/')}"


def _parse(uri: str) -> tuple[str, str]:
    """("s3", "bucket/prefix") or ("file", "/absolute/path"); InvalidStoreUri otherwise."""
    if not uri.strip():
        raise InvalidStoreUri(uri, f"empty; accepted forms: {ACCEPTED_FORMS}")
    match = _SCHEME.match(uri)
    if match is None:
        return "file", os.path.abspath(uri)
    scheme = match.group(1).lower()
    if scheme == "s3":
        return "s3", _s3_location(uri)
    if scheme == "file":
        return "file", _file_path(uri)
    raise InvalidStoreUri(uri, f"unsupported scheme {scheme!r}; accepted forms: {ACCEPTED_FORMS}")


def _s3_location(uri: str) -> str:
    location = uri[len("s3:") :]
    if not location.startswith("//") or not location[2:].split("/")[0]:
        raise InvalidStoreUri(uri, "expected s3://bucket/prefix")
    return location[2:].rstrip("/")


def _file_path(uri: str) -> str:
    """file:///abs, file://localhost/abs or file:/abs, taken literally (no %-decoding)."""
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost") or not slash:
            raise InvalidStoreUri(uri, "expected file:///absolute/path (no host)")
        rest = "/" + path
    if not rest.startswith("/"):
        raise InvalidStoreUri(uri, "file URIs need an absolute path: file:///absolute/path")
    return os.path.normpath(rest)
