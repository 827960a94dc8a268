"""A keyed process function against the same logic in built-in aggregates.

    .venv/bin/python bench/keyed_state.py [--keys 100000] [--records 1000000] [--epochs 2]

The logic: per key, tumbling 1-minute windows with count and sum, emitted when the watermark
passes the window's end. Three pipelines over the same Parquet input (``--records`` records
over ``--keys`` keys, event time advancing one second per ``keys / 20`` records):

* ``windows``: ``window: {type: tumbling, size: 1m}`` with ``count(*)`` and ``sum(value)``;
* ``process (each)``: a process function iterating ``ctx.each`` record by record, window
  partials in a MapState, one timer per window end;
* ``process (vectorised)``: the same function computing the epoch's partials with pandas
  ``groupby`` instead of a Python loop over records.

Each runs ``--epochs`` epochs of equal size in one local[2] Spark session (a warm-up run on a
small input first). Prints a markdown table (and writes bench/results/keyed_state.md) with the
median process-step seconds per epoch, records/s, and the output rows (equal across the three:
checked before the times count).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FUNCTIONS = """
import pandas as pd

MINUTE = 60_000_000


def each(ctx, records):
    windows = ctx.state("windows")
    for r in ctx.each(records):
        start = ctx.timestamp.value // 1000 // MINUTE * MINUTE
        w = windows.get(start) or {"c": 0, "s": 0}
        windows.put(start, {"c": w["c"] + 1, "s": w["s"] + int(r.value)})
        ctx.timers.register(start + MINUTE)


def vectorised(ctx, records):
    windows = ctx.state("windows")
    # microseconds whatever unit pandas gave the column (pyarrow keeps Arrow's "us")
    starts = records["ts"].dt.as_unit("us").astype("int64") // MINUTE * MINUTE
    grouped = records.assign(start=starts.to_numpy()).groupby("start")["value"]
    for start, count, total in zip(grouped.size().index, grouped.size(), grouped.sum()):
        old = windows.get(int(start)) or {"c": 0, "s": 0}
        windows.put(int(start), {"c": old["c"] + int(count), "s": old["s"] + int(total)})
        ctx.timers.register(int(start) + MINUTE)


def fire(ctx, when):
    windows = ctx.state("windows")
    start = when.value // 1000 - MINUTE
    w = windows.get(start)
    windows.remove(start)
    yield {"user": ctx.key, "window_start": pd.Timestamp(start * 1000, tz="UTC"),
           "clicks": w["c"], "total": w["s"]}
"""


def main() -> int:
    args = _parser().parse_args()
    from sluice.spark import spark_session

    tmp = Path(tempfile.mkdtemp(prefix="sluice-keyed-bench-"))
    (tmp / "functions.py").write_text(FUNCTIONS)
    spark = spark_session("sluice-keyed-bench")
    rows = []
    try:
        _input(tmp / "warm", 2_000, 200, args.epochs)
        _input(tmp / "data", args.records, args.keys, args.epochs)
        outputs = {}
        for variant in ("windows", "process (each)", "process (vectorised)"):
            _run(spark, tmp, tmp / "warm", variant, args.epochs)
            seconds, emitted = _run(spark, tmp, tmp / "data", variant, args.epochs)
            outputs[variant] = emitted
            per_epoch = statistics.median(seconds)
            rows.append((variant, per_epoch, args.records / args.epochs / per_epoch, emitted))
            print(f"{variant}: {per_epoch:.1f} s/epoch", file=sys.stderr)
        if len(set(outputs.values())) != 1:
            raise SystemExit(f"outputs differ: {outputs}")
    finally:
        spark.stop()
    text = _table(rows, args)
    print(text)
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "keyed_state.md").write_text(text + "\n")
    return 0


def _input(folder: Path, records: int, keys: int, epochs: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    (folder / "in").mkdir()
    rng = np.random.default_rng(1)
    n = np.arange(records)
    per_second = max(1, keys // 20)
    ts = (1_700_000_000 * 1_000_000 + (n // per_second) * 1_000_000).astype("datetime64[us]")
    table = pa.table({
        "user": pa.array([f"u{k}" for k in rng.integers(0, keys, records)]),
        "value": pa.array(rng.integers(1, 100, records)),
        "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC")),
    })  # fmt: skip
    per_epoch = records // epochs
    for e in range(epochs):
        pq.write_table(table.slice(e * per_epoch, per_epoch), folder / "in" / f"{e:04d}.parquet")


def _spec(tmp: Path, data: Path, variant: str, run: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "bench",
        "source": {
            "type": "files",
            "path": str(data / "in"),
            "format": "parquet",
            "schema": {"user": "string", "value": "long", "ts": "timestamp"},
            "max_files_per_epoch": 1,
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "0s"},
        "key_by": ["user"],
        "sinks": [{"name": "out", "type": "files", "path": str(tmp / run / "out")}],
        "checkpoint": {"storage": str(tmp / run / "ckpt")},
    }
    if variant == "windows":
        body["window"] = {"type": "tumbling", "size": "1m"}
        body["aggregates"] = {"clicks": "count(*)", "total": "sum(value)"}
    else:
        body["process"] = {
            "function": "functions:" + ("each" if "each" in variant else "vectorised"),
            "on_timer": "functions:fire",
            "state": {
                "windows": {"kind": "map", "key_type": "long", "type": "struct<c: long, s: long>"}
            },
            "output": {
                "user": "string",
                "window_start": "timestamp",
                "clicks": "long",
                "total": "long",
            },
        }
    return body


def _run(spark: Any, tmp: Path, data: Path, variant: str, epochs: int) -> tuple[list[float], int]:
    import yaml
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    run = f"run-{time.monotonic_ns()}"
    path = tmp / f"{run}.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp, data, variant, run)))
    rt = runtime(load_spec(path))
    seconds, emitted = [], 0
    while (plan := plan_epoch(rt)) is not None:
        started = time.perf_counter()
        record = process_epoch(rt, spark, plan.epoch)
        seconds.append(time.perf_counter() - started)
        checkpoint = commit_epoch(rt, plan.epoch, record.attempt)
        emitted += checkpoint.result.stats.windows_emitted
    assert len(seconds) == epochs, seconds
    return seconds, emitted


def _table(rows: list[tuple[str, float, float, int]], args: argparse.Namespace) -> str:
    lines = [
        f"keyed state: {args.records:,} records over {args.keys:,} keys in {args.epochs} epochs, "
        f"tumbling 1-minute count+sum per key; local[2]; {os.cpu_count()} cores, "
        f"{_memory_gib()} GiB, Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}; "
        f"command: .venv/bin/python bench/keyed_state.py --keys {args.keys} "
        f"--records {args.records} --epochs {args.epochs}",
        "",
        "| pipeline | process s/epoch (median) | records/s | rows emitted |",
        "|---|---|---|---|",
    ]
    for variant, seconds, rate, emitted in rows:
        lines.append(f"| {variant} | {seconds:.1f} | {rate:,.0f} | {emitted:,} |")
    return "\n".join(lines)


def _memory_gib() -> int:
    with open("/proc/meminfo") as f:
        return round(int(f.readline().split()[1]) / 1024 / 1024)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=2)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
