"""The kafka source against a real broker (tests/fixtures/kafka.py: one KRaft node).

Click events (the demo generator, no deliberately late lines) go to a topic of 3 partitions,
keyed by user; the pipeline runs epochs of at most 70 records while more is produced between
epochs, a 4th partition is added mid-run, and a last "flush" record per partition moves every
watermark past the real windows. The committed windows equal the reference over everything
produced; every record is read exactly once (per-epoch counts add up to what was produced,
and no epoch's range overlaps another's). A rewind whose input the broker has since deleted
is refused naming topic, partition and offsets; ``on_missing_offsets: earliest`` continues.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sluice.demo import render_click_files
from sluice.protocol import InvalidRunRequest, RunRequest, plan_epoch, run_until_drained
from sluice.sources.parsing import NOT_AN_OBJECT, NOT_UTF8, TRAILING_TEXT
from sluice.spec import SpecError, parse_spec

from tests.fixtures.kafka import KafkaServer, Record
from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=4, events_per_file=60, seed=23, late_every=0)
KEYS = ["user", "window_start"]
FLUSH_TS = "2030-01-01T00:00:00Z"
TS = "2026-01-01T00:00:01Z"


def _records(files: list[tuple[str, bytes]]) -> list[Record]:
    """One record per non-blank line, keyed by its user (when the line has one)."""
    out = []
    for _, data in files:
        for line in data.decode().splitlines():
            if not line.strip():
                continue
            try:
                user = json.loads(line).get("user")
            except (ValueError, AttributeError):
                user = None
            out.append(Record(line, key=user if isinstance(user, str) else None))
    return out


def _flush(partitions: int) -> tuple[list[Record], tuple[str, bytes]]:
    lines = [json.dumps({"user": f"flush-{p}", "url": "/", "ts": FLUSH_TS, "amount": 0.0})
             for p in range(partitions)]  # fmt: skip
    records = [Record(line, key=f"flush-{p}", partition=p) for p, line in enumerate(lines)]
    return records, ("flush.jsonl", ("\n".join(lines) + "\n").encode())


def _spec_dict(ws: Any, kafka: KafkaServer, topic: str, **source: Any) -> dict[str, Any]:
    body = click_spec_dict(ws, name=f"k_{topic.replace('-', '_')}", emit="on_close")
    body["source"] = {
        "type": "kafka",
        "topics": [topic],
        "bootstrap_servers": kafka.bootstrap,
        "schema": body["source"]["schema"],
        "max_records_per_epoch": 70,
        **source,
    }
    return body


def _spec(ws: Any, kafka: KafkaServer, topic: str, **source: Any) -> Any:
    return parse_spec(_spec_dict(ws, kafka, topic, **source))


def test_epochs_over_a_growing_topic_equal_the_reference(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    topic = kafka_server.create_topic(f"clicks-{uuid.uuid4().hex[:6]}", partitions=3)
    spec = _spec(local_workspace, kafka_server, topic)
    rt = runtime(spec)
    produced = kafka_server.produce(topic, _records(FILES[:2]))
    run_until_drained(rt, spark, max_epochs=2)
    kafka_server.add_partitions(topic, 4)
    produced += kafka_server.produce(topic, _records(FILES[2:]))
    assert any(w.partition == 3 for w in produced), "the new partition got records"
    flush, flush_file = _flush(4)
    produced += kafka_server.produce(topic, flush)
    run_until_drained(rt, spark)

    checkpoints = [rt.repo.checkpoint(e) for e in rt.repo.committed_epochs()]
    assert len(checkpoints) >= len(produced) // 70
    assert sum(c.result.stats.records_read for c in checkpoints) == len(produced)
    seen: set[tuple[str, int, int]] = set()
    for c in checkpoints:
        rng = rt.source.decode_range(c.plan.source_range)
        for t, parts in rng.starts.items():
            for p, lo in parts.items():
                span = {(t, p, o) for o in range(lo, rng.ends[t][p])}
                assert not span & seen, f"epoch {c.epoch} re-reads {t}:{p}"
                seen |= span
    assert seen == {(topic, w.partition, w.offset) for w in produced}
    first_with_3 = rt.source.decode_range(checkpoints[2].plan.source_range)
    assert first_with_3.starts[topic].get(3) == 0  # the new partition from its earliest offset

    want = click_reference([*FILES, flush_file])
    assert compare_rows(committed_rows(spec, "out"), want.emitted, keys=KEYS) == []
    dead = committed_rows(spec, "dead_letters")
    assert len(dead) == len(want.dead)
    assert all(d["file"].startswith(f"kafka://{topic}/") for d in dead)
    assert committed_rows(spec, "late_records") == []


def test_a_rewind_into_deleted_offsets_is_refused_by_name_unless_earliest(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    topic = kafka_server.create_topic(f"retained-{uuid.uuid4().hex[:6]}", partitions=1)
    spec = _spec(local_workspace, kafka_server, topic, max_records_per_epoch=40)
    rt = runtime(spec)
    kafka_server.produce(topic, _records(FILES[:2]))
    run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() >= 3
    end_1 = rt.repo.checkpoint(1).end_offset["next"][topic]["0"]  # type: ignore[union-attr]
    kafka_server.delete_records(topic, {0: end_1 + 5})  # retention took 5 unread records

    def rewind(conf: dict[str, Any]) -> Any:
        options = RunRequest.from_conf(rt.name, conf).resolve(rt)
        return plan_epoch(rt, restored_from=options.restored_from, rewind_to=options.rewind_to)

    before = sorted(i.key for i in rt.repo.store.list())
    with pytest.raises(InvalidRunRequest) as refused:
        rewind({"restore_from": "checkpoint", "epoch": 1})
    message = str(refused.value)
    assert f"topic {topic} partition 0 offsets {end_1}..{end_1 + 4}" in message
    assert "on_missing_offsets=earliest" in message
    assert sorted(i.key for i in rt.repo.store.list()) == before

    # The request's on_missing_offsets is enough: the spec still says fail.
    options = RunRequest.from_conf(
        rt.name, {"restore_from": "checkpoint", "epoch": 1, "on_missing_offsets": "earliest"}
    ).resolve(rt)
    plan = options.plan(rt)
    assert plan is not None
    assert plan.source_range["gaps"] == [[topic, 0, end_1, end_1 + 5]]
    run_until_drained(rt, spark)
    total = sum(rt.repo.checkpoint(e).result.stats.records_read  # type: ignore[union-attr]
                for e in rt.repo.committed_epochs() if e not in rt.repo.rewound())  # fmt: skip
    assert total == kafka_server.end_offsets(topic)[0] - 5


def test_key_timestamp_and_headers_become_columns(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    topic = kafka_server.create_topic(f"meta-{uuid.uuid4().hex[:6]}", partitions=2)
    base_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    kafka_server.produce(topic, [
        Record({"url": "/a", "amount": 1.5}, key="ann", partition=0, timestamp_ms=base_ms,
               headers={"region": "eu"}),
        Record("{not json", key="bob", partition=1, timestamp_ms=base_ms + 1_500),
        Record({"url": "/b", "amount": 2}, key="cy", partition=1, timestamp_ms=base_ms + 61_000),
    ])  # fmt: skip
    body = _spec_dict(local_workspace, kafka_server, topic)
    body["source"]["schema"] = {
        "user": "string", "url": "string", "ts": "timestamp", "amount": "double",
        "region": "string", "part": "int",
    }  # fmt: skip
    body["source"]["metadata"] = {"user": "key", "ts": "timestamp", "region": "header:region",
                                  "part": "partition"}  # fmt: skip
    rt = runtime(parse_spec(body))
    rng = rt.source.plan_range(rt.source.initial_offset(), None)
    assert rng is not None and rng.units == 3
    rows = sorted(rt.source.read(spark, rng).collect(), key=lambda r: (r["_partition"], r["_line"]))
    got = [(r["_partition"], r["_file"], r["_line"], r["user"], str(r["ts"]), r["region"],
            r["part"], r["amount"], (r["_error"] or "")[:9]) for r in rows]  # fmt: skip
    assert got == [
        (f"{topic}:0", f"kafka://{topic}/0", 0, "ann", "2026-01-01 00:00:00", "eu", 0, 1.5, ""),
        # a malformed value is a dead letter; the record's own fields are still shown
        (
            f"{topic}:1",
            f"kafka://{topic}/1",
            0,
            "bob",
            "2026-01-01 00:00:01.500000",
            None,
            1,
            None,
            "malformed",
        ),
        (f"{topic}:1", f"kafka://{topic}/1", 1, "cy", "2026-01-01 00:01:01", None, 1, 2.0, ""),
    ]


def test_raw_values_are_decoded_by_the_users_expressions(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    topic = kafka_server.create_topic(f"raw-{uuid.uuid4().hex[:6]}", partitions=1)
    kafka_server.produce(topic, [Record(b"ann|2026-01-01T00:00:05Z|1.5", key="k1"),
                                 Record(b"\xff\xfe", key="k2")])  # fmt: skip
    body = _spec_dict(local_workspace, kafka_server, topic)
    part = "split(cast(value as string), '[|]')"
    body["source"].update(format="raw", metadata={"url": "key"}, decode={
        "user": f"get({part}, 0)", "ts": f"get({part}, 1)", "amount": f"get({part}, 2)",
    })  # fmt: skip
    rt = runtime(parse_spec(body))
    rng = rt.source.plan_range(rt.source.initial_offset(), None)
    assert rng is not None
    rows = sorted(rt.source.read(spark, rng).collect(), key=lambda r: r["_line"])
    assert [(r["user"], str(r["ts"]), r["amount"], r["url"], r["_error"]) for r in rows] == [
        ("ann", "2026-01-01 00:00:05", 1.5, "k1", None),
        ("\ufffd\ufffd", "None", None, "k2", "missing_event_time: field 'ts' is absent or null"),
    ]
    assert rows[1]["_raw"] == "//4="  # the undecodable value, in base64
    bad = dict(body["source"], decode={"nope": "value"})
    with pytest.raises(SpecError) as refused:
        parse_spec(dict(body, source=bad))
    fields = {p.field for p in refused.value.problems}
    assert {"source.decode", "source.decode.nope"} <= fields


def test_values_are_held_to_the_json_lines_rules(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer
) -> None:
    """A value must be valid UTF-8 and exactly one JSON object, as a line of a file; each
    malformed one is a dead letter with the files' reason, in the files' order (UTF-8, then
    not an object, then text after it); the good records are read as they are."""
    topic = kafka_server.create_topic(f"rules-{uuid.uuid4().hex[:6]}", partitions=1)

    def click(user: str, amount: float) -> bytes:
        fields = {"user": user, "url": "/", "ts": TS, "amount": amount}
        return json.dumps(fields, ensure_ascii=False).encode()

    values: list[tuple[bytes | None, str | None]] = [
        (click("ann", 1.0), None),
        (click("caf\u00e9", 2.0).replace(b"\xc3\xa9", b"\xe9"), NOT_UTF8),  # Latin-1
        (click("bob", 3.0) + b" xyz", TRAILING_TEXT),
        (click("cy", 4.0) + b" " + click("dee", 5.0), TRAILING_TEXT),  # two objects
        (click("eve", 6.0) + b" \t\r\n", None),  # JSON whitespace may follow
        (click("fay", 7.0).replace(b"fay", b"f\xc0\xafy"), NOT_UTF8),  # an overlong '/'
        (click("gus", 8.0).replace(b"gus", b"g\xed\xa0\x80s"), NOT_UTF8),  # a surrogate
        (click("hal", 9.0) + b" \xff", NOT_UTF8),  # bad bytes and text after: UTF-8 first
        (b"[1] x", NOT_AN_OBJECT),  # not an object, and text after: not an object first
        (None, NOT_AN_OBJECT),  # a tombstone, as before
        (click("ida", 10.0), None),
    ]
    kafka_server.produce(topic, [Record(v, partition=0) for v, _ in values])
    spec = _spec(local_workspace, kafka_server, topic)
    rt = runtime(spec)
    rng = rt.source.plan_range(rt.source.initial_offset(), None)
    assert rng is not None and rng.units == len(values)

    rows = sorted(rt.source.read(spark, rng).collect(), key=lambda r: r["_line"])
    shown = [None if v is None else v.decode("utf-8", errors="replace") for v, _ in values]
    assert [(r["_line"], r["_error"], r["_raw"]) for r in rows] == [
        (offset, reason, shown[offset]) for offset, (_, reason) in enumerate(values)
    ]
    good = [(r["_line"], r["user"], r["url"], str(r["ts"]), r["amount"]) for r in rows
            if r["_error"] is None]  # fmt: skip
    assert good == [(0, "ann", "/", "2026-01-01 00:00:01", 1.0),
                    (4, "eve", "/", "2026-01-01 00:00:01", 6.0),
                    (10, "ida", "/", "2026-01-01 00:00:01", 10.0)]  # fmt: skip

    run_until_drained(rt, spark)
    dead = sorted(committed_rows(spec, "dead_letters"), key=lambda d: d["line"])
    assert [(d["file"], d["line"], d["reason_code"], d["reason"], d["raw"]) for d in dead] == [
        (f"kafka://{topic}/0", offset, "malformed", reason.removeprefix("malformed: "),
         shown[offset] or "{}")  # a tombstone has no text: its (null) columns as JSON
        for offset, (_, reason) in enumerate(values) if reason is not None
    ]  # fmt: skip
    checkpoint = rt.repo.latest_checkpoint()
    assert checkpoint is not None and checkpoint.result.stats.dead == 8
