"""What a lookup join costs a steady epoch: the same stateless JSON lines pipeline with and
without a lookup (a Parquet users table), Spark jobs, Py4J calls and executor CPU per epoch
(bench/probe.py's counts: noise cannot move the first two).

    .venv/bin/python bench/lookup_cost.py [EPOCHS] [LINES]

Writes EPOCHS (default 6) files of LINES (default 20000) clicks and a 1,000-row users table
under /tmp/sluice-lookup-cost, runs both pipelines in one warm local[2] session, one file an
epoch, and prints each epoch's counts; the first epoch of each reads the table (and, with the
lookup, checks its keys), the later ones are the steady state docs/joins.md reports.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "include")]

from bench import probe as pr  # noqa: E402

WORK = Path("/tmp/sluice-lookup-cost")
T0 = datetime(2024, 1, 1)
USERS = 1000


def _inputs(epochs: int, lines: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "in").mkdir(parents=True)
    (WORK / "users").mkdir()
    for e in range(epochs):
        rows = (
            json.dumps(
                {
                    "user": f"u{(e * lines + i) % (USERS + 50)}",
                    "ts": (T0 + timedelta(milliseconds=e * lines + i)).isoformat(),
                    "amount": float(i % 100),
                }
            )
            for i in range(lines)
        )
        (WORK / "in" / f"{e:04d}.jsonl").write_text("\n".join(rows) + "\n")
    users = pa.table(
        {
            "user_id": [f"u{i}" for i in range(USERS)],
            "country": [("de", "fr", "it", "es")[i % 4] for i in range(USERS)],
            "tier": pa.array([i % 3 for i in range(USERS)], pa.int32()),
        }
    )
    pq.write_table(users, WORK / "users" / "v1.parquet")


def _spec(name: str, lookup: bool) -> dict[str, object]:
    root = WORK.as_uri()
    body: dict[str, object] = {
        "name": name,
        "source": {
            "type": "files",
            "path": f"{root}/in",
            "format": "jsonl",
            "schema": {"user": "string", "ts": "timestamp", "amount": "double"},
            "max_files_per_epoch": 1,
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "sinks": [
            {"name": "out", "type": "files", "path": f"{root}/{name}/out", "format": "parquet"}
        ],
        "checkpoint": {"storage": f"{root}/{name}/ckpt"},
    }
    if lookup:
        body["lookup"] = [
            {
                "name": "users",
                "on": {"user": "user_id"},
                "columns": {"country": "string", "tier": "int"},
                "table": {"type": "files", "path": f"{root}/users", "format": "parquet"},
            }
        ]
    return body


def main(argv: list[str]) -> int:
    epochs = int(argv[0]) if argv else 6
    lines = int(argv[1]) if len(argv) > 1 else 20_000
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spark import spark_session
    from sluice.spec import parse_spec

    from tests.fixtures.pipelines import runtime

    _inputs(epochs, lines)
    spark = spark_session("lookup-cost", master="local[2]", extra_conf=pr.PROBE_CONF)
    print(f"{epochs} epochs of {lines:,} JSON lines, a {USERS:,}-row Parquet users table")
    print(f"{'pipeline':<10} {'epoch':>5} {'jobs':>5} {'py4j':>6} {'cpu s':>6}")
    for name, lookup in (("plain", False), ("lookup", True)):
        rt = runtime(parse_spec(_spec(name, lookup)))
        for _ in range(epochs):
            plan = plan_epoch(rt)
            if plan is None:
                break
            with pr.SparkProbe(spark, inputs=[WORK / "in"]) as probe:
                record = process_epoch(rt, spark, plan.epoch)
            commit_epoch(rt, plan.epoch, record.attempt)
            c = probe.counts
            print(f"{name:<10} {plan.epoch:>5} {c.jobs:>5} {c.py4j_calls:>6} {c.cpu_s:>6.2f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
