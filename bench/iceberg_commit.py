"""What an iceberg sink's commit costs per epoch (docs/iceberg.md, "Measured costs").

    .venv/bin/python bench/iceberg_commit.py [--rows 50000] [--epochs 8]
        [--catalog sqlite|postgresql://user@host:port/db]

Stages ``--rows`` rows per epoch the way *prepare* leaves them (Parquet under the attempt's
staging prefix, here written by pyarrow instead of Spark, so Spark's cost is left out) in a
local warehouse, then times ``commit``: reading the stage, the catalog round trips, writing
the data files, one snapshot. ``append``: new rows each epoch. ``upsert``: each epoch changes
``--rows`` windows, half of them already in the table (updates), half new (inserts), so the
copy-on-write rewrite grows with the table. Prints the median and the last epoch's seconds.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path


def main() -> int:
    args = _parser().parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sluice.sinks.iceberg import IcebergSink
    from sluice.spec import IcebergSinkConfig
    from sluice.storage import open_store

    root = Path(tempfile.mkdtemp(prefix="iceberg-bench-"))
    url = f"sqlite:///{root / 'catalog.db'}" if args.catalog == "sqlite" else args.catalog
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    keys = ("user", "window_start", "window_end")
    where = args.catalog.split("@")[-1]  # no credentials in the output
    print(f"{args.rows} rows per epoch, {args.epochs} epochs, catalog {where}")
    print("| mode | commit s/epoch (median) | last epoch s | table rows at the end |")
    print("|---|---|---|---|")
    for mode in ("append", "upsert"):
        warehouse = root / f"wh-{mode}"
        store = open_store(str(warehouse))
        config = IcebergSinkConfig(
            name="out",
            table=f"bench.t_{uuid.uuid4().hex[:8]}",
            connection="c",
            warehouse=str(warehouse),  # type: ignore[arg-type]
            mode=mode,  # type: ignore[arg-type]
            keys=keys if mode == "upsert" else (),
        )
        sink = IcebergSink(config, url, store, "bench")
        times = []
        for epoch in range(1, args.epochs + 1):
            first = (epoch - 1) * args.rows // 2 if mode == "upsert" else (epoch - 1) * args.rows
            n = args.rows
            minutes = [first + i for i in range(n)]
            table = pa.table(
                {
                    "user": [f"u{m % 1000}" for m in minutes],
                    "window_start": pa.array(
                        [t0 + timedelta(minutes=m) for m in minutes], pa.timestamp("us", "UTC")
                    ),
                    "window_end": pa.array(
                        [t0 + timedelta(minutes=m + 1) for m in minutes],
                        pa.timestamp("us", "UTC"),
                    ),
                    "clicks": pa.array([epoch] * n, pa.int64()),
                    "total": pa.array([float(m) for m in minutes], pa.float64()),
                    "_op": ["upsert"] * n,
                    "_epoch": pa.array([epoch] * n, pa.int64()),
                }
            )
            if mode == "append":
                table = table.drop_columns(["_op", "_epoch"])
            prefix = sink.staging_prefix(epoch, "bench")
            out = io.BytesIO()
            pq.write_table(table, out)
            store.put(prefix + "part-00000.snappy.parquet", out.getvalue())
            prepared = sink._prepared(epoch, "bench", n, prefix)
            start = time.perf_counter()
            sink.commit(prepared)
            times.append(time.perf_counter() - start)
        final = sink.load()
        rows = final.scan().to_arrow().num_rows if final is not None else 0
        print(f"| {mode} | {statistics.median(times):.2f} | {times[-1]:.2f} | {rows} |")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--catalog", default="sqlite")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
