"""Spark reads and writes ``s3a://`` on a real S3 server (SeaweedFS) through sluice.spark.

Needs the s3a jars (``make jars``) and the ``s3_server`` fixture (tests/fixtures/seaweed.py),
which points the standard AWS_* env vars at the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sluice.spark import configure_s3, s3a_conf, s3a_jars
from sluice.storage.s3options import S3Options

from tests.fixtures.pipelines import worker_session

pytestmark = [pytest.mark.timeout(600)]

# The bucket the other S3 tests share: on SeaweedFS every bucket is a collection that grows its
# own volumes, and the test server has room for only a few of them.
BUCKET = "sluice-tests"


@pytest.fixture(scope="module")
def s3a_spark(s3_server: Any) -> Iterator[Any]:
    if not s3a_jars():
        pytest.fail("the s3a jars are missing: run `make jars` (scripts/fetch-jars.sh)")
    session = worker_session("test-spark-s3a")
    # A session started earlier in this pytest run (before the S3 server existed) is reused
    # by getOrCreate; worker_session() has already re-applied the settings, this is explicit.
    configure_s3(session, None)
    yield session


@pytest.fixture
def prefix(s3_server: Any) -> str:
    """A fresh ``s3a://bucket/<unique>`` for one test."""
    return f"s3a://{s3_server.bucket(BUCKET)}/{uuid.uuid4().hex[:12]}"


def _keys(s3_server: Any, uri: str) -> list[str]:
    bucket, _, key_prefix = uri.removeprefix("s3a://").partition("/")
    client = s3_server.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix)
    return sorted(
        obj["Key"][len(key_prefix) + 1 :] for page in pages for obj in page.get("Contents", [])
    )


@pytest.mark.s3
@pytest.mark.spark
def test_parquet_round_trip_with_file_output_committer(
    s3a_spark: Any, s3_server: Any, prefix: str
) -> None:
    path = f"{prefix}/events"
    df = s3a_spark.range(0, 1000, numPartitions=4).selectExpr(
        "id", "id % 7 AS k", "concat('v', CAST(id AS STRING)) AS s"
    )
    df.write.parquet(path)

    keys = _keys(s3_server, path)
    assert "_SUCCESS" in keys, keys  # FileOutputCommitter's job commit ran to the end
    assert not [k for k in keys if k.startswith("_temporary")], keys  # and cleaned up
    assert len([k for k in keys if k.endswith(".parquet")]) == 4, keys

    back = s3a_spark.read.parquet(path)
    assert back.count() == 1000
    rows = {(r.id, r.k, r.s) for r in back.collect()}
    assert rows == {(i, i % 7, f"v{i}") for i in range(1000)}

    # Overwrite replaces the committed files (a delete + a new commit on S3).
    s3a_spark.range(5).write.mode("overwrite").parquet(path)
    assert sorted(r.id for r in s3a_spark.read.parquet(path).collect()) == [0, 1, 2, 3, 4]


@pytest.mark.s3
@pytest.mark.spark
def test_text_write_and_wholetext_read(s3a_spark: Any, s3_server: Any, prefix: str) -> None:
    lines_path = f"{prefix}/lines"
    s3a_spark.createDataFrame([("alpha",), ("beta",), ("gamma",)], "value STRING").coalesce(
        1
    ).write.text(lines_path)
    assert sorted(r.value for r in s3a_spark.read.text(lines_path).collect()) == [
        "alpha",
        "beta",
        "gamma",
    ]

    # Objects written by someone else (boto3), read one row per object with wholetext=True.
    docs_path = f"{prefix}/docs"
    bucket, _, key_prefix = docs_path.removeprefix("s3a://").partition("/")
    docs = {"a.json": '{"x": 1}\n{"x": 2}\n', "b.json": "", "c.json": "no newline at end"}
    client = s3_server.client()
    for name, body in docs.items():
        client.put_object(Bucket=bucket, Key=f"{key_prefix}/{name}", Body=body.encode())

    whole = s3a_spark.read.text(docs_path, wholetext=True).selectExpr(
        "value", "input_file_name() AS file"
    )
    got = {r.file.rsplit("/", 1)[-1]: r.value for r in whole.collect()}
    # Spark lists no split for an empty file (on local disk too), so it yields no row.
    assert got == {name: body for name, body in docs.items() if body}

    one = s3a_spark.read.text(f"{docs_path}/a.json", wholetext=True).collect()
    assert [r.value for r in one] == [docs["a.json"]]


@pytest.mark.s3
@pytest.mark.spark
def test_s3_scheme_is_served_by_s3a(s3a_spark: Any, s3_server: Any, prefix: str) -> None:
    s3_path = prefix.replace("s3a://", "s3://", 1) + "/via-s3"
    s3a_spark.range(10).write.parquet(s3_path)
    assert s3a_spark.read.parquet(s3_path).count() == 10
    assert s3a_spark.read.parquet(s3_path.replace("s3://", "s3a://", 1)).count() == 10


def test_s3a_conf_from_options_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9999")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")

    from_env = s3a_conf(None)
    assert from_env["fs.s3a.endpoint"] == "http://127.0.0.1:9999"
    assert from_env["fs.s3a.endpoint.region"] == "eu-west-3"
    assert from_env["fs.s3a.connection.ssl.enabled"] == "false"
    assert from_env["fs.s3a.path.style.access"] == "true"
    assert from_env["fs.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "AKIDEXAMPLE" not in str(from_env)
    assert "do-not-leak" not in str(from_env)
    assert not [k for k in from_env if "key" in k.lower() or "secret" in k.lower()]

    # Explicit options win; a field left None falls back to the env, as with boto3.
    tls = s3a_conf(S3Options(endpoint_url="https://s3.example.test"))
    assert tls["fs.s3a.endpoint"] == "https://s3.example.test"
    assert tls["fs.s3a.connection.ssl.enabled"] == "true"
    assert tls["fs.s3a.endpoint.region"] == "eu-west-3"

    for name in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    aws = s3a_conf(S3Options())
    assert "fs.s3a.endpoint" not in aws  # AWS S3 itself
    assert "fs.s3a.connection.ssl.enabled" not in aws
    assert aws["fs.s3a.endpoint.region"] == "us-east-1"


@pytest.mark.s3
@pytest.mark.spark
def test_s3a_opens_files_with_the_classic_stream(
    s3a_spark: Any, s3_server: Any, prefix: str
) -> None:
    """hadoop-aws 3.5's default analytics stream keeps each opened stream's statistics for the
    JVM's lifetime (a warm server's heap grew with it); Sluice opens S3 files with the classic
    stream (sluice.spark.S3A_STREAM_CONF)."""
    path = f"{prefix}/stream"
    s3a_spark.range(100).write.parquet(path)
    jvm = s3a_spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(s3a_spark.sparkContext._jsc.hadoopConfiguration())
    assert fs.getConf().get("fs.s3a.input.stream.type") == "classic"
    part = next(s.getPath() for s in fs.listStatus(hadoop_path)
                if s.getPath().getName().endswith(".parquet"))  # fmt: skip
    stream = fs.open(part)
    try:
        assert stream.read() >= 0
        inner = stream.getWrappedStream().getClass().getName()
    finally:
        stream.close()
    assert inner == "org.apache.hadoop.fs.s3a.S3AInputStream", inner
    assert s3a_spark.read.parquet(path).count() == 100
