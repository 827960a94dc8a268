"""A keyed process function against the same logic in built-in aggregates.

    .venv/bin/python bench/keyed_state.py [--keys 100000] [--records 1000000] [--epochs 2]

The logic: per key, tumbling 1-minute windows with count and sum, emitted when the watermark
passes the window's end. Three pipelines over the same Parquet input (``--records`` records
over ``--keys`` keys, event time advancing one second per ``keys / 20`` records):

* ``windows``: ``window: {type: tumbling, size: 1m}`` with ``count(*)`` and ``sum(value)``;
* ``process (each)``: a process function iterating ``ctx.each`` record by record, window
  partials in a MapState, one timer per window end;
* ``process (vectorised)``: the same function computing the epoch's partials with pandas
  ``groupby`` instead of a Python loop over records;
* ``process (engine only)``: a function that only counts each key's records into its
  MapState (no timers, no output): what is left is the engine's cost per key (shuffle, the
  records to pandas, the state in and out), whatever a function does.

Each runs ``--epochs`` epochs of equal size in one local[2] Spark session (a warm-up run on a
small input first). Prints a markdown table (and writes bench/results/keyed_state.md) with the
median process-step seconds per epoch (wall and CPU) and per key with records, records/s,
and the output rows (equal across the first three: checked before the times count).
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


def engine_only(ctx, records):
    windows = ctx.state("windows")
    windows.put(0, {"c": (windows.get(0) or {"c": 0})["c"] + len(records), "s": 0})


def fire(ctx, when):
    windows = ctx.state("windows")
    start = when.value // 1000 - MINUTE
    w = windows.get(start)
    windows.remove(start)
    yield {"user": ctx.key, "window_start": pd.Timestamp(start * 1000, tz="UTC"),
           "clicks": w["c"], "total": w["s"]}
"""


PROCESS = {
    "process (each)": "each",
    "process (vectorised)": "vectorised",
    "process (engine only)": "engine_only",
}


def main() -> int:
    args = _parser().parse_args()
    from sluice.spark import spark_session

    tmp = Path(tempfile.mkdtemp(prefix="sluice-keyed-bench-"))
    (tmp / "functions.py").write_text(FUNCTIONS)
    spark = spark_session("sluice-keyed-bench")
    rows = []
    try:
        _input(tmp / "warm", 2_000, 200, args.epochs)
        keys = _input(tmp / "data", args.records, args.keys, args.epochs)
        outputs = {}
        for variant in ("windows", *PROCESS):
            _run(spark, tmp, tmp / "warm", variant, args.epochs)
            seconds, cpu, emitted = _run(spark, tmp, tmp / "data", variant, args.epochs)
            if variant != "process (engine only)":
                outputs[variant] = emitted
            per_epoch, cpu_per_epoch = statistics.median(seconds), statistics.median(cpu)
            rows.append((variant, per_epoch, cpu_per_epoch, emitted))
            print(f"{variant}: {per_epoch:.1f} s/epoch, {cpu_per_epoch:.1f} CPU s", file=sys.stderr)
        if len(set(outputs.values())) != 1:
            raise SystemExit(f"outputs differ: {outputs}")
    finally:
        spark.stop()
    text = _table(rows, keys, args)
    print(text)
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "keyed_state.md").write_text(text + "\n")
    return 0


def _input(folder: Path, records: int, keys: int, epochs: int) -> float:
    """Write the input; returns the keys with records per epoch (mean over the epochs)."""
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
    counts = []
    for e in range(epochs):
        part = table.slice(e * per_epoch, per_epoch)
        pq.write_table(part, folder / "in" / f"{e:04d}.parquet")
        counts.append(len(part.column("user").unique()))
    return statistics.mean(counts)


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
            "function": "functions:" + PROCESS[variant],
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


def _run(
    spark: Any, tmp: Path, data: Path, variant: str, epochs: int
) -> tuple[list[float], list[float], int]:
    import yaml
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    run = f"run-{time.monotonic_ns()}"
    path = tmp / f"{run}.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp, data, variant, run)))
    rt = runtime(load_spec(path))
    seconds, cpu, emitted = [], [], 0
    while (plan := plan_epoch(rt)) is not None:
        started, used = time.perf_counter(), _cpu_seconds()
        record = process_epoch(rt, spark, plan.epoch)
        seconds.append(time.perf_counter() - started)
        cpu.append(_cpu_seconds() - used)
        checkpoint = commit_epoch(rt, plan.epoch, record.attempt)
        emitted += checkpoint.result.stats.windows_emitted
    assert len(seconds) == epochs, seconds
    return seconds, cpu, emitted


def _cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its descendants: Spark's
    JVM and its Python workers. On a shared machine this moves far less than wall time."""
    ticks, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in stat[11:15])  # utime, stime, cutime, cstime
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return ticks / os.sysconf("SC_CLK_TCK")


def _table(rows: list[tuple[str, float, float, int]], keys: float, args: argparse.Namespace) -> str:
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines = [
        f"keyed state: {args.records:,} records over {args.keys:,} keys in {args.epochs} epochs, "
        f"tumbling 1-minute count+sum per key; local[2]; {os.cpu_count()} cores, "
        f"{_memory_gib()} GiB, Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}; "
        f"command: .venv/bin/python bench/keyed_state.py --keys {args.keys} "
        f"--records {args.records} --epochs {args.epochs}",
        "",
        f"Keys with records per epoch: {keys:,.0f} (keys a timer alone touches add at most "
        "the few without a record in an epoch); ms per key = process s/epoch / those keys. "
        "CPU: user + system seconds of the driver, Spark's JVM and its Python workers "
        f"(load average at the end: {load}).",
        "",
        "| pipeline | process s/epoch (median) | ms per key | CPU s/epoch | CPU ms per key "
        "| records/s | rows emitted |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, seconds, cpu, emitted in rows:
        rate = args.records / args.epochs / seconds
        lines.append(
            f"| {variant} | {seconds:.1f} | {seconds / keys * 1000:.3f} | {cpu:.1f} "
            f"| {cpu / keys * 1000:.3f} | {rate:,.0f} | {emitted:,} |"
        )
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
