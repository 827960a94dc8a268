"""Backend specifics the shared contract cannot see: local temp files, S3 error mapping (with a
fake client), client configuration, and URI parsing for open_store / to_spark_uri."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from sluice.storage import (
    InvalidKey,
    InvalidStoreUri,
    LocalObjectStore,
    ObjectAlreadyExists,
    ObjectNotFound,
    S3ObjectStore,
    S3Options,
    StorageError,
    open_store,
    to_spark_uri,
)
from sluice.storage.s3 import make_s3_client

AWS_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION")


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# -- local ---------------------------------------------------------------------------------


def test_local_root_uri_is_an_absolute_file_uri(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    store = LocalObjectStore("ckpt/orders")

    assert store.root_uri == f"file://{tmp_path}/ckpt/orders"
    assert store.uri("a/b") == f"file://{tmp_path}/ckpt/orders/a/b"


def test_local_writes_leave_no_temp_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("a/b", b"1")
    store.put("a/b", b"2")
    store.put_if_absent("a/c", b"3")
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("a/c", b"4")
    store.move("a/c", "d")

    assert files_under(tmp_path) == ["a/b", "d"]


def test_local_temp_files_left_by_a_crash_are_invisible(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    (tmp_path / "epochs").mkdir()
    (tmp_path / "epochs" / ".tmp-1f2e").write_bytes(b"half a manifest")
    (tmp_path / ".hidden-dir").mkdir()
    (tmp_path / ".hidden-dir" / "x").write_bytes(b"")

    store.put_if_absent("epochs/checkpoint.json", b"whole")

    assert [info.key for info in store.list()] == ["epochs/checkpoint.json"]


def test_local_delete_prefix_takes_spark_companions_and_empty_dirs(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("state/1-a/part-0.parquet", b"p")
    (tmp_path / "state/1-a/.part-0.parquet.crc").write_bytes(b"c")
    store.put("state/1-b/part-0.parquet", b"p")
    (tmp_path / "state/1-b/.tmp-inflight").write_bytes(b"someone else's write")
    store.put("state/2/part-0.parquet", b"p")

    assert store.delete_prefix("state/1-") == 2
    assert files_under(tmp_path) == ["state/1-b/.tmp-inflight", "state/2/part-0.parquet"]
    assert not (tmp_path / "state/1-a").exists()


def test_local_key_cannot_be_object_and_prefix_at_once(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("a", b"1")

    with pytest.raises(StorageError, match="a parent of this key is already an object"):
        store.put("a/b", b"2")


def test_local_child_of_child_resolves_under_root(tmp_path: Path) -> None:
    child = LocalObjectStore(tmp_path).child("p").child("q/")

    assert child.root == tmp_path / "p" / "q"


# -- S3 error mapping with a fake client ---------------------------------------------------


def client_error(code: str, status: int, *, retries: int = 0) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"{code} happened"},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries},
    }
    return ClientError(response, "PutObject")


class FakeS3:
    """Raises ``error`` from every write; get_object serves ``stored`` (or NoSuchKey)."""

    def __init__(self, error: Exception | None = None, stored: bytes | None = None) -> None:
        self.error = error
        self.stored = stored
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        return self._write("put_object", kwargs)

    def copy_object(self, **kwargs: Any) -> dict[str, Any]:
        return self._write("copy_object", kwargs)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_object", kwargs))
        if self.stored is None:
            raise client_error("NoSuchKey", 404)
        return {"Body": io.BytesIO(self.stored)}

    def _write(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, kwargs))
        if self.error is not None:
            raise self.error
        return {}


def fake_store(fake: FakeS3) -> S3ObjectStore:
    return S3ObjectStore("ckpt", "orders", client=fake)


def test_s3_put_if_absent_sends_if_none_match_star() -> None:
    fake = FakeS3()

    fake_store(fake).put_if_absent("epochs/1", b"mine")

    assert fake.calls == [
        (
            "put_object",
            {"Bucket": "ckpt", "Key": "orders/epochs/1", "Body": b"mine", "IfNoneMatch": "*"},
        )
    ]


@pytest.mark.parametrize(
    ("code", "status"), [("PreconditionFailed", 412), ("ConditionalRequestConflict", 409)]
)
def test_s3_lost_race_is_object_already_exists(code: str, status: int) -> None:
    fake = FakeS3(client_error(code, status), stored=b"theirs")

    with pytest.raises(ObjectAlreadyExists) as caught:
        fake_store(fake).put_if_absent("epochs/1", b"mine")

    assert caught.value.uri == "s3://ckpt/orders/epochs/1"
    assert isinstance(caught.value.__cause__, ClientError)
    assert [name for name, _ in fake.calls] == ["put_object"]  # no read without a retry


def test_s3_retried_412_over_our_own_bytes_is_a_win() -> None:
    # Attempt 1 landed but its response was lost; botocore's retry then hit If-None-Match.
    fake = FakeS3(client_error("PreconditionFailed", 412, retries=1), stored=b"mine")

    fake_store(fake).put_if_absent("epochs/1", b"mine")


def test_s3_retried_412_over_other_bytes_is_a_loss() -> None:
    fake = FakeS3(client_error("PreconditionFailed", 412, retries=2), stored=b"theirs")

    with pytest.raises(ObjectAlreadyExists):
        fake_store(fake).put_if_absent("epochs/1", b"mine")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (client_error("AccessDenied", 403), "put_object failed: AccessDenied (HTTP 403)"),
        (client_error("NoSuchBucket", 404), "bucket 'ckpt' does not exist"),
        (EndpointConnectionError(endpoint_url="http://s3.invalid"), "Could not connect"),
    ],
    ids=["access-denied", "no-bucket", "unreachable"],
)
def test_s3_failures_become_storage_errors_naming_the_uri(error: Exception, message: str) -> None:
    with pytest.raises(StorageError) as caught:
        fake_store(FakeS3(error)).put("epochs/1", b"x")

    assert type(caught.value) is StorageError
    assert caught.value.uri == "s3://ckpt/orders/epochs/1"
    assert message in str(caught.value)
    assert caught.value.__cause__ is error


def test_s3_get_of_missing_key_is_object_not_found() -> None:
    with pytest.raises(ObjectNotFound) as caught:
        fake_store(FakeS3()).get("epochs/1")

    assert caught.value.uri == "s3://ckpt/orders/epochs/1"


def test_s3_prefix_is_normalised() -> None:
    assert S3ObjectStore("ckpt", "/a/b/", client=FakeS3()).root_uri == "s3://ckpt/a/b"
    assert S3ObjectStore("ckpt", "", client=FakeS3()).root_uri == "s3://ckpt"
    assert S3ObjectStore("ckpt", "a", client=FakeS3()).child("b/").root_uri == "s3://ckpt/a/b"
    with pytest.raises(InvalidKey):
        S3ObjectStore("ckpt", "a/../b", client=FakeS3())


def test_s3_client_is_path_style_with_standard_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)

    client = make_s3_client()

    assert client.meta.region_name == "us-east-1"
    assert client.meta.config.s3 == {"addressing_style": "path"}
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 6}
    assert client.meta.config.connect_timeout == 5.0


def test_s3_client_reads_endpoint_and_region_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")

    client = make_s3_client()

    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.region_name == "eu-central-1"


# -- open_store / to_spark_uri / S3Options -------------------------------------------------


def test_open_store_local_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    expected = f"file://{tmp_path}/ckpt"

    for uri in [f"file://{tmp_path}/ckpt", f"file://localhost{tmp_path}/ckpt/", "ckpt"]:
        store = open_store(uri)
        assert isinstance(store, LocalObjectStore)
        assert store.root_uri == expected
    assert open_store(str(tmp_path / "ckpt")).root_uri == expected


def test_open_store_s3_uses_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    options = S3Options(endpoint_url="http://127.0.0.1:9", region="eu-west-1")

    store = open_store("s3://ckpt/pipelines/orders/", s3=options)

    assert isinstance(store, S3ObjectStore)
    assert (store.bucket, store.prefix, store.root_uri) == (
        "ckpt",
        "pipelines/orders",
        "s3://ckpt/pipelines/orders",
    )
    assert store._client.meta.endpoint_url == "http://127.0.0.1:9"
    assert store._client.meta.region_name == "eu-west-1"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("", "empty"),
        ("http://example.com/x", "unsupported scheme 'http'; accepted forms: file:///abs/path"),
        ("s3a://ckpt/x", "unsupported scheme 's3a'"),
        ("s3://", "expected s3://bucket/prefix"),
        ("s3:ckpt", "expected s3://bucket/prefix"),
        ("file://host/abs", "expected file:///absolute/path (no host)"),
        ("file:rel/path", "file URIs need an absolute path"),
    ],
)
def test_open_store_refuses_other_uris_naming_them(uri: str, reason: str) -> None:
    with pytest.raises(InvalidStoreUri) as caught:
        open_store(uri)

    assert caught.value.uri == uri
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://ckpt/orders/state", "s3a://ckpt/orders/state"),
        ("s3a://ckpt/orders", "s3a://ckpt/orders"),
        ("file:///data/ckpt/", "file:///data/ckpt"),
        ("/data/ckpt/./state", "file:///data/ckpt/state"),
        ("rel/state", f"file://{os.getcwd()}/rel/state"),
    ],
)
def test_to_spark_uri(uri: str, expected: str) -> None:
    assert to_spark_uri(uri) == expected


def test_s3_options_from_env_prefers_the_s3_specific_endpoint() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://generic:1",
        "AWS_ENDPOINT_URL_S3": "http://s3:2",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }

    assert S3Options.from_env(env) == S3Options("http://s3:2", "eu-west-1")
    assert S3Options.from_env({}) == S3Options()


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-07T16:31:50.854Z",  # a listing's LastModified
        "2026-12-07T16:31:50Z",
        "2026-12-07T16:31:50.854000+00:00",
        "Mon, 07 Dec 2026 16:31:50 GMT",  # a HEAD's Last-Modified header
        "1765125110",  # epoch seconds
    ],
)
def test_the_clients_timestamp_parser_reads_as_botocores(text: str) -> None:
    """make_s3_client parses timestamps with the standard library where it can (a listing's
    LastModified through dateutil was most of a million-key listing's time): same moments."""
    from botocore.utils import parse_timestamp
    from sluice.storage.s3 import _timestamp

    ours = _timestamp(text)
    assert ours == parse_timestamp(text) and ours.utcoffset() is not None
    client = make_s3_client(endpoint_url="http://127.0.0.1:1")
    parser = client._endpoint._response_parser_factory.create_parser("rest-xml")
    assert parser._timestamp_parser is _timestamp
