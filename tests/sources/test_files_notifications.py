"""A files source told of new files by its store's events (``notifications``): a real
SeaweedFS sends its filer's events to the real test broker, and the source's plans read them
instead of listing the folder — a full listing the first time, every ``full_listing_every``
plans, and whenever the events it needs are gone. Then a pipeline over it, every record
exactly once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sluice.protocol import run_epoch, run_until_drained
from sluice.sources.files import FilesSource
from sluice.sources.files_read import ReadLog
from sluice.sources.store_events import StoreEvents
from sluice.spec import FilesSourceConfig, parse_spec
from sluice.storage import LocalObjectStore, S3ObjectStore

from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
    runtime,
)
from tests.fixtures.seaweed_events import SeaweedEvents, seaweed_events

__all__ = ["seaweed_events"]  # the fixture, for this module

# the AWS_* credentials both SeaweedFS servers take come with the session's S3 server
pytestmark = pytest.mark.usefixtures("s3_server")

SCHEMA = (("user", "string"), ("url", "string"), ("ts", "timestamp"), ("amount", "double"))
LINE = b'{"user": "u1", "url": "/", "ts": "2026-01-01T00:00:01Z", "amount": 1.0}\n'


class Lists:
    """Counts a store's LIST requests (botocore's own event hook on its client)."""

    def __init__(self, store: S3ObjectStore) -> None:
        self.calls = 0
        store._client.meta.events.register("before-call.s3.ListObjectsV2", self._count)

    def _count(self, **_: Any) -> None:
        self.calls += 1

    def since(self) -> int:
        calls, self.calls = self.calls, 0
        return calls


def events_source(
    events: SeaweedEvents, bucket: str, tmp_path: Path, **options: Any
) -> tuple[FilesSource, S3ObjectStore, Lists]:
    every = options.pop("full_listing_every", 3)
    notifications = {"topic": events.topic, "bootstrap_servers": events.kafka.bootstrap,
                     "full_listing_every": every}  # fmt: skip
    config = FilesSourceConfig(path=f"s3://{bucket}/in", format="jsonl", schema=SCHEMA,  # type: ignore[arg-type]
                               notifications=notifications, **options)  # fmt: skip
    store = S3ObjectStore(bucket, "in", endpoint_url=events.server.endpoint_url)
    log = ReadLog(LocalObjectStore(tmp_path / "ckpt"), "sources/source/files-read/")
    assert config.notifications is not None
    feed = StoreEvents(config.notifications, config.path, {})
    source = FilesSource(config, store, log=log, required=("ts",), events=feed)
    return source, store, Lists(store)


def new_bucket(events: SeaweedEvents) -> str:
    return events.server.bucket(f"landing-{uuid.uuid4().hex[:8]}")


def test_plans_read_the_events_and_list_only_every_few_plans(
    seaweed_events: SeaweedEvents, tmp_path: Path
) -> None:
    bucket = new_bucket(seaweed_events)
    src, store, lists = events_source(seaweed_events, bucket, tmp_path)
    for key in ("part-b.jsonl", "part-a.jsonl", "part-c.jsonl"):
        store.put(key, LINE)
    first = src.planning(1).plan_range(src.initial_offset(), None)
    assert first is not None and sorted(first.files) == [
        "part-a.jsonl",
        "part-b.jsonl",
        "part-c.jsonl",
    ]
    assert lists.since() == 1 and first.end.since_listing == 0  # the first plan lists
    store.put("part-0.jsonl", LINE)
    store.put("_SUCCESS", b"")  # hidden: never read, whatever tells of it
    second = src.planning(2).plan_range(first.end, None)
    assert second is not None and second.files == ("part-0.jsonl",)
    assert lists.since() == 0 and second.end.since_listing == 1  # from the events alone
    store.put("part-z.jsonl", LINE)
    third = src.planning(3).plan_range(second.end, None)
    assert third is not None and third.files == ("part-z.jsonl",) and lists.since() == 0
    # a watcher's look (is input waiting?) reads the events even when the next plan lists
    assert src.pending_units(third.end) == 0 and lists.since() == 0
    store.put("part-y.jsonl", LINE)
    fourth = src.planning(4).plan_range(third.end, None)
    assert fourth is not None and fourth.files == ("part-y.jsonl",)
    assert lists.since() == 1 and fourth.end.since_listing == 0  # every 3 plans


def test_events_the_broker_no_longer_holds_make_a_listing(
    seaweed_events: SeaweedEvents, tmp_path: Path
) -> None:
    bucket = new_bucket(seaweed_events)
    src, store, lists = events_source(seaweed_events, bucket, tmp_path, full_listing_every=100)
    store.put("a.jsonl", LINE)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None and first.end.events is not None
    store.put("b.jsonl", LINE)
    kafka, topic = seaweed_events.kafka, seaweed_events.topic
    kafka.delete_records(topic, kafka.end_offsets(topic))  # retention took them
    lists.since()
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == ("b.jsonl",) and lists.since() == 1


def test_a_cap_reads_the_same_events_again_until_every_file_is_taken(
    seaweed_events: SeaweedEvents, tmp_path: Path
) -> None:
    bucket = new_bucket(seaweed_events)
    src, store, lists = events_source(seaweed_events, bucket, tmp_path, full_listing_every=100,
                                      max_files_per_epoch=1)  # fmt: skip
    store.put("a.jsonl", LINE)
    offset = src.plan_range(src.initial_offset(), None).end  # type: ignore[union-attr]
    for key in ("c.jsonl", "b.jsonl", "d.jsonl"):
        store.put(key, LINE)
    taken = []
    lists.since()
    while (rng := src.plan_range(offset, None)) is not None:
        taken += rng.files
        offset = rng.end
    assert sorted(taken) == ["b.jsonl", "c.jsonl", "d.jsonl"] and lists.since() == 0


def test_a_file_changed_after_it_was_read_is_told_by_its_event(
    seaweed_events: SeaweedEvents, tmp_path: Path
) -> None:
    bucket = new_bucket(seaweed_events)
    src, store, _ = events_source(seaweed_events, bucket, tmp_path, full_listing_every=100)
    store.put("a.jsonl", LINE)
    first = src.plan_range(src.initial_offset(), None)
    assert first is not None
    store.put("a.jsonl", LINE * 2)
    second = src.plan_range(first.end, None)
    assert second is not None and second.files == () and [c.key for c in second.changed] == [
        "a.jsonl"]  # fmt: skip
    store.put("a.jsonl", LINE * 2)  # the same bytes again: the same file (ETag)
    assert src.plan_range(second.end, None) is None


def test_a_pipeline_on_events_reads_every_record_once(
    spark: Any, seaweed_events: SeaweedEvents, local_workspace: Workspace
) -> None:
    """Files land in an S3 bucket of the SeaweedFS that sends events; the pipeline's plans
    learn of them from the events (Spark reads that bucket through its own endpoint)."""
    from sluice.demo import render_click_files

    bucket = new_bucket(seaweed_events)
    server = seaweed_events.server
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set(f"fs.s3a.bucket.{bucket}.endpoint", server.endpoint_url)
    files = render_click_files(files=6, events_per_file=30, seed=59)
    body = click_spec_dict(local_workspace)
    notifications = {"topic": seaweed_events.topic,
                     "bootstrap_servers": seaweed_events.kafka.bootstrap}  # fmt: skip
    body["source"] |= {"path": f"s3://{bucket}/in", "max_files_per_epoch": 2,
                       "notifications": notifications}  # fmt: skip
    body["s3"] = {"endpoint_url": server.endpoint_url}  # the rest of the pipeline is local
    spec = parse_spec(body)
    store = S3ObjectStore(bucket, "in", endpoint_url=server.endpoint_url)
    rt = runtime(spec)
    for key, data in files[:3]:
        store.put(key, data)
    assert run_epoch(rt, spark) is not None
    for key, data in files[3:5]:
        store.put(key, data)
    run_until_drained(rt, spark)
    store.put(*files[5])
    assert run_epoch(rt, spark) is not None
    plans = [rt.repo.checkpoint(e).plan.source_range for e in rt.repo.committed_epochs()]
    assert sorted(k for p in plans for k in p["files"]) == sorted(k for k, _ in files)
    # a listing capped by max_files_per_epoch lists again (10: full_listing_every) until
    # what it found is read; then the events tell
    assert [p["end"].get("since_listing", 0) for p in plans] == [10, 10, 0, 1]
    assert_click_output_exact(spec, click_reference(files))
