"""The two formats of ``notifications.format``: one Kafka message in, the object changes it
tells out (docs/file-notifications.md).

* ``seaweedfs``: a SeaweedFS filer's ``[notification.kafka]`` sends one protobuf
  ``filer_pb.EventNotification`` per metadata change (``weed/pb/filer.proto``), keyed by the
  entry's full filer path (the old path when there is an old entry). ``old_entry`` only: a
  delete; ``new_entry`` only: a create; both: an update in place, or a rename when
  ``new_parent_path`` + the new name is another path. Decoded here from the protobuf wire
  format (the few fields needed; no generated code, no protobuf dependency).
* ``s3``: S3 event notification JSON (``{"Records": [...]}``, AWS's record format; MinIO's
  Kafka target sends it with ``EventName`` and ``Key`` beside ``Records``), also inside an
  SNS envelope (``{"Type": "Notification", "Message": "<the JSON>"}``). Object keys are
  URL-encoded (``application/x-www-form-urlencoded``: ``+`` for a space).

Each :class:`ObjectEvent` names the object by its full name in the event's terms (the filer
path, or ``bucket/key``); ``StoreEvents`` (the package) makes it relative to the source path.
Size, modification time and ETag are the values an S3 LIST of the object shows
(:func:`seaweed_etag`, :func:`seaweed_size`; SeaweedFS lists ``LastModified`` in whole
seconds, so the event's nanoseconds are dropped).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

from sluice.sources.store_events.exceptions import Undecodable

__all__ = [
    "ETAG_KEY",
    "ObjectEvent",
    "event_time_ns",
    "s3_events",
    "seaweed_etag",
    "seaweed_size",
    "seaweedfs_events",
]

NS = 1_000_000_000
# The extended attribute where SeaweedFS's S3 gateway keeps an object's ETag (multipart
# ETags included); LIST shows it before the Md5 attribute or the chunks' ETags.
ETAG_KEY = b"Seaweed-X-Amz-ETag"


@dataclass(frozen=True)
class ObjectEvent:
    """One change to one object, as an S3 LIST of it would show it afterwards."""

    key: str  # relative to the source path, '/'-separated, no leading '/'
    size: int
    modified_ns: int  # the object's modification time, ns since the epoch (UTC)
    etag: str  # the ETag a LIST shows, without quotes ("" if the event cannot tell)
    deleted: bool  # the object was deleted (or renamed away)


# -- the protobuf wire format ---------------------------------------------------------------


def _fields(data: bytes) -> dict[int, list[Any]]:
    """A protobuf message's fields: number -> values in order (ints for varint and fixed
    fields, bytes for length-delimited ones). Groups (wire types 3, 4) are refused."""
    out: dict[int, list[Any]] = {}
    i, end = 0, len(data)
    value: int | bytes
    while i < end:
        tag = data[i]  # one byte for every field number below 16 (all those read here)
        i += 1
        if tag >= 0x80:
            tag, i = _varint(data, i - 1)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise Undecodable(f"protobuf field number 0 at byte {i}")
        if wire == 2:
            size, i = _varint(data, i)
            if i + size > end:
                raise Undecodable(f"protobuf field {number}: {size} bytes past the end")
            value, i = data[i : i + size], i + size
        elif wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = int.from_bytes(data[i : i + 8], "little"), i + 8
        elif wire == 5:
            value, i = int.from_bytes(data[i : i + 4], "little"), i + 4
        else:
            raise Undecodable(f"protobuf wire type {wire} (field {number})")
        if i > end:
            raise Undecodable(f"protobuf field {number} runs past the end")
        if number in out:
            out[number].append(value)
        else:
            out[number] = [value]
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    if i < len(data) and data[i] < 0x80:
        return data[i], i + 1
    result = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise Undecodable("a protobuf varint runs past the end")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _int(fields: dict[int, list[Any]], number: int) -> int:
    """A singular int64 / int32 field (two's complement, last value wins), 0 when absent."""
    values = fields.get(number)
    if not values:
        return 0
    value = values[-1]
    if not isinstance(value, int):
        raise Undecodable(f"protobuf field {number} is not a number")
    return value - (1 << 64) if value >= 1 << 63 else value


def _bytes(fields: dict[int, list[Any]], number: int) -> bytes | None:
    values = fields.get(number)
    if not values:
        return None
    if not isinstance(values[-1], bytes):
        raise Undecodable(f"protobuf field {number} is not length-delimited")
    return values[-1]


def _text(raw: bytes | None, what: str) -> str:
    try:
        return (raw or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Undecodable(f"{what} is not UTF-8: {raw!r}") from exc


# -- SeaweedFS ------------------------------------------------------------------------------


class _Entry:
    """``filer_pb.Entry`` (name 1, is_directory 2, chunks 3, attributes 4, extended 5,
    remote_entry 10); size and ETag are worked out only for an entry that becomes an event."""

    def __init__(self, data: bytes) -> None:
        self.fields = _fields(data)
        self.name = _text(_bytes(self.fields, 1), "an entry name")
        self.is_directory = _int(self.fields, 2) != 0

    def event(self, path: str, *, deleted: bool) -> ObjectEvent:
        fields = self.fields
        attributes = _fields(_bytes(fields, 4) or b"")
        chunks = [_fields(c) for c in fields.get(3, ())]
        extended: dict[bytes, bytes] = {}
        for pair in fields.get(5, ()):
            kv = _fields(pair)
            extended[_bytes(kv, 1) or b""] = _bytes(kv, 2) or b""
        remote = _bytes(fields, 10)
        size = seaweed_size(attributes, chunks, _fields(remote) if remote is not None else None)
        etag = seaweed_etag(extended, _bytes(attributes, 14), chunks)
        # LIST shows mtime in whole seconds: the event's mtime_ns (19) is not used
        return ObjectEvent(path, size, _int(attributes, 2) * NS, etag, deleted)


def seaweed_size(
    attributes: dict[int, list[Any]],
    chunks: list[dict[int, list[Any]]],
    remote: dict[int, list[Any]] | None,
) -> int:
    """What LIST shows as ``Size`` (SeaweedFS's ``filer.FileSize``): the larger of the chunks'
    extent (offset + size) and ``attributes.file_size`` (or a newer remote copy's size)."""
    size = _int(attributes, 1) % (1 << 64)  # uint64
    if remote is not None and _int(remote, 4) > _int(attributes, 2):  # remote_mtime > mtime
        size = max(size, _int(remote, 5))
    extent = max((_int(c, 2) + _int(c, 3) for c in chunks), default=0)
    return max(size, extent)


def seaweed_etag(
    extended: dict[bytes, bytes], md5: bytes | None, chunks: list[dict[int, list[Any]]]
) -> str:
    """What LIST shows as ``ETag``, without quotes (SeaweedFS's S3 ``getObjectETag``): the
    stored S3 ETag, else the Md5 attribute in hex, else from the chunks' ETags (one chunk: its
    MD5; several: the MD5 of their MD5s, ``-<count>``)."""
    stored = extended.get(ETAG_KEY)
    if stored:
        return _text(stored, "the stored ETag").strip('"')
    if md5:
        return md5.hex()
    digests = [_md5_of(_text(_bytes(c, 5), "a chunk ETag")) for c in chunks]
    if not digests:
        return ""
    if len(digests) == 1:
        return digests[0].hex()
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _md5_of(chunk_etag: str) -> bytes:
    """A chunk's ETag is its MD5 in base64; Go's strict decoder gives nothing for anything else."""
    try:
        return base64.b64decode(chunk_etag, validate=True)
    except (binascii.Error, ValueError):
        return b""


def seaweedfs_events(key: bytes | None, value: bytes | None) -> list[ObjectEvent]:
    """The file changes of one ``EventNotification`` (directories are left out): for a
    rename, the old path deleted then the new one created."""
    if value is None:
        raise Undecodable("no value (a SeaweedFS event is never a tombstone)")
    if not key:
        raise Undecodable("no key (SeaweedFS keys each event by the entry's full path)")
    path = _text(key, "the key")
    note = _fields(value)
    old_raw, new_raw = _bytes(note, 1), _bytes(note, 2)
    if old_raw is None and new_raw is None:
        raise Undecodable("an EventNotification without an old or a new entry")
    old = _Entry(old_raw) if old_raw is not None else None
    new = _Entry(new_raw) if new_raw is not None else None
    if old is not None and path.rpartition("/")[2] != old.name:
        raise Undecodable(f"the key {path!r} does not name the old entry {old.name!r}")
    new_path = None
    if new is not None:
        parent = _text(_bytes(note, 4), "new_parent_path")
        if not parent.startswith("/"):
            raise Undecodable(f"new_parent_path {parent!r} is not a filer path")
        new_path = f"{parent.rstrip('/')}/{new.name}"
        if old is None and new_path != path:
            raise Undecodable(f"the key {path!r} does not name the new entry {new_path!r}")
    out = []
    moved = new is None or new.is_directory or new_path != path
    if old is not None and not old.is_directory and moved:
        out.append(old.event(path, deleted=True))
    if new is not None and new_path is not None and not new.is_directory:
        out.append(new.event(new_path, deleted=False))
    return out


# -- S3 event notification JSON ---------------------------------------------------------------

_TIME = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$", re.ASCII
)
_CREATED = ("ObjectCreated:",)
_REMOVED = ("ObjectRemoved:", "LifecycleExpiration:")


def s3_events(key: bytes | None, value: bytes | None) -> list[ObjectEvent]:
    """The object creations and removals of one message (other event types, e.g. tagging,
    ACL, restore, transition, replication, change nothing a LIST shows and are left out; so
    is S3's ``s3:TestEvent``). The message key is not used."""
    del key
    if value is None:
        raise Undecodable("no value (a tombstone)")
    doc = _json(value)
    if isinstance(doc, dict) and doc.get("Type") == "Notification" and "Message" in doc:
        message = doc["Message"]  # an SNS envelope
        if not isinstance(message, str):
            raise Undecodable("an SNS envelope whose Message is not a string")
        doc = _json(message.encode("utf-8"))
    if not isinstance(doc, dict):
        raise Undecodable("not a JSON object")
    if "Records" not in doc and doc.get("Event") == "s3:TestEvent":
        return []
    records = doc.get("Records")
    if not isinstance(records, list):
        raise Undecodable('no "Records" list (not an S3 event notification)')
    out = []
    for i, record in enumerate(records):
        try:
            event = _record(record)
        except (Undecodable, KeyError, TypeError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, Undecodable) else f"{type(exc).__name__}: {exc}"
            raise Undecodable(f"Records[{i}]: {reason}") from exc
        if event is not None:
            out.append(event)
    return out


def _json(value: bytes) -> Any:
    try:
        return json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Undecodable(f"not JSON: {exc}") from exc


def _record(record: dict[str, Any]) -> ObjectEvent | None:
    name = record["eventName"]
    if not isinstance(name, str):
        raise Undecodable(f"eventName {name!r} is not a string")
    kind = name.removeprefix("s3:")
    created, removed = kind.startswith(_CREATED), kind.startswith(_REMOVED)
    if not created and not removed:
        return None
    s3 = record["s3"]
    bucket, raw_key = s3["bucket"]["name"], s3["object"]["key"]
    if not isinstance(bucket, str) or not isinstance(raw_key, str) or not bucket or not raw_key:
        raise Undecodable(f"bucket {bucket!r} / key {raw_key!r}: not names")
    try:
        key = unquote_plus(raw_key, encoding="utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise Undecodable(f"key {raw_key!r}: the URL-encoded bytes are not UTF-8") from exc
    full = f"{bucket}/{key}"
    if removed:
        return ObjectEvent(full, 0, 0, "", deleted=True)
    obj = s3["object"]
    size = obj["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise Undecodable(f"size {size!r} is not a byte count")
    etag = obj.get("eTag") or ""
    if not isinstance(etag, str):
        raise Undecodable(f"eTag {etag!r} is not a string")
    return ObjectEvent(full, size, _modified_ns(record), etag.strip('"'), deleted=False)


def _modified_ns(record: dict[str, Any]) -> int:
    """The object's LastModified as a LIST shows it, as near as the record tells. MinIO sets
    the sequencer to the object's ModTime in ns (hex) and lists it in milliseconds; AWS's
    sequencer is opaque and its LIST shows whole seconds: the event's time, in whole seconds
    (AWS's LastModified is when the upload began, so a large or multipart upload lists earlier)."""
    sequencer = record["s3"]["object"].get("sequencer")
    if record.get("eventSource") == "minio:s3" and isinstance(sequencer, str):
        try:
            ns = int(sequencer, 16)
        except ValueError:
            ns = 0
        if ns > 0:
            return ns - ns % 1_000_000
    return event_time_ns(record["eventTime"]) // NS * NS


def event_time_ns(text: Any) -> int:
    """An ISO-8601 ``eventTime`` (``2026-03-01T12:00:00.123Z``) as ns since the epoch, exact."""
    match = _TIME.match(text) if isinstance(text, str) else None
    if match is None:
        raise Undecodable(f"eventTime {text!r} is not an ISO-8601 time")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    try:
        datetime(year, month, day, hour, minute, second)  # refuses a 13th month, a 32nd day
    except ValueError as exc:
        raise Undecodable(f"eventTime {text!r}: {exc}") from exc
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * NS + int(fraction.ljust(9, "0") or 0)
