"""Kafka -> window -> files against the same pipeline over files, same records.

    .venv/bin/python bench/kafka_throughput.py [--events 1000000] [--epochs 5] [--partitions 3]

The click events (the demo generator) are produced to a topic of ``--partitions`` partitions
on a single-node KRaft broker started here (tests/fixtures/kafka.py, loopback), keyed by user,
and written as JSON-lines files (one file per ``--events / (2 * --epochs)`` events). The click
pipeline (tumbling 1-minute windows, results as Parquet, qos 2, local checkpoints) then runs
to the end once over the topic (``max_records_per_epoch = events / epochs``) and once over the
files (two files per epoch): the same epochs, the same windows. Prints a markdown table
(and writes bench/results/kafka.md): seconds, events/s, seconds per epoch; the window counts
must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    args = _parser().parse_args()
    from confluent_kafka import Producer
    from sluice.demo import render_click_files
    from sluice.protocol import run_until_drained
    from sluice.spark import spark_session
    from sluice.spec import parse_spec

    from tests.fixtures.kafka import start_kafka
    from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

    per_file = args.events // (2 * args.epochs)
    files = render_click_files(files=2 * args.epochs, events_per_file=per_file, seed=7,
                               late_every=0)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="sluice-kafka-bench-"))
    kafka = start_kafka(tmp / "kafka")
    try:
        topic = kafka.create_topic(f"clicks-{uuid.uuid4().hex[:6]}", args.partitions)
        producer = Producer({
            "bootstrap.servers": kafka.bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
        })  # fmt: skip
        started = time.perf_counter()
        records = 0
        for _, data in files:
            for line in data.splitlines():
                if not line.strip():
                    continue
                try:
                    key = json.loads(line).get("user")
                except (ValueError, AttributeError):
                    key = None
                while True:
                    try:
                        producer.produce(topic, line, key if isinstance(key, str) else None)
                        break
                    except BufferError:
                        producer.poll(0.1)
                records += 1
        producer.flush(120)
        del producer  # closed before the broker stops (it would retry and log refusals)
        produce_s = time.perf_counter() - started
        spark = spark_session("sluice-kafka-bench")
        rows = []
        for label in ("warm-up", "files", "kafka"):  # warm-up: JIT and Spark's first jobs
            ws = Workspace("local", (tmp / label).as_uri())
            body = click_spec_dict(ws, name=f"bench_{label.replace('-', '_')}", emit="on_close")
            if label == "warm-up":
                ws.put_files(files[:1])
            elif label == "files":
                ws.put_files(files)
                body["source"]["max_files_per_epoch"] = 2
            else:
                body["source"] = {"type": "kafka", "topics": [topic],
                                  "bootstrap_servers": kafka.bootstrap,
                                  "schema": body["source"]["schema"],
                                  "max_records_per_epoch": -(-records // args.epochs)}  # fmt: skip
            rt = runtime(parse_spec(body))
            started = time.perf_counter()
            outcomes = run_until_drained(rt, spark)
            seconds = time.perf_counter() - started
            stats = [o.checkpoint.result.stats for o in outcomes]
            if label == "warm-up":
                continue
            rows.append({
                "source": label, "epochs": len(outcomes), "seconds": seconds,
                "read": sum(s.records_read for s in stats),
                "windows": sum(s.windows_emitted for s in stats),
            })  # fmt: skip
        spark.stop()
    finally:
        kafka.stop()
    if rows[0]["windows"] != rows[1]["windows"] or rows[0]["read"] != rows[1]["read"]:
        print(f"MISMATCH: {rows}", file=sys.stderr)
        return 1
    _report(args, rows, records, produce_s)
    return 0


def _report(args: Any, rows: list[dict[str, Any]], records: int, produce_s: float) -> None:
    cores = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = f"bench/kafka_throughput.py --events {args.events} --epochs {args.epochs} " \
              f"--partitions {args.partitions}"  # fmt: skip
    lines = [
        "# Kafka source throughput against the files source",
        "",
        f"`{command}` on {platform.machine()}, {cores} cores, {memory:.0f} GiB, {when}; "
        f"{records:,} records produced in {produce_s:.1f} s (not counted below); click "
        "pipeline, tumbling 1-minute windows, Parquet results, qos 2, local Spark "
        "(local[*]), checkpoints on local disk.",
        "",
        "| source | epochs | records read | windows | seconds | events/s | s/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['source']} | {r['epochs']} | {r['read']:,} | {r['windows']:,} | "
            f"{r['seconds']:.1f} | {r['read'] / r['seconds']:,.0f} | "
            f"{r['seconds'] / r['epochs']:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "bench" / "results" / "kafka.md"
    out.write_text(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=3)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
