"""What exactly-once costs: the same pipeline at qos 0, 1 and 2, per epoch, per sink.

    .venv/bin/python bench/qos_overhead.py [--epochs 6] [--events 20000] [--backends local,s3]
        [--sinks files,postgres,delta,iceberg,kafka]

Each run: the click pipeline (tumbling 1-minute windows) over ``--epochs`` epochs of
``--events`` events each, its results going to one sink of the given type (``files``:
Parquet; ``postgres``: a table on a PostgreSQL server started here; ``delta``: a Delta table;
``iceberg``: an Iceberg table in a SQLite SQL catalog, its warehouse on the backend;
``kafka``: a topic of a KRaft broker started here, its stage on the backend), late records
and dead letters to JSON lines. One Spark session (local[2]) is shared by all
runs, with a warm-up run per sink first. S3 is a SeaweedFS server started here on loopback
(checkpoints, input, and the files / delta output). Prints a markdown table (and writes
bench/results/qos.md): seconds per epoch (median), the process and commit steps, and the
overhead of qos 1 and 2 over qos 0. Rows of sink types not run this time are kept from the
file, with the command that measured them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fixtures (the SeaweedFS launcher, the click spec)


def main() -> int:
    args = _parser().parse_args()
    from sluice.demo import render_click_files
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spark import spark_session
    from sluice.spec import parse_spec

    from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

    per_file = 2_000
    files = render_click_files(
        files=args.epochs * args.events // per_file, events_per_file=per_file, seed=1
    )
    servers: list[Any] = []
    roots: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="sluice-qos-bench-"))
    for backend in args.backends.split(","):
        if backend == "local":
            roots["local"] = lambda: Workspace("local", (tmp / uuid.uuid4().hex[:8]).as_uri())
        else:
            from tests.fixtures.seaweed import start_seaweed

            server = start_seaweed(tmp / "seaweed")
            servers.append(server)
            os.environ.update(server.aws_env())
            bucket = server.bucket("sluice-bench")
            roots["s3"] = lambda b=bucket: Workspace("s3", f"s3://{b}/{uuid.uuid4().hex[:8]}")
    sinks = args.sinks.split(",")
    if "postgres" in sinks:
        from tests.fixtures.airflow import free_port
        from tests.fixtures.postgres import start_postgres

        pg = start_postgres(free_port())
        servers.append(pg)
        url = "postgresql://" + pg.create_database("bench").split("://", 1)[1]
        os.environ["SLUICE_CONN_BENCH_PG"] = url
    if "kafka" in sinks:
        from tests.fixtures.kafka import start_kafka

        broker = start_kafka(tmp / "kafka")
        servers.append(broker)
        os.environ["SLUICE_BENCH_KAFKA"] = broker.bootstrap
    if "iceberg" in sinks:
        os.environ["SLUICE_CONN_BENCH_ICEBERG"] = f"sqlite:///{tmp / 'iceberg-catalog.db'}"
    spark = spark_session("sluice-qos-bench")
    rows: list[dict[str, Any]] = []
    try:
        for backend, new_ws in roots.items():
            for sink, qos in [(k, q) for k in sinks for q in (None, 0, 1, 2)]:  # None: warm-up
                ws = new_ws()
                ws.put_files(files)
                body = click_spec_dict(ws, name="bench", qos=qos or 0)
                body["source"]["max_files_per_epoch"] = args.events // per_file
                body["sinks"] = [_sink(sink, ws)]
                rt = runtime(parse_spec(body))
                epochs: list[tuple[float, float, float]] = []
                while True:
                    t0 = time.perf_counter()
                    plan = plan_epoch(rt)
                    if plan is None:
                        break
                    t1 = time.perf_counter()
                    record = process_epoch(rt, spark, plan.epoch)
                    t2 = time.perf_counter()
                    commit_epoch(rt, plan.epoch, record.attempt)
                    t3 = time.perf_counter()
                    epochs.append((t3 - t0, t2 - t1, t3 - t2))
                if qos is None:
                    continue
                rows.append(
                    {
                        "backend": backend,
                        "sink": sink,
                        "qos": qos,
                        "epochs": len(epochs),
                        "epoch_s": statistics.median(e[0] for e in epochs),
                        "process_s": statistics.median(e[1] for e in epochs),
                        "commit_s": statistics.median(e[2] for e in epochs),
                    }
                )
                print(
                    f"{backend} {sink} qos {qos}: {rows[-1]['epoch_s']:.2f} s/epoch",
                    file=sys.stderr,
                )
    finally:
        spark.stop()
        for server in servers:
            server.stop()
    out = ROOT / "bench" / "results" / "qos.md"
    text = _table(rows, args, _kept(out, set(sinks)))
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


def _sink(kind: str, ws: Any) -> dict[str, Any]:
    """The results sink of one run: a fresh table or folder."""
    if kind == "postgres":
        table = f"bench_{uuid.uuid4().hex[:8]}"
        return {"name": "out", "type": "postgres", "table": table, "connection": "bench_pg"}
    if kind == "delta":
        return {"name": "out", "type": "delta", "path": ws.uri("lake")}
    if kind == "iceberg":
        table = f"bench.t_{uuid.uuid4().hex[:8]}"
        return {"name": "out", "type": "iceberg", "table": table, "connection": "bench_iceberg",
                "warehouse": ws.uri("warehouse")}  # fmt: skip
    if kind == "kafka":
        return {"name": "out", "type": "kafka", "topic": f"bench_{uuid.uuid4().hex[:8]}",
                "bootstrap_servers": os.environ["SLUICE_BENCH_KAFKA"], "key": ["user"]}  # fmt: skip
    return {"name": "out", "type": "files", "path": ws.uri("out"), "format": "parquet"}


HEAD = "| backend | results sink | qos | s/epoch (median) | process s | commit s | vs qos 0 |"


def _kept(out: Path, run: set[str]) -> tuple[list[str], list[str]]:
    """The header lines and table rows of ``out`` whose sink types this run does not measure
    again (an earlier command measured them)."""
    if not out.exists():
        return [], []
    lines = out.read_text().splitlines()
    heads = [line for line in lines if line.startswith("qos overhead:")]
    rows = [line for line in lines if line.startswith("| ") and line != HEAD
            and line.split("|")[2].strip() not in run]  # fmt: skip
    sinks = {line.split("|")[2].strip() for line in rows}
    return [h for h in heads if any(f"--sinks {s}" in h or f",{s}" in h for s in sinks)], rows


def _table(
    rows: list[dict[str, Any]], args: argparse.Namespace, kept: tuple[list[str], list[str]]
) -> str:
    base = {(r["backend"], r["sink"]): r["epoch_s"] for r in rows if r["qos"] == 0}
    lines = [
        *kept[0],
        f"qos overhead: {args.epochs} epochs x {args.events:,} events, click pipeline, "
        f"local[2]; {os.cpu_count()} cores, "
        f"{_memory_gib()} GiB, {platform.python_version()}, "
        f"{datetime.now(UTC):%Y-%m-%d}; command: .venv/bin/python bench/qos_overhead.py "
        f"--epochs {args.epochs} --events {args.events} --backends {args.backends} "
        f"--sinks {args.sinks}",
        "",
        HEAD,
        "|---|---|---|---|---|---|---|",
        *kept[1],
    ]
    for r in rows:
        extra = (r["epoch_s"] / base[(r["backend"], r["sink"])] - 1) * 100
        lines.append(
            f"| {r['backend']} | {r['sink']} | {r['qos']} | {r['epoch_s']:.2f} | "
            f"{r['process_s']:.2f} | {r['commit_s']:.2f} | {extra:+.0f}% |"
        )
    return "\n".join(lines)


def _memory_gib() -> int:
    with open("/proc/meminfo") as f:
        kib = int(f.readline().split()[1])
    return round(kib / 1024 / 1024)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--events", type=int, default=20_000, help="events per epoch")
    parser.add_argument("--backends", default="local,s3")
    parser.add_argument(
        "--sinks", default="files,postgres,delta,iceberg,kafka", help="results sink types"
    )
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
