"""The JSON envelope every manifest (plan, attempt, checkpoint, savepoint, ...) is stored in.

``encode_manifest("plan", {"epoch": 7})`` stores::

    {
      "body": {
        "epoch": 7
      },
      "checksum": "sha256:d5bdee720059aa94f88a353ffb032640e7d2cfc14c1a1e19ebd24df5486bce67",
      "kind": "plan",
      "schema_version": 1
    }

The checksum covers the canonical JSON of ``body`` (sorted keys, no spaces), so a flipped
byte or a truncated write is caught on read instead of being trusted as a commit point.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sluice.storage.base import ObjectStore
from sluice.storage.exceptions import CorruptObject

__all__ = [
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMA_VERSIONS",
    "body_checksum",
    "decode_manifest",
    "encode_manifest",
    "read_manifest",
    "write_manifest",
]

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = frozenset({1})
_FIELDS = frozenset({"schema_version", "kind", "body", "checksum"})


def body_checksum(body: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``body``."""
    canonical = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def encode_manifest(kind: str, body: dict[str, Any]) -> bytes:
    """The envelope bytes for ``body``; equal bodies always give equal bytes.

    Raises ValueError if ``body`` is not JSON (NaN, sets, objects, ...).
    """
    try:
        envelope = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "body": body,
            "checksum": body_checksum(body),
        }
        text = json.dumps(envelope, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{kind} manifest body is not JSON-serialisable: {exc}") from exc
    return text.encode("utf-8") + b"\n"


def decode_manifest(data: bytes, *, uri: str, kind: str) -> dict[str, Any]:
    """The body of a ``kind`` manifest, or CorruptObject(uri, reason) saying what is wrong."""
    envelope = _parse(data, uri)
    _check_fields(envelope, uri, kind)
    body: dict[str, Any] = envelope["body"]
    stored, computed = envelope["checksum"], body_checksum(body)
    if stored != computed:
        raise CorruptObject(uri, f"checksum mismatch: stored {stored} computed {computed}")
    return body


def read_manifest(store: ObjectStore, key: str, kind: str) -> dict[str, Any]:
    """Get and decode ``key``; ObjectNotFound if absent, CorruptObject if damaged."""
    return decode_manifest(store.get(key), uri=store.uri(key), kind=kind)


def write_manifest(
    store: ObjectStore, key: str, kind: str, body: dict[str, Any], *, if_absent: bool
) -> None:
    """Encode and store; ``if_absent=True`` raises ObjectAlreadyExists rather than replace
    anything already there (even a corrupt object: that is evidence, not garbage)."""
    data = encode_manifest(kind, body)
    if if_absent:
        store.put_if_absent(key, data)
    else:
        store.put(key, data)


def _parse(data: bytes, uri: str) -> dict[str, Any]:
    """UTF-8 JSON object, or CorruptObject with the byte offset of the problem."""
    if not data:
        raise CorruptObject(uri, "empty object (0 bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            reason = f"truncated inside a UTF-8 character at byte {exc.start} of {len(data)}"
        else:
            reason = f"not UTF-8: invalid byte at offset {exc.start}"
        raise CorruptObject(uri, reason) from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        offset = len(text[: exc.pos].encode("utf-8"))
        raise CorruptObject(
            uri, f"truncated or invalid JSON at byte {offset} of {len(data)}: {exc.msg}"
        ) from exc
    if not isinstance(value, dict):
        raise CorruptObject(uri, f"top level is a JSON {type(value).__name__}, expected an object")
    return value


def _check_fields(envelope: dict[str, Any], uri: str, kind: str) -> None:
    missing = sorted(_FIELDS - envelope.keys())
    if missing:
        raise CorruptObject(uri, f"missing envelope fields {missing}")
    unexpected = sorted(envelope.keys() - _FIELDS)
    if unexpected:
        raise CorruptObject(uri, f"unexpected envelope fields {unexpected}")
    version = envelope["schema_version"]
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = sorted(SUPPORTED_SCHEMA_VERSIONS)
        raise CorruptObject(uri, f"unsupported schema_version {version!r} (supported: {supported})")
    if envelope["kind"] != kind:
        raise CorruptObject(uri, f"kind is {envelope['kind']!r}, expected {kind!r}")
    if not isinstance(envelope["body"], dict):
        raise CorruptObject(uri, f"body is a JSON {type(envelope['body']).__name__}, not an object")
    if not isinstance(envelope["checksum"], str):
        raise CorruptObject(uri, f"checksum is {envelope['checksum']!r}, not a string")
