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

import json
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
    """Each folder into its partition; returns (partition, offset) -> (file, line).

    The map is built from the topic as the broker holds it, read back, not from the delivery
    reports: the test first shows that every partition holds exactly its folder's lines, in
    file order, once each (a reordered or doubled record would change lateness, and the test
    would then blame the engine for the producer)."""
    records, origin = [], []
    for partition, folder in enumerate(FOLDERS):
        for key in sorted(k for k in FILES if k.split("/", 1)[0] == folder):
            for number, line in enumerate(FILES[key].split("\n"), start=1):
                if line.strip():
                    records.append(Record(line, partition=partition))
                    origin.append((partition, line.encode(), (key, number)))
    written = kafka.produce(topic, records)
    log = kafka.read_log(topic)
    where: dict[tuple[int, int], tuple[str, int]] = {}
    for partition in range(len(FOLDERS)):
        intended = [(value, at) for p, value, at in origin if p == partition]
        held = log[partition]
        values = [v for _, v in held]
        wanted = [v for v, _ in intended]
        first = next((i for i, (h, w) in enumerate(zip(values, wanted, strict=False)) if h != w),
                     min(len(values), len(wanted)))  # fmt: skip
        assert values == wanted, (
            f"partition {partition} holds {len(held)} records, not its folder's "
            f"{len(intended)} lines in order: first difference at index {first}"
        )
        where.update(
            {(partition, offset): at for (offset, _), (_, at) in zip(held, intended, strict=True)}
        )
    reported = {(w.partition, w.offset): at for w, (_, _, at) in zip(written, origin, strict=True)}
    assert reported == where, "the delivery reports and the broker's log disagree"
    return where


def _evidence(
    spec: Any,
    rt: Any,
    topic: str,
    origin: dict[tuple[int, int], tuple[str, int]],
    diffs: list[str],
    windows: set[tuple[str, datetime]],
) -> str:
    """For each differing window: every input line of its user and minute, where the broker
    holds it, which epoch planned it, and whether the engine wrote it late or dead."""
    back = {at: po for po, at in origin.items()}
    planned: dict[tuple[int, int], int] = {}
    marks = []
    for epoch in range(1, (rt.repo.latest_epoch() or 0) + 1):
        record = rt.repo.checkpoint(epoch)
        rng: Any = rt.source.decode_range(record.plan.source_range)
        for p, end in rng.ends[topic].items():
            for offset in range(rng.starts[topic][p], end):
                planned[(p, offset)] = epoch
        marks.append(
            f"epoch {epoch}: {dict(rng.starts[topic])}..{dict(rng.ends[topic])} "
            f"watermark after {record.result.watermark_us}"
        )
    late = {(r["source_file"], int(r["source_line"])) for r in committed_rows(spec, "late_records")}
    dead = {(d["file"], int(d["line"])) for d in committed_rows(spec, "dead_letters")}
    lines = [*diffs[:20]]
    for user, start in sorted(windows):
        lines.append(f"window {user} {start}:")
        for (key, number), (p, offset) in sorted(back.items()):
            try:
                row = json.loads(FILES[key].split("\n")[number - 1])
                ts = datetime.fromisoformat(str(row["ts"]).replace("Z", ""))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if row.get("user") != user or ts.replace(second=0, microsecond=0) != start:
                continue
            fate = (
                "late"
                if (f"kafka://{topic}/{p}", offset) in late
                else "dead"
                if (f"kafka://{topic}/{p}", offset) in dead
                else "in window"
            )
            lines.append(
                f"  {key}:{number} ts {ts} at {p}/{offset} epoch {planned.get((p, offset))} {fate}"
            )
    return "\n".join([*lines, *marks])


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
    # every planned offset was read, once (a plain topic: no control or aborted records)
    counts = [
        (o.checkpoint.epoch, o.checkpoint.result.stats.records_read,
         rt.source.decode_range(o.checkpoint.plan.source_range).units)
        for o in outcomes
    ]  # fmt: skip
    assert [read for _, read, _ in counts] == [planned for _, _, planned in counts], counts

    out = committed_rows(spec, "out")
    diffs = compare(out, ref.emitted, WINDOW_KEYS)
    if diffs:
        seen = {(r["user"], r["window_start"], r.get("n")) for r in out}
        wanted = {(r["user"], r["window_start"], r["n"]) for r in ref.emitted}
        odd = {(u, _naive(s)) for u, s, _ in seen ^ wanted}
        raise AssertionError(_evidence(spec, rt, topic, origin, diffs, odd))

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


def _naive(moment: Any) -> datetime:
    value = moment.to_pydatetime() if hasattr(moment, "to_pydatetime") else moment
    return value.replace(tzinfo=None) if value.tzinfo else value


def _us(moment: Any) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)
