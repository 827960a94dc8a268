"""Object store on S3 or an S3-compatible server (MinIO, SeaweedFS): ``s3://bucket/prefix``.

Credentials come from the standard AWS chain (env, profile, instance role) and are never
logged or stored here. Transient failures (5xx, throttling, connection errors, timeouts) are
retried by botocore's "standard" mode: 6 attempts in all, with jittered exponential backoff.
A hung request costs one read timeout (15 s) before its retry; docs/storage-faults.md shows
the whole budget next to s3a's.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import parse_timestamp

from sluice.bulk import paused_gc
from sluice.storage.base import ObjectInfo, ObjectStore, key_problem
from sluice.storage.exceptions import (
    InvalidKey,
    ObjectAlreadyExists,
    ObjectNotFound,
    StorageError,
)
from sluice.storage.s3options import S3Options

__all__ = ["S3ObjectStore", "make_s3_client"]

MAX_ATTEMPTS = 6  # in total: the first try and up to 5 retries
CONNECT_TIMEOUT_S = 5.0
# Longest silence on an open connection (not a whole transfer's time): manifests are small and
# Spark moves the big data through s3a, so 15 s of nothing means a hung request to retry.
READ_TIMEOUT_S = 15.0
DELETE_BATCH = 1000  # the most keys one DeleteObjects request accepts
DEFAULT_REGION = "us-east-1"

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404"})
_LOST_RACE = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})

# The S3 client is typed Any: mypy_boto3_s3 stubs are not a dependency.
S3Client = Any


def make_s3_client(
    endpoint_url: str | None = None,
    region: str | None = None,
    *,
    read_timeout_s: float = READ_TIMEOUT_S,
    max_attempts: int = MAX_ATTEMPTS,
) -> S3Client:
    """A path-style boto3 S3 client with bounded retries and timeouts.

    ``endpoint_url=None`` lets boto3 read ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``;
    the region falls back to ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, then us-east-1.
    """
    session = boto3.session.Session()
    config = Config(
        s3={"addressing_style": "path"},
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=read_timeout_s,
    )
    region = region or S3Options.from_env().region or session.region_name or DEFAULT_REGION
    # A listing's LastModified through dateutil costs more than the rest of its parsing (57%
    # of a million-key listing's time): ISO 8601 is parsed by the standard library instead.
    parsers = session._session.get_component("response_parser_factory")
    parsers.set_parser_defaults(timestamp_parser=_timestamp)
    return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _timestamp(value: str) -> datetime:
    """botocore's timestamp parser for this client: ``2026-12-07T16:31:50.854Z`` (listings)
    by :meth:`datetime.fromisoformat`, anything else (``Mon, 07 Dec 2026 16:31:50 GMT`` in
    headers, epoch seconds) by botocore's own; always aware, UTC when the text names no zone."""
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        moment = parse_timestamp(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class S3ObjectStore(ObjectStore):
    """Objects under ``s3://bucket/prefix``; keys are relative to the prefix.

    >>> store = S3ObjectStore("ckpt", "orders", client=make_s3_client())
    >>> store.uri("epochs/000000000007/checkpoint.json")
    's3://ckpt/orders/epochs/000000000007/checkpoint.json'
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: S3Client | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise InvalidKey(f"s3://{bucket}", bucket, "bucket name must be non-empty, no '/'")
        self.bucket = bucket
        self.prefix = _normalize_prefix(bucket, prefix)
        self.root_uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = client if client is not None else make_s3_client(endpoint_url, region)

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.root_uri!r})"

    def get(self, key: str) -> bytes:
        response = self._call("get_object", key, Key=self._full(key))
        try:
            data: bytes = response["Body"].read()
        except BotoCoreError as exc:
            raise StorageError(self.uri(key), f"reading the body failed: {exc}") from exc
        return data

    def get_tail(self, key: str, size: int) -> bytes:
        """A suffix range GET (``bytes=-size``): S3 answers the whole object when shorter,
        and 416 InvalidRange for an empty one."""
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        full = self._full(key)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes=-{size}")
        except ClientError as exc:
            if _error_code(exc) == "InvalidRange" and self.exists(key):
                return b""
            raise self._translate("get_object", key, exc) from exc
        except BotoCoreError as exc:
            raise StorageError(self.uri(key), f"get_object failed: {exc}") from exc
        try:
            data: bytes = response["Body"].read()
        except BotoCoreError as exc:
            raise StorageError(self.uri(key), f"reading the body failed: {exc}") from exc
        return data

    def put(self, key: str, data: bytes) -> None:
        self._call("put_object", key, Key=self._full(key), Body=data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        """``PutObject`` with ``If-None-Match: *``; 412 / 409 mean another writer won.

        When botocore had to retry, a 412 may answer our own earlier attempt that landed
        but whose response was lost; the stored bytes being ours settles that we won (bytes
        identical to ours from another writer would be the same outcome anyway).
        """
        full = self._full(key)
        try:
            self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if _error_code(exc) not in _LOST_RACE and _status(exc) != 412:
                raise self._translate("put_object", key, exc) from exc
            if _retried(exc) and self._holds(key, data):
                return
            raise ObjectAlreadyExists(self.uri(key)) from exc
        except BotoCoreError as exc:
            raise StorageError(self.uri(key), f"put_object failed: {exc}") from exc

    def exists(self, key: str) -> bool:
        try:
            self._call("head_object", key, Key=self._full(key))
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "", start_after: str | None = None) -> list[ObjectInfo]:
        """Sorted client-side: SeaweedFS pages in directory-tree order, not byte order.
        ``start_after`` is sent as ``StartAfter`` (the server skips what sorts before it) and
        checked again here."""
        self._check_prefix(prefix)
        after = None if start_after is None else start_after.encode()
        with paused_gc():  # a prefix of a million objects: a million infos
            infos = [
                ObjectInfo(key, size, modified, etag.strip('"'))
                for key, size, etag, modified in self._list_objects(prefix, start_after)
                if key_problem(key) is None  # directory markers ("a/") and hidden names
                and (after is None or key.encode() > after)
            ]
            return sorted(infos, key=lambda info: info.key.encode())

    def fingerprints(self, prefix: str) -> dict[str, str]:
        """The server's ETag (an MD5 of the content, or of its parts): one LIST, no download."""
        self._check_prefix(prefix)
        return {
            key: f"{size}:etag:{etag.strip(chr(34))}"
            for key, size, etag in self._list_raw(prefix)
            if key_problem(key) is None
        }

    def fingerprint(self, key: str) -> str | None:
        """The server's ETag of ``key``, as :meth:`fingerprints` gives it (one LIST)."""
        self._check_key(key)
        return self.fingerprints(key).get(key)

    def delete(self, key: str) -> None:
        self._call("delete_object", key, Key=self._full(key))

    def move(self, src: str, dst: str) -> None:
        """Copy then delete; re-running after a crash between the two finishes the move."""
        self._check_key(dst)
        if src == dst:
            self._require_moved(src, dst)
            return
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        try:
            self._call("copy_object", dst, Key=self._full(dst), CopySource=source)
        except ObjectNotFound:
            self._require_moved(src, dst)  # the source is what was missing
            return
        self.delete(src)

    def info(self, key: str) -> ObjectInfo | None:
        """One ``HeadObject``."""
        try:
            head = self._call("head_object", key, Key=self._full(key))
        except ObjectNotFound:
            return None
        etag = str(head.get("ETag", "")).strip('"')
        return ObjectInfo(key, int(head["ContentLength"]), _ns(head.get("LastModified")), etag)

    def move_to(self, src: str, other: ObjectStore, dst: str) -> None:
        """``CopyObject`` (any bucket the client reaches), then delete."""
        if not isinstance(other, S3ObjectStore):
            super().move_to(src, other, dst)
            return
        other._check_key(dst)
        source = {"Bucket": self.bucket, "Key": self._full(src)}
        try:
            other._call("copy_object", dst, Key=other._full(dst), CopySource=source)
        except ObjectNotFound:
            if not other.exists(dst):
                raise ObjectNotFound(self.uri(src)) from None
            return
        self.delete(src)

    def delete_prefix(self, prefix: str) -> int:
        """Batched ``DeleteObjects``; also removes markers and hidden keys under the prefix."""
        self._check_prefix(prefix)
        keys = [self._full_raw(key) for key, _size, _etag in self._list_raw(prefix)]
        for start in range(0, len(keys), DELETE_BATCH):
            self._delete_batch(prefix, keys[start : start + DELETE_BATCH])
        return len(keys)

    def child(self, prefix: str) -> S3ObjectStore:
        key = self._check_key(prefix.removesuffix("/"))
        return S3ObjectStore(self.bucket, self._full(key), client=self._client)

    # -- helpers ---------------------------------------------------------------------------

    def _full(self, key: str) -> str:
        return self._full_raw(self._check_key(key))

    def _full_raw(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _list_raw(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        """(key relative to the store, size, ETag) of every object under ``prefix``, in the
        server's order."""
        for key, size, etag, _ in self._list_objects(prefix):
            yield key, size, etag

    def _list_objects(
        self, prefix: str, start_after: str | None = None
    ) -> Iterator[tuple[str, int, str, int]]:
        """(key relative to the store, size, ETag, modified ns) of every object under
        ``prefix`` (after ``start_after``), in the server's order."""
        root = f"{self.prefix}/" if self.prefix else ""
        paginator = self._client.get_paginator("list_objects_v2")
        args = {"Bucket": self.bucket, "Prefix": root + prefix}
        if start_after is not None:
            args["StartAfter"] = root + start_after
        try:
            for page in paginator.paginate(**args):
                for obj in page.get("Contents", []):
                    ns = _ns(obj.get("LastModified"))
                    yield obj["Key"][len(root) :], int(obj["Size"]), obj.get("ETag", ""), ns
        except ClientError as exc:
            raise self._translate("list_objects_v2", prefix, exc) from exc
        except BotoCoreError as exc:
            raise StorageError(self.uri(prefix), f"list_objects_v2 failed: {exc}") from exc

    def _delete_batch(self, prefix: str, full_keys: Sequence[str]) -> None:
        objects = [{"Key": key} for key in full_keys]
        response = self._call("delete_objects", prefix, Delete={"Objects": objects, "Quiet": True})
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            raise StorageError(
                f"s3://{self.bucket}/{first.get('Key')}",
                f"delete_objects failed for {len(errors)} of {len(full_keys)} keys, first: "
                f"{first.get('Code')} {first.get('Message')}",
            )

    def _holds(self, key: str, data: bytes) -> bool:
        try:
            return self.get(key) == data
        except ObjectNotFound:
            return False

    def _require_moved(self, src: str, dst: str) -> None:
        if not self.exists(dst):
            raise ObjectNotFound(self.uri(src))

    def _call(self, operation: str, key: str, **kwargs: Any) -> Any:
        """Run one client call on this bucket; errors become StorageErrors naming ``key``."""
        try:
            return getattr(self._client, operation)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            raise self._translate(operation, key, exc) from exc
        except BotoCoreError as exc:
            raise StorageError(self.uri(key), f"{operation} failed: {exc}") from exc

    def _translate(self, operation: str, key: str, exc: ClientError) -> StorageError:
        code = _error_code(exc)
        uri = self.uri(key)
        if code in _NOT_FOUND:
            return ObjectNotFound(uri)
        if code == "NoSuchBucket":
            return StorageError(uri, f"{operation} failed: bucket {self.bucket!r} does not exist")
        message = exc.response.get("Error", {}).get("Message", "")
        return StorageError(uri, f"{operation} failed: {code} (HTTP {_status(exc)}) {message}")


def _ns(moment: datetime | None) -> int:
    """A listing's ``LastModified`` as ns since the epoch (exact: no float on the way)."""
    if moment is None:
        return 0
    seconds = calendar.timegm(moment.astimezone(UTC).utctimetuple())
    return seconds * 1_000_000_000 + moment.microsecond * 1000


def _normalize_prefix(bucket: str, prefix: str) -> str:
    prefix = prefix.strip("/")
    problem = key_problem(prefix) if prefix else None
    if problem is not None:
        raise InvalidKey(f"s3://{bucket}", prefix, problem)
    return prefix


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _retried(exc: ClientError) -> bool:
    return bool(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))
