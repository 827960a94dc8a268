"""Manifest envelope: roundtrip, and every kind of damage caught with a precise reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sluice.storage import (
    CorruptObject,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStore,
    decode_manifest,
    encode_manifest,
    read_manifest,
    write_manifest,
)

from tests.fixtures.seaweed import BACKENDS

on_every_backend = pytest.mark.parametrize("store", BACKENDS, indirect=True)

KEY = "epochs/000000000007/checkpoint.json"
URI = "file:///ckpt/epochs/000000000007/checkpoint.json"
BODY: dict[str, Any] = {
    "epoch": 7,
    "attempt_id": "a-7f3c",
    "sources": {"clicks": {"next_offset": 1200}},
    "ratio": 0.1,
    "note": "zürich ✓",
    "sinks": [],
}


@pytest.fixture
def store(
    request: pytest.FixtureRequest, object_store_factory: Callable[[str], ObjectStore]
) -> ObjectStore:
    return object_store_factory(request.param)


def decode(data: bytes, kind: str = "checkpoint") -> dict[str, Any]:
    return decode_manifest(data, uri=URI, kind=kind)


def reason_for(data: bytes, kind: str = "checkpoint") -> str:
    with pytest.raises(CorruptObject) as caught:
        decode(data, kind)
    assert caught.value.uri == URI
    return caught.value.reason


# -- envelope ------------------------------------------------------------------------------


def test_envelope_has_version_kind_body_and_checksum() -> None:
    envelope = json.loads(encode_manifest("checkpoint", BODY))

    assert envelope["schema_version"] == 1
    assert envelope["kind"] == "checkpoint"
    assert envelope["body"] == BODY
    assert envelope["checksum"].startswith("sha256:")
    assert len(envelope["checksum"]) == len("sha256:") + 64


def test_encode_decode_roundtrip() -> None:
    assert decode(encode_manifest("checkpoint", BODY)) == BODY


def test_equal_bodies_encode_to_equal_bytes() -> None:
    reordered = dict(reversed(list(BODY.items())))

    assert encode_manifest("checkpoint", reordered) == encode_manifest("checkpoint", BODY)


def test_non_json_body_is_refused_at_encode() -> None:
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_manifest("plan", {"when": float("nan")})
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_manifest("plan", {"ids": {1, 2}})


# -- damage --------------------------------------------------------------------------------


def test_truncated_manifest_is_corrupt_with_byte_offset() -> None:
    data = encode_manifest("checkpoint", BODY)

    reason = reason_for(data[:40])

    assert reason.startswith("truncated or invalid JSON at byte 40 of 40")


def test_cut_inside_a_multibyte_character_is_reported_as_truncation() -> None:
    data = encode_manifest("checkpoint", BODY)
    cut = data.index("✓".encode()) + 1

    reason = reason_for(data[:cut])

    assert reason == f"truncated inside a UTF-8 character at byte {cut - 1} of {cut}"


def test_altered_byte_is_a_checksum_mismatch() -> None:
    data = encode_manifest("checkpoint", BODY)
    altered = data.replace(b'"next_offset": 1200', b'"next_offset": 1300')
    assert altered != data

    reason = reason_for(altered)

    stored = json.loads(data)["checksum"]
    assert reason.startswith(f"checksum mismatch: stored {stored} computed sha256:")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (encode_manifest("plan", BODY), "kind is 'plan', expected 'checkpoint'"),
        (b"", "empty object (0 bytes)"),
        (b'{"body": {}, "kind": "checkpoint", \xff}', "not UTF-8: invalid byte at offset 35"),
        (b"[1, 2]", "top level is a JSON list, expected an object"),
        (b'{"kind": "checkpoint", "body": {}}', "missing envelope fields ['checksum', "),
        (b"{}  x", "truncated or invalid JSON at byte 4 of 5: Extra data"),
    ],
    ids=["wrong-kind", "empty", "not-utf8", "not-object", "missing-fields", "trailing"],
)
def test_damaged_envelopes_name_the_problem(data: bytes, expected: str) -> None:
    assert reason_for(data).startswith(expected)


def test_unsupported_schema_version_is_refused() -> None:
    envelope = json.loads(encode_manifest("checkpoint", BODY))
    envelope["schema_version"] = 2

    reason = reason_for(json.dumps(envelope).encode())

    assert reason == "unsupported schema_version 2 (supported: [1])"


def test_unexpected_envelope_field_is_refused() -> None:
    envelope = json.loads(encode_manifest("checkpoint", BODY))
    envelope["extra"] = True

    assert reason_for(json.dumps(envelope).encode()) == "unexpected envelope fields ['extra']"


# -- through a store -----------------------------------------------------------------------


@on_every_backend
def test_write_then_read_through_a_store(store: ObjectStore) -> None:
    write_manifest(store, KEY, "checkpoint", BODY, if_absent=True)

    assert read_manifest(store, KEY, "checkpoint") == BODY


@on_every_backend
def test_write_if_absent_refuses_a_second_writer(store: ObjectStore) -> None:
    write_manifest(store, KEY, "checkpoint", BODY, if_absent=True)

    with pytest.raises(ObjectAlreadyExists):
        write_manifest(store, KEY, "checkpoint", {**BODY, "attempt_id": "b"}, if_absent=True)
    assert read_manifest(store, KEY, "checkpoint") == BODY


@on_every_backend
def test_write_without_if_absent_replaces(store: ObjectStore) -> None:
    write_manifest(store, KEY, "checkpoint", BODY, if_absent=True)
    write_manifest(store, KEY, "checkpoint", {"epoch": 8}, if_absent=False)

    assert read_manifest(store, KEY, "checkpoint") == {"epoch": 8}


@on_every_backend
def test_read_of_a_truncated_object_names_the_key(store: ObjectStore) -> None:
    store.put(KEY, encode_manifest("checkpoint", BODY)[:-30])

    with pytest.raises(CorruptObject) as caught:
        read_manifest(store, KEY, "checkpoint")

    assert caught.value.uri == store.uri(KEY)
    assert KEY in str(caught.value)
    assert "truncated or invalid JSON at byte" in str(caught.value)


@on_every_backend
def test_read_of_a_missing_manifest_raises_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        read_manifest(store, KEY, "checkpoint")


@on_every_backend
def test_corrupt_object_is_never_overwritten_by_write_if_absent(store: ObjectStore) -> None:
    corrupt = encode_manifest("checkpoint", BODY)[:-30]
    store.put(KEY, corrupt)

    with pytest.raises(ObjectAlreadyExists):
        write_manifest(store, KEY, "checkpoint", BODY, if_absent=True)
    assert store.get(KEY) == corrupt
