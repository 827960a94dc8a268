"""Per-partition watermarks and the idle-partition rule over Kafka partitions (issue #8, point 4).

The windows test input (tests/windows/data.py: folders a, b, c, where c goes idle after its
first file; out-of-order, allowed-late and too-late records, dead letters) is produced folder
by folder into the partitions 0, 1, 2 of one topic, each folder's lines in file order. A Kafka
partition is then exactly a folder of the files source, so the independent DuckDB reference
over the folders (``partition_by: directory``) is also the reference for the topic: the
windows, the late rows (mapped back from offsets to file and line) and the dead letters must
equal it, over epochs of at most 120 records spread over the partitions.

The input is checked to make the rule matter: the same input as one partition gives other late
records, and without ``idle_timeout`` partition 2 holds back windows the reference closes.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.kafka import KafkaServer, Record
from tests.fixtures.pipelines import committed_rows, runtime
from tests.windows.data import EVENT_TIME, SCHEMA, make_files
from tests.windows.reference import compare, compute

FILES = make_files(7, files_per_partition=4)
FOLDERS = sorted({key.split("/", 1)[0] for key in FILES})
WINDOW_KEYS = ["user", "window_start", "window_end"]
AGGREGATES = {
    "n": "count(*)",
    "total": "sum(amount)",
    "lo": "min(amount)",
    "hi": "max(amount)",
    "first_url": "first(url)",
    "last_url": "last(url)",
}


def _body(source: dict[str, Any], event_time: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "kafka_watermarks",
        "source": {"schema": dict(SCHEMA), **source},
        "event_time": dict(EVENT_TIME if event_time is None else event_time),
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": dict(AGGREGATES),
        "emit": "on_close",
        "sinks": [{"name": "out", "type": "files", "path": "/unused", "format": "parquet"}],
    }


def _reference(**options: Any) -> Any:
    event_time = options.pop("event_time", None)
    files_source = {"type": "files", "path": "/unused", "format": "jsonl", **options}
    return compute(_body(files_source, event_time), FILES)


def _produce(kafka: KafkaServer, topic: str) -> dict[tuple[int, int], tuple[str, int]]:
    """Each folder into its partition; returns (partition, offset) -> (file, line)."""
    records, origin = [], []
    for partition, folder in enumerate(FOLDERS):
        for key in sorted(k for k in FILES if k.split("/", 1)[0] == folder):
            for number, line in enumerate(FILES[key].split("\n"), start=1):
                if line.strip():
                    records.append(Record(line, partition=partition))
                    origin.append((key, number))
    written = kafka.produce(topic, records)
    return {(w.partition, w.offset): where for w, where in zip(written, origin, strict=True)}


def test_kafka_partitions_have_their_own_watermarks_and_go_idle_like_folders(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    ref = _reference(partition_by="directory")
    # What this test is about is in the input.
    assert ref.idle_partitions == ("c",), ref.idle_partitions
    assert ref.counts["late"] > 0 and ref.emitted
    as_one_stream = _reference()
    assert as_one_stream.counts["late"] > ref.counts["late"]
    never_idle = {k: v for k, v in EVENT_TIME.items() if k != "idle_timeout"}
    no_idle = _reference(partition_by="directory", event_time=never_idle)
    assert len(no_idle.emitted) < len(ref.emitted)

    topic = kafka_server.create_topic(f"wm-{uuid.uuid4().hex[:6]}", partitions=len(FOLDERS))
    origin = _produce(kafka_server, topic)
    ws = local_workspace
    body = _body({"type": "kafka", "topics": [topic], "bootstrap_servers": kafka_server.bootstrap,
                  "max_records_per_epoch": 120})  # fmt: skip
    body.update(
        sinks=[{"name": "out", "type": "files", "path": ws.uri("out"), "format": "parquet"}],
        late_records={"type": "files", "path": ws.uri("late"), "format": "parquet"},
        dead_letters={"type": "files", "path": ws.uri("dead"), "format": "parquet"},
        checkpoint={"storage": ws.uri("ckpt")},
    )
    spec = parse_spec(body)
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark)
    assert len(outcomes) >= len(origin) // 120  # several epochs, each cut across partitions
    first = rt.source.decode_range(outcomes[0].checkpoint.plan.source_range)
    assert all(first.ends[topic][p] > 0 for p in range(len(FOLDERS)))

    diffs = compare(committed_rows(spec, "out"), ref.emitted, WINDOW_KEYS)
    assert diffs == [], "\n".join(diffs[:20])

    def where(row: dict[str, Any], file: str, line: str) -> tuple[str, int]:
        prefix = f"kafka://{topic}/"
        assert row[file].startswith(prefix), row[file]
        return origin[(int(row[file][len(prefix) :]), int(row[line]))]

    late = []
    for row in committed_rows(spec, "late_records"):
        row = dict(row)
        row["source_file"], row["source_line"] = where(row, "source_file", "source_line")
        late.append({k: row[k] for k in ref.late[0]})
    diffs = compare(late, ref.late, ["source_file", "source_line", "window_start"])
    assert diffs == [], "\n".join(diffs[:20])
    dead = sorted((*where(d, "file", "line"), d["reason_code"])
                  for d in committed_rows(spec, "dead_letters"))  # fmt: skip
    assert dead == sorted((d["source_file"], d["source_line"], d["reason_code"]) for d in ref.dead)
    final = rt.repo.checkpoint(rt.repo.latest_epoch()).result  # type: ignore[union-attr]
    maxima = final.watermark.max_event_time_us
    assert sorted(maxima) == [f"{topic}:{p}" for p in range(len(FOLDERS))]
    assert {f"{topic}:{FOLDERS.index(f)}": _us(t) for f, t in ref.partition_max.items()} == maxima
    assert final.watermark_us == _us(ref.final_watermark)


def _us(moment: Any) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)
