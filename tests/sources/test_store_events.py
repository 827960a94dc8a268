"""The store's object events read from Kafka (sluice.sources.store_events).

``seaweedfs``: a real SeaweedFS (``weed server`` with ``notification.toml``) publishes its
filer's events to the real test broker; every test writes through S3 (or the filer's HTTP API
for renames) and compares each event with what an S3 LIST of the object showed right after
the write: size, LastModified (``listing_time_ns``) and ETag must be equal.

``s3``: there is no MinIO or AWS here. Its tests produce, to the same real broker, messages in
AWS's documented S3 event notification record format (and MinIO's Kafka-target envelope, and
an SNS envelope), with keys URL-encoded as those services encode them.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from confluent_kafka import Consumer, TopicPartition
from sluice.sources.store_events import (
    ObjectEvent,
    StoreEvents,
    StoreEventsError,
    StoreEventsGone,
    UndecodableStoreEvent,
    default_event_prefix,
    listing_time_ns,
)
from sluice.sources.store_events.exceptions import Undecodable
from sluice.sources.store_events.formats import (
    _fields,
    event_time_ns,
    s3_events,
    seaweedfs_events,
)
from sluice.spec.components.files_source import NotificationsConfig

from tests.fixtures.kafka import KafkaServer, Record, start_kafka
from tests.fixtures.seaweed_events import (
    PARTITIONS,
    SeaweedEvents,
    seaweed_events,
    start_seaweed_with_events,
)

__all__ = ["seaweed_events"]  # the fixture, imported for this module

pytestmark = pytest.mark.s3

SETTLE_TIMEOUT_S = 30.0
Listed = tuple[int, int, str]  # (size, modified ns, ETag) as a LIST shows an object


def _events(
    topic: str, kafka: KafkaServer, source: str, format: str = "seaweedfs", **config: Any
) -> StoreEvents:
    notifications = NotificationsConfig(
        topic=topic, format=format, bootstrap_servers=kafka.bootstrap, **config
    )
    return StoreEvents(notifications, source, {})


def _bucket(env: SeaweedEvents, name: str) -> tuple[Any, str]:
    bucket = f"{name}-{uuid.uuid4().hex[:6]}"
    return env.server.client(), env.server.bucket(bucket)


def _listed(client: Any, bucket: str, key: str) -> Listed | None:
    """What an S3 LIST shows for exactly ``key`` now (None: not listed)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
    for page in pages:
        for obj in page.get("Contents", []):
            if obj["Key"] == key:
                return obj["Size"], listing_time_ns(obj["LastModified"]), obj["ETag"].strip('"')
    return None


def _listing(client: Any, bucket: str, prefix: str) -> dict[str, Listed]:
    """Every object a LIST shows under ``prefix`` (folder markers ``x/`` left out)."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith("/"):
                out[obj["Key"][len(prefix) :]] = (
                    obj["Size"],
                    listing_time_ns(obj["LastModified"]),
                    obj["ETag"].strip('"'),
                )
    return out


def _as_listed(event: ObjectEvent) -> Listed:
    return event.size, event.modified_ns, event.etag


def _by_key(events: Iterable[ObjectEvent]) -> dict[str, list[ObjectEvent]]:
    out: dict[str, list[ObjectEvent]] = {}
    for event in events:
        out.setdefault(event.key, []).append(event)
    return out


def _final(events: Iterable[ObjectEvent]) -> dict[str, Listed]:
    """The objects the events leave, as a LIST would show them."""
    last = {e.key: e for e in events}
    return {k: _as_listed(e) for k, e in sorted(last.items()) if not e.deleted}


def _settle(
    events: StoreEvents, start: Mapping[int, int], counts: Mapping[str, int]
) -> list[ObjectEvent]:
    """The events from ``start`` to the end once each key of ``counts`` has that many (the
    filer publishes asynchronously: a write returns before its event is on the topic)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        got = events.read(start, events.end_offsets())
        have = {k: len(v) for k, v in _by_key(got).items()}
        if all(have.get(k, 0) >= n for k, n in counts.items()):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"events {have} after {SETTLE_TIMEOUT_S} s, expected {counts}")
        time.sleep(0.1)


def _next_second() -> None:
    """Sleep into the next wall-clock second (LIST shows whole seconds: a write after this
    one lists a later LastModified)."""
    time.sleep(1.05 - time.time() % 1)


def _multipart(client: Any, bucket: str, key: str, parts: list[bytes]) -> None:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = []
    for number, body in enumerate(parts, start=1):
        etag = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
        )["ETag"]
        done.append({"ETag": etag, "PartNumber": number})
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
    )


# -- SeaweedFS: real events ---------------------------------------------------------------


def test_puts_overwrites_deletes_and_paths_outside(seaweed_events: SeaweedEvents) -> None:
    env = seaweed_events
    client, bucket = _bucket(env, "basic")
    events = _events(env.topic, env.kafka, f"s3://{bucket}/in")
    assert events.event_prefix == f"/buckets/{bucket}/in/"
    start = events.end_offsets()
    seen: dict[str, list[Listed | None]] = {}

    def put(key: str, body: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"in/{key}", Body=body)
        seen.setdefault(key, []).append(_listed(client, bucket, f"in/{key}"))

    put("a.jsonl", b'{"n": 1}\n')
    put("sub/deep/b.jsonl", b'{"n": 2}\n')
    for outside in ("out/c.jsonl", "in-other/d.jsonl", "inx.jsonl", "in/folder/"):
        client.put_object(Bucket=bucket, Key=outside, Body=b"")  # ignored (a marker too)
    _next_second()
    put("a.jsonl", b'{"n": 3}\n{"n": 4}\n')  # overwritten a second later
    client.delete_object(Bucket=bucket, Key="in/sub/deep/b.jsonl")

    got = _settle(events, start, {"a.jsonl": 2, "sub/deep/b.jsonl": 2})
    keyed = _by_key(got)
    assert sorted(keyed) == ["a.jsonl", "sub/deep/b.jsonl"]
    assert [(e.deleted, _as_listed(e)) for e in keyed["a.jsonl"]] == [
        (False, seen["a.jsonl"][0]),
        (False, seen["a.jsonl"][1]),
    ]
    first, second = seen["a.jsonl"]
    assert first is not None and second is not None and first[1] < second[1]
    put_b, deleted_b = keyed["sub/deep/b.jsonl"]
    assert (put_b.deleted, _as_listed(put_b)) == (False, seen["sub/deep/b.jsonl"][0])
    # a delete tells what was deleted: the object as it was last listed
    assert (deleted_b.deleted, _as_listed(deleted_b)) == (True, seen["sub/deep/b.jsonl"][0])
    assert _final(got) == _listing(client, bucket, "in/")


def test_multipart_uploads_match_the_listing(seaweed_events: SeaweedEvents) -> None:
    """The bucket itself is the source path, so the uploads' parts (under ``.uploads/``) are
    under it too: never listed, never an event."""
    env = seaweed_events
    client, bucket = _bucket(env, "multipart")
    events = _events(env.topic, env.kafka, f"s3://{bucket}")
    assert events.event_prefix == f"/buckets/{bucket}/"
    start = events.end_offsets()
    mib = 1024 * 1024
    client.put_object(Bucket=bucket, Key="big.jsonl", Body=b"x" * 10)
    small = _listed(client, bucket, "big.jsonl")
    _next_second()
    _multipart(client, bucket, "big.jsonl", [b"a" * 5 * mib, b"b" * 100])  # an overwrite
    big = _listed(client, bucket, "big.jsonl")
    _multipart(client, bucket, "d/three.jsonl", [b"c" * 5 * mib, b"d" * 5 * mib, b"e"])
    three = _listed(client, bucket, "d/three.jsonl")
    assert big is not None and big[2].endswith("-2") and big[0] == 5 * mib + 100
    assert three is not None and three[2].endswith("-3")

    got = _settle(events, start, {"big.jsonl": 2, "d/three.jsonl": 1})
    assert {k: [_as_listed(e) for e in v] for k, v in _by_key(got).items()} == {
        "big.jsonl": [small, big],
        "d/three.jsonl": [three],
    }
    assert not any(e.deleted for e in got)
    assert _final(got) == _listing(client, bucket, "")


def test_renames_and_a_folder_deleted_through_the_filer(seaweed_events: SeaweedEvents) -> None:
    """Through the filer's HTTP API (S3 has no rename): a rename is one message, the old path
    deleted then the new one created; a folder moved or deleted sends one message per file.

    A rename's message is keyed by the old path, the new path's later events by the new one:
    they can land in different partitions, so (partition, offset) order need not be the order
    of one path's events once renames happen (here the new paths' deletes may come first)."""
    env = seaweed_events
    client, bucket = _bucket(env, "renames")
    events = _events(env.topic, env.kafka, f"s3://{bucket}/in")
    start = events.end_offsets()
    for key in ("old.jsonl", "dir/x.jsonl", "dir/y/z.jsonl"):
        client.put_object(Bucket=bucket, Key=f"in/{key}", Body=key.encode())
    before = _listing(client, bucket, "in/")
    filer = f"http://127.0.0.1:{env.server.ports['filer.port']}/buckets/{bucket}/in"

    def call(method: str, path: str) -> None:
        with urllib.request.urlopen(urllib.request.Request(f"{filer}/{path}", method=method)):
            pass

    call("POST", f"new.jsonl?mv.from=/buckets/{bucket}/in/old.jsonl")
    call("POST", f"dir2?mv.from=/buckets/{bucket}/in/dir")
    moved = _listing(client, bucket, "in/")
    call("DELETE", "dir2?recursive=true")
    assert _listing(client, bucket, "in/") == {"new.jsonl": moved["new.jsonl"]}

    got = _settle(events, start, {"dir2/x.jsonl": 2, "dir2/y/z.jsonl": 2, "new.jsonl": 1})
    told = [(e.key, e.deleted, _as_listed(e)) for e in got]
    renames = {"old.jsonl": "new.jsonl", "dir/x.jsonl": "dir2/x.jsonl"}
    renames["dir/y/z.jsonl"] = "dir2/y/z.jsonl"
    expected = [(old, False, before[old]) for old in renames]  # the puts
    for old, new in renames.items():
        pair = [(old, True, before[old]), (new, False, moved[new])]
        at = told.index(pair[0])
        assert told[at : at + 2] == pair  # one message: deleted, then created
        expected += pair
    expected += [(gone, True, moved[gone]) for gone in ("dir2/x.jsonl", "dir2/y/z.jsonl")]
    assert sorted(told) == sorted(expected)
    assert moved["new.jsonl"] == before["old.jsonl"]  # a rename keeps size, time and ETag


def test_filer_uploads_carry_nanoseconds_the_listing_does_not(
    seaweed_events: SeaweedEvents,
) -> None:
    """Written through the filer's HTTP API (as ``weed upload``, ``weed mount`` or
    ``filer.copy`` write): the entry's mtime has nanoseconds (attribute ``mtime_ns``) and no S3
    ETag (LIST shows the Md5 attribute); LIST shows whole seconds, so do the events."""
    env = seaweed_events
    client, bucket = _bucket(env, "filer-http")
    events = _events(env.topic, env.kafka, f"s3://{bucket}/in")
    start = events.end_offsets()
    filer = f"http://127.0.0.1:{env.server.ports['filer.port']}/buckets/{bucket}/in"
    bodies = {"small.jsonl": b"{}\n", "big.bin": b"z" * (9 * 1024 * 1024)}  # 3 chunks of 4 MiB
    for name, body in bodies.items():
        request = urllib.request.Request(f"{filer}/{name}", data=body, method="PUT")
        with urllib.request.urlopen(request):
            pass
    got = _settle(events, start, dict.fromkeys(bodies, 1))
    assert {e.key: _as_listed(e) for e in got} == _listing(client, bucket, "in/")
    for key, value in _raw(env, [f"/buckets/{bucket}/in/{name}" for name in bodies]):
        new = _fields(_fields(value)[2][0])
        attributes = _fields(new[4][0])
        nanos = attributes.get(19, [0])[0]
        assert 0 < nanos < 10**9, f"{key!r}: the filer wrote no mtime_ns"
        assert 14 in attributes and len(new.get(3, [])) == (3 if key.endswith(b".bin") else 1)


def _raw(env: SeaweedEvents, paths: list[str]) -> list[tuple[bytes, bytes]]:
    """The messages SeaweedFS published for ``paths``, as bytes."""
    wanted = {p.encode() for p in paths}
    return [(k, v) for k, v in _keyed_log(env) if k in wanted]


AWKWARD = [
    "a b.jsonl",
    "100%.jsonl",
    "%41%2F.jsonl",
    "plus+sign.jsonl",
    "été.jsonl",
    "日本/データ.jsonl",
    "a*.jsonl",
    "a?.jsonl",
    "[x].jsonl",
    "[!x].jsonl",
    "{p,q}.jsonl",
    "d*/in.jsonl",
    "2026-03-01T12:00:00.jsonl",
    "2026-03-01T12:00:00Z/part:1.jsonl",
    "semi;colon#hash&amp=.jsonl",
    "quote'\"`.jsonl",
    "tab\t.jsonl",
    "~tilde^caret|pipe<>.jsonl",
]


def test_awkward_names_are_the_listed_keys(seaweed_events: SeaweedEvents) -> None:
    env = seaweed_events
    client, bucket = _bucket(env, "names")
    events = _events(env.topic, env.kafka, f"s3://{bucket}/in put")  # a space in the path too
    start = events.end_offsets()
    for name in AWKWARD:
        client.put_object(Bucket=bucket, Key=f"in put/{name}", Body=name.encode())
    got = _settle(events, start, dict.fromkeys(AWKWARD, 1))
    assert sorted(e.key for e in got) == sorted(AWKWARD)
    assert {e.key: _as_listed(e) for e in got} == _listing(client, bucket, "in put/")


def test_a_versioned_bucket_is_refused_not_skipped(seaweed_events: SeaweedEvents) -> None:
    env = seaweed_events
    client, bucket = _bucket(env, "versioned")
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    events = _events(env.topic, env.kafka, f"s3://{bucket}/in")
    start = events.end_offsets()
    client.put_object(Bucket=bucket, Key="in/a.jsonl", Body=b"1\n")
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        try:
            events.read(start, events.end_offsets())
        except UndecodableStoreEvent as exc:
            assert exc.topic == env.topic and "versioned" in exc.reason
            assert f"partition {exc.partition} offset {exc.offset}" in str(exc)
            break
        assert time.monotonic() < deadline, "the versioned object's event never came"
        time.sleep(0.1)


def test_the_same_offsets_give_the_same_events(seaweed_events: SeaweedEvents) -> None:
    env = seaweed_events
    client, bucket = _bucket(env, "replay")
    events = _events(env.topic, env.kafka, f"s3://{bucket}")
    start = events.end_offsets()
    for i in range(30):
        client.put_object(Bucket=bucket, Key=f"f{i:02d}.jsonl", Body=b"x" * i)
    _settle(events, start, {f"f{i:02d}.jsonl": 1 for i in range(30)})
    end = events.end_offsets()
    whole = events.read(start, end)
    assert len(whole) == 30 and events.read(start, end) == whole
    # per partition, in (partition, offset) order; a range cut in two reads the same
    per_partition = [events.read({p: start[p]}, {p: end[p]}) for p in sorted(end)]
    assert [e for part in per_partition for e in part] == whole
    for p in sorted(end):
        mid = (start[p] + end[p]) // 2
        halves = events.read({p: start[p]}, {p: mid}) + events.read({p: mid}, {p: end[p]})
        assert halves == per_partition[p]
    assert events.read(end, end) == [] and events.read({}, {}) == []


def test_end_and_start_offsets(seaweed_events: SeaweedEvents) -> None:
    env = seaweed_events
    events = _events(env.topic, env.kafka, "s3://anything")
    ends = events.end_offsets()
    assert sorted(ends) == list(range(PARTITIONS))
    assert events.start_offsets() == env.kafka.start_offsets(env.topic) == dict.fromkeys(ends, 0)
    assert all(ends[p] <= now for p, now in env.kafka.end_offsets(env.topic).items())
    assert sum(ends.values()) > 0  # the probe's events at least


@pytest.mark.slow
def test_events_sent_while_the_broker_is_down_are_lost(tmp_path: Path) -> None:
    """At most once: the filer's producer drops what it cannot send (its own broker here,
    killed and started again on the same data). The PUTs succeed; their events never come."""
    kafka = start_kafka(tmp_path / "kafka")
    try:
        topic = kafka.create_topic("outage", 1)
        with start_seaweed_with_events(tmp_path / "seaweed", kafka, topic) as server:
            client = server.client()
            bucket = server.bucket("outage")
            events = _events(topic, kafka, f"s3://{bucket}")
            start = events.end_offsets()
            for i in range(5):
                client.put_object(Bucket=bucket, Key=f"before{i}", Body=b"x")
            _settle(events, start, {f"before{i}": 1 for i in range(5)})
            assert kafka.process is not None
            command, node = kafka.process.args, Path(kafka.log_path or tmp_path).parent
            os.killpg(kafka.process.pid, signal.SIGKILL)  # start_new_session: its own group
            kafka.process.wait()
            for i in range(10):
                client.put_object(Bucket=bucket, Key=f"during{i}", Body=b"x")
                time.sleep(0.5)
            with open(node / "stdout-restarted.log", "ab") as out:
                kafka.process = subprocess.Popen(
                    command, cwd=node, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            deadline = time.monotonic() + 60
            while not any(e.key == "back" for e in _settle(events, start, {})):
                assert time.monotonic() < deadline, "the filer's producer never came back"
                client.put_object(Bucket=bucket, Key="back", Body=b"x")  # until one arrives
                time.sleep(1)
            for i in range(5):
                client.put_object(Bucket=bucket, Key=f"after{i}", Body=b"x")
            got = _settle(events, start, {f"after{i}": 1 for i in range(5)})
            time.sleep(2)  # anything late would be here by now
            keys = {e.key for e in events.read(start, events.end_offsets())}
            kept = {f"{when}{i}" for when in ("before", "after") for i in range(5)}
            assert keys == {e.key for e in got} == kept | {"back"}
            assert server.log_path is not None
            assert server.log_path.read_bytes().count(b"producer message error") >= 10
    finally:
        kafka.stop()


# -- offsets, retention and bad messages (their own topics) -------------------------------


def _aws_record(
    name: str, bucket: str, key: str, size: int | None = None, etag: str | None = None, **more: Any
) -> dict[str, Any]:
    """One record as AWS documents it (notification-content-structure), the key URL-encoded
    as S3 does (form encoding: '+' for a space, '/' kept)."""
    obj: dict[str, Any] = {"key": quote_plus(key, safe="/"), "sequencer": "0055AED6DCD90281E5"}
    if size is not None:
        obj |= {"size": size, "eTag": etag or "", "versionId": "096fKKXTRTtl3on89fVO.nfljtsv6qko"}
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-west-2",
        "eventTime": more.pop("eventTime", "2026-03-01T12:00:01.250Z"),
        "eventName": name,
        "userIdentity": {"principalId": "AWS:AIDAJDPLRKLG7UEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURI"},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "testConfigRule",
            "bucket": {
                "name": bucket,
                "ownerIdentity": {"principalId": "A3NL1KOZZKExample"},
                "arn": f"arn:aws:s3:::{bucket}",
            },
            "object": obj,
        },
        **more,
    }


def _topic(kafka: KafkaServer, name: str, partitions: int = 1) -> str:
    return kafka.create_topic(f"{name}-{uuid.uuid4().hex[:8]}", partitions)


def test_retention_and_ranges_past_the_end_fail_by_name(kafka_server: KafkaServer) -> None:
    topic = _topic(kafka_server, "events-retention", partitions=2)
    created = _aws_record("ObjectCreated:Put", "landing", "in/a.jsonl", 5, "abc")
    kafka_server.produce(topic, [Record({"Records": [created]}, partition=p % 2) for p in range(8)])
    events = _events(topic, kafka_server, "s3://landing/in", format="s3")
    assert events.end_offsets() == {0: 4, 1: 4} and events.start_offsets() == {0: 0, 1: 0}
    assert len(events.read({}, {0: 4, 1: 4})) == 8
    kafka_server.delete_records(topic, {1: 3})
    assert events.start_offsets() == {0: 0, 1: 3}
    with pytest.raises(StoreEventsGone) as gone:
        events.read({0: 0, 1: 1}, {0: 4, 1: 4})
    assert gone.value.missing == [(1, 1, 3)] and gone.value.topic == topic
    assert "partition 1: offsets 1..2 (2 events)" in str(gone.value)
    assert len(events.read({0: 0, 1: 3}, {0: 4, 1: 4})) == 5
    with pytest.raises(StoreEventsError, match="partition 0 ends at offset 4, the range asks up"):
        events.read({0: 0}, {0: 5})
    with pytest.raises(StoreEventsError, match="no partition 7"):
        events.read({}, {7: 1})
    missing = _events(f"no-such-{uuid.uuid4().hex[:6]}", kafka_server, "s3://b/p", format="s3")
    with pytest.raises(StoreEventsError, match=r"no-such-.*(no such topic|UNKNOWN_TOPIC)"):
        missing.end_offsets()


def test_an_undecodable_message_fails_naming_its_offset(
    seaweed_events: SeaweedEvents, kafka_server: KafkaServer
) -> None:
    """A real SeaweedFS message, then broken ones: never skipped, each named by offset."""
    env = seaweed_events
    real = _a_real_seaweed_message(env)
    topic = _topic(kafka_server, "events-bad")
    kafka_server.produce(topic, [
        Record(real[1], key=real[0]),
        Record(real[1][:-3], key=real[0]),  # cut short
        Record(real[1], key=None),  # no key: which path?
        Record(b"{}", key=real[0]),
    ])  # fmt: skip
    events = _events(topic, kafka_server, "s3://sluice-probe")
    assert [e.key for e in events.read({}, {0: 1})] == ["ready"]
    for offset in (1, 2, 3):
        with pytest.raises(UndecodableStoreEvent) as bad:
            events.read({0: offset}, {0: offset + 1})
        assert (bad.value.topic, bad.value.partition, bad.value.offset) == (topic, 0, offset)
        assert f"topic {topic} partition 0 offset {offset} is not a seaweedfs" in str(bad.value)
    with pytest.raises(UndecodableStoreEvent, match="offset 1 "):
        events.read({}, {0: 4})  # the whole range fails at the first bad message


def _a_real_seaweed_message(env: SeaweedEvents) -> tuple[bytes, bytes]:
    """The readiness probe's object event, as SeaweedFS published it."""
    consumer = Consumer(env.kafka.client_config(**{"group.id": f"t-{uuid.uuid4().hex[:6]}"}))
    try:
        ends = env.kafka.end_offsets(env.topic)
        consumer.assign([TopicPartition(env.topic, p, 0) for p in ends])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if (
                msg is not None
                and msg.error() is None
                and msg.key() == b"/buckets/sluice-probe/ready"
            ):
                return msg.key(), msg.value()
    finally:
        consumer.close()
    raise AssertionError("the probe's event is not on the topic")


# -- S3 event notification JSON (AWS's record format) -------------------------------------


def test_s3_json_records_decoded_exactly(kafka_server: KafkaServer) -> None:
    topic = _topic(kafka_server, "events-s3", partitions=2)
    names = [n for n in AWKWARD if "\t" not in n] + ["x/a+b c%20.jsonl"]
    messages: list[Any] = []
    for i, name in enumerate(names):
        messages.append({"Records": [_aws_record("ObjectCreated:Put", "landing", f"in/{name}",
                                                  size=i, etag=f"e{i}")]})  # fmt: skip
    messages += [
        {"Records": [
            _aws_record("ObjectCreated:CompleteMultipartUpload", "landing", "in/mp.jsonl",
                        size=5 << 20, etag='"9b2cf535f27731c974343645a3985328-2"'),
            _aws_record("ObjectTagging:Put", "landing", "in/mp.jsonl", size=1, etag="t"),
            _aws_record("ObjectRemoved:Delete", "landing", "in/a b.jsonl"),
            _aws_record("LifecycleExpiration:Delete", "landing", "in/été.jsonl"),
            _aws_record("ObjectCreated:Copy", "other-bucket", "in/x.jsonl", size=1, etag="o"),
            _aws_record("ObjectCreated:Put", "landing", "inx.jsonl", size=1, etag="o"),
            _aws_record("ObjectCreated:Put", "landing", "in/", size=0, etag="o"),
        ]},
        {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-03-01T12:00:00.000Z",
         "Bucket": "landing", "RequestId": "5582815E1AEA5ADF", "HostId": "8cLeGAmw"},
        {"Type": "Notification", "MessageId": "22b80b92", "TopicArn": "arn:aws:sns:us-east-2:1:t",
         "Message": json.dumps({"Records": [_aws_record(
             "ObjectCreated:Post", "landing", "in/sns.jsonl", size=7, etag="s",
             eventTime="2026-03-01T12:00:02.999+01:00")]})},
    ]  # fmt: skip
    minio = _aws_record(
        "s3:ObjectCreated:Put", "landing", "", size=3, etag="m", eventSource="minio:s3"
    )
    modified = datetime(2026, 3, 1, 12, 0, 3, 456789, tzinfo=UTC)
    modified_ns = listing_time_ns(modified) + 123  # MinIO's sequencer: ModTime in ns, hex
    minio["s3"]["object"] |= {"key": quote_plus("in/mín io/a+b.jsonl", safe=""),
                              "sequencer": f"{modified_ns:X}"}  # fmt: skip
    messages.append({"EventName": "s3:ObjectCreated:Put", "Key": "landing/in/mín io/a+b.jsonl",
                     "Records": [minio]})  # fmt: skip
    kafka_server.produce(
        topic, [Record(m, key=f"k{i}", partition=i % 2) for i, m in enumerate(messages)]
    )
    events = _events(topic, kafka_server, "s3://landing/in", format="s3")
    assert events.event_prefix == "landing/in/"
    got = events.read({}, events.end_offsets())
    second = event_time_ns("2026-03-01T12:00:01.250Z") // 10**9 * 10**9
    expected = [ObjectEvent(n, i, second, f"e{i}", False) for i, n in enumerate(names)]
    expected += [
        ObjectEvent("mp.jsonl", 5 << 20, second, "9b2cf535f27731c974343645a3985328-2", False),
        ObjectEvent("a b.jsonl", 0, 0, "", True),
        ObjectEvent("été.jsonl", 0, 0, "", True),
        ObjectEvent("sns.jsonl", 7, event_time_ns("2026-03-01T11:00:02Z"), "s", False),
        ObjectEvent("mín io/a+b.jsonl", 3, listing_time_ns(modified.replace(microsecond=456000)),
                    "m", False),
    ]  # fmt: skip
    # (partition, offset) order: partition 0 holds the even messages
    order = [i for i in range(len(messages)) if i % 2 == 0] + [
        i for i in range(len(messages)) if i % 2 == 1
    ]
    by_message = _expected_per_message(expected, len(names))
    assert got == [e for i in order for e in by_message.get(i, [])]


def _expected_per_message(expected: list[ObjectEvent], n: int) -> dict[int, list[ObjectEvent]]:
    out = {i: [expected[i]] for i in range(n)}
    out[n] = expected[n : n + 3]  # the message of seven records: three under the path
    out[n + 2] = [expected[n + 3]]  # SNS
    out[n + 3] = [expected[n + 4]]  # MinIO
    return out


def _put(raw_key: str = "in/a", **fields: Any) -> bytes:
    """One created record whose key is ``raw_key`` as written (already URL-encoded)."""
    record = _aws_record("ObjectCreated:Put", "landing", "in/a", **fields)
    record["s3"]["object"]["key"] = raw_key
    return json.dumps({"Records": [record]}).encode()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"not json", "not JSON"),
        (b'{"Records": {}}', 'no "Records" list'),
        (b'{"Records": [{"eventName": "ObjectCreated:Put"}]}', "Records[0]: KeyError: 's3'"),
        (_put("in/%FF", size=1), "not UTF-8"),
        (_put(), "KeyError: 'size'"),
        (_put(size=-1), "not a byte count"),
        (_put(size=1, eventTime="yesterday"), "eventTime"),
        (_put(size=1, eventTime="2026-02-30T00:00:00Z"), "eventTime"),
    ],
)
def test_s3_json_that_cannot_be_decoded_fails(value: bytes, reason: str) -> None:
    with pytest.raises(Undecodable) as bad:
        s3_events(b"k", value)
    assert reason in str(bad.value)


# -- paths and times ------------------------------------------------------------------------


def test_event_prefixes() -> None:
    assert (
        default_event_prefix("seaweedfs", "s3://landing/clicks/in/")
        == "/buckets/landing/clicks/in/"
    )
    assert default_event_prefix("seaweedfs", "s3://landing") == "/buckets/landing/"
    assert default_event_prefix("s3", "s3://landing/clicks") == "landing/clicks/"
    with pytest.raises(ValueError, match="event_prefix"):
        default_event_prefix("seaweedfs", "file:///mnt/weed/in")
    config = NotificationsConfig(topic="t", bootstrap_servers="h:1", event_prefix="/srv/in")
    assert StoreEvents(config, "file:///mnt/weed/in", {}).event_prefix == "/srv/in/"
    s3 = NotificationsConfig(topic="t", bootstrap_servers="h:1", format="s3", event_prefix="/x")
    with pytest.raises(ValueError, match="no leading"):
        StoreEvents(s3, "s3://x", {})
    java_only = {"bootstrap.servers": "a:1", "ssl.truststore.location": "/t.jks"}
    events = StoreEvents(NotificationsConfig(topic="t", connection="k"), "s3://b", java_only)
    assert events.settings == {"bootstrap.servers": "a:1"} and events.location == "kafka://a:1/t"


def test_listing_time_ns_is_exact() -> None:
    moment = datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)
    assert listing_time_ns(moment) == 9_223_372_036_854_775_000
    assert listing_time_ns(datetime(2026, 3, 1, 13, 0, tzinfo=timezone(timedelta(hours=1)))) == (
        listing_time_ns(datetime(2026, 3, 1, 12, 0))  # naive = UTC
    )
    assert listing_time_ns(None) == 0
    assert event_time_ns("2026-03-01T12:00:00.123456789Z") % 10**9 == 123456789


# -- measurements ---------------------------------------------------------------------------


def test_measure_put_to_event_delay(
    seaweed_events: SeaweedEvents, record_property: Callable[[str, object], None]
) -> None:
    """The delay from a PUT until its event can be read from Kafka, over 50 PUTs (printed
    with ``-s``): from the PUT's start, and from its return."""
    env = seaweed_events
    client, bucket = _bucket(env, "latency")
    consumer = Consumer(env.kafka.client_config(**{
        "group.id": f"latency-{uuid.uuid4().hex[:6]}", "fetch.wait.max.ms": 5,
        "fetch.error.backoff.ms": 5}))  # fmt: skip
    ends = env.kafka.end_offsets(env.topic)
    consumer.assign([TopicPartition(env.topic, p, o) for p, o in ends.items()])
    from_start, from_return = [], []
    try:
        for i in range(50):
            key = f"f{i:03d}.jsonl"
            began = time.monotonic()
            client.put_object(Bucket=bucket, Key=key, Body=b"{}\n")
            returned = time.monotonic()
            path = f"/buckets/{bucket}/{key}".encode()
            while True:
                msg = consumer.poll(5.0)
                assert msg is not None, f"no event for {key} in 5 s"
                if msg.error() is None and msg.key() == path:
                    break
            seen = time.monotonic()
            from_start.append(seen - began)
            from_return.append(seen - returned)
    finally:
        consumer.close()
    report = {
        "put_to_event_median_ms": round(statistics.median(from_start) * 1000, 1),
        "put_to_event_p90_ms": round(statistics.quantiles(from_start, n=10)[-1] * 1000, 1),
        "put_to_event_max_ms": round(max(from_start) * 1000, 1),
        "put_return_to_event_median_ms": round(statistics.median(from_return) * 1000, 1),
    }
    _report(record_property, report)
    assert statistics.median(from_start) < 2.0


def test_measure_events_read_per_second(
    seaweed_events: SeaweedEvents, record_property: Callable[[str, object], None]
) -> None:
    """StoreEvents.read over 20,000 messages in 3 partitions (fetch + decode + filter), per
    format: SeaweedFS's real messages (this module's file events, copied round-robin) and AWS
    records; and the SeaweedFS decoder alone."""
    env = seaweed_events
    log = [(k, v) for k, v in _keyed_log(env) if b".versions/" not in k]  # those fail a read
    real = [(k, v) for k, v in log if seaweedfs_events(k, v)]
    n = 20_000
    copies = [Record(real[i % len(real)][1], key=real[i % len(real)][0], partition=i % 3)
              for i in range(n)]  # fmt: skip
    aws = [Record({"Records": [_aws_record("ObjectCreated:Put", "landing", f"in/d/{i:06d}.jsonl",
                                           size=i, etag=f"{i:032x}")]}, partition=i % 3)
           for i in range(n)]  # fmt: skip
    report: dict[str, object] = {}
    for fmt, records, prefix in (("seaweedfs", copies, "/"), ("s3", aws, "landing/in/")):
        topic = _topic(env.kafka, f"events-rate-{fmt}", partitions=3)
        env.kafka.produce(topic, records)
        events = _events(topic, env.kafka, "s3://x", format=fmt, event_prefix=prefix)
        end = events.end_offsets()
        started = time.perf_counter()
        got = events.read({}, end)
        seconds = time.perf_counter() - started
        assert sum(end.values()) == n and len(got) >= n // 2
        report[f"read_{fmt}_messages_per_s"] = round(n / seconds)
    started, done = time.perf_counter(), 0
    while time.perf_counter() - started < 1.0:
        for key, value in real:
            seaweedfs_events(key, value)
        done += len(real)
    report["decode_seaweedfs_messages_per_s"] = round(done / (time.perf_counter() - started))
    _report(record_property, report)


def _report(record_property: Callable[[str, object], None], report: Mapping[str, object]) -> None:
    for name, value in report.items():
        record_property(name, value)
    print(f"\nstore events: {dict(report)}")


def _keyed_log(env: SeaweedEvents) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(env.kafka.client_config(**{"group.id": f"log-{uuid.uuid4().hex[:6]}"}))
    ends = env.kafka.end_offsets(env.topic)
    out: list[tuple[bytes, bytes]] = []
    try:
        consumer.assign([TopicPartition(env.topic, p, 0) for p in ends])
        left = sum(ends.values())
        while left:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    out.append((msg.key(), msg.value()))
                    left -= 1
    finally:
        consumer.close()
    return out
