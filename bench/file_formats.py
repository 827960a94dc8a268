"""What each input format and codec costs the files source's reader (docs/file-formats.md).

    .venv/bin/python bench/file_formats.py [--records 1000000] [--files 4] [--rounds 3]
        [--formats jsonl,jsonl.gz,...] [--split-mb 0]

The same click records (user, url, ts, amount; 1 in 500 a dead letter) written as plain
JSON lines, JSON lines compressed by each codec (Python's gzip and bz2 at level 6, zstandard
level 3, python-lz4 frames), CSV, Parquet (pyarrow), Avro (fastavro, deflate) and ORC
(pyarrow, zstd); each format read by ``parse_files`` into Spark's ``noop`` sink in one warm
``local[2]`` session: the best and worst of ``--rounds`` rounds after a warm-up, seconds and
records/s. ``--split-mb N`` sets ``spark.sql.files.maxPartitionBytes`` to N MiB so Spark
splits the files (bzip2, Avro, ORC, plain text: the extra job counting the rows before each
split). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = (("user", "string"), ("url", "string"), ("ts", "timestamp"), ("amount", "double"))
FORMATS = ("jsonl", "jsonl.gz", "jsonl.bz2", "jsonl.zst", "jsonl.lz4", "csv", "parquet",
           "avro", "orc")  # fmt: skip


def main() -> int:
    args = _parser().parse_args()
    from sluice.spark import spark_session

    formats = args.formats.split(",") if args.formats else list(FORMATS)
    spark = spark_session("bench-file-formats")
    if args.split_mb:
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(args.split_mb << 20))
    rows = _rows(args.records)
    per_file = -(-len(rows) // args.files)
    chunks = [rows[i : i + per_file] for i in range(0, len(rows), per_file)]
    with tempfile.TemporaryDirectory(prefix="sluice-bench-formats-") as tmp:
        lines = ["| input | bytes | seconds (best–worst) | records/s |", "|---|---:|---:|---:|"]
        for kind in formats:
            keys = []
            size = 0
            for n, chunk in enumerate(chunks):
                key = f"{kind.replace('.', '-')}/part-{n}.{kind}"
                data = _encode(kind, chunk)
                path = Path(tmp, key)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                keys.append(key)
                size += len(data)
            times = _measure(spark, Path(tmp), kind, keys, args.rounds)
            best, worst = min(times), max(times)
            lines.append(f"| {kind} | {size:,} | {best:.2f}–{worst:.2f} | "
                         f"{len(rows) / best:,.0f} |")  # fmt: skip
            print(lines[-1], flush=True)
    print()
    print(f"{len(rows):,} records in {args.files} files, {args.rounds} rounds, "
          f"maxPartitionBytes {spark.conf.get('spark.sql.files.maxPartitionBytes')}")  # fmt: skip
    print("\n".join(lines))
    spark.stop()
    return 0


def _rows(n: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n):
        amount: Any = round(rng.uniform(0, 100), 2)
        if i % 500 == 499:
            amount = "lots"  # a dead letter
        rows.append({"user": f"user{rng.randrange(10_000)}", "url": f"/page/{rng.randrange(200)}",
                     "ts": t0 + timedelta(milliseconds=i * 10), "amount": amount})  # fmt: skip
    return rows


def _encode(kind: str, rows: list[dict[str, Any]]) -> bytes:
    if kind.startswith("jsonl") or kind == "csv":
        if kind == "csv":
            text = "user,url,ts,amount\n" + "".join(
                f"{r['user']},{r['url']},{r['ts']:%Y-%m-%dT%H:%M:%S.%fZ},{r['amount']}\n"
                for r in rows
            )
        else:
            text = "".join(
                json.dumps({**r, "ts": f"{r['ts']:%Y-%m-%dT%H:%M:%S.%fZ}"}) + "\n" for r in rows
            )
        data = text.encode()
        codec = kind.split(".")[1] if "." in kind else ""
        if codec == "gz":
            return gzip.compress(data, compresslevel=6)
        if codec == "bz2":
            return bz2.compress(data, compresslevel=6)
        if codec == "zst":
            import zstandard

            return zstandard.ZstdCompressor(level=3).compress(data)
        if codec == "lz4":
            import lz4.frame

            return lz4.frame.compress(data)
        return data
    import pyarrow as pa

    text_amount = [str(r["amount"]) for r in rows]
    table = pa.table({
        "user": [r["user"] for r in rows], "url": [r["url"] for r in rows],
        "ts": pa.array([r["ts"] for r in rows], pa.timestamp("us", tz="UTC")),
        "amount": pa.array(text_amount, pa.string()),
    })  # fmt: skip
    out = io.BytesIO()
    if kind == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif kind == "orc":
        import pyarrow.orc as orc

        orc.write_table(table, out, compression="zstd")
    elif kind == "avro":
        import fastavro

        schema = {"type": "record", "name": "click", "fields": [
            {"name": "user", "type": "string"}, {"name": "url", "type": "string"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "amount", "type": "string"}]}  # fmt: skip
        records = ({**r, "amount": a} for r, a in zip(rows, text_amount, strict=True))
        fastavro.writer(out, fastavro.parse_schema(schema), records, codec="deflate")
    else:
        raise ValueError(kind)
    return out.getvalue()


def _measure(spark: Any, root: Path, kind: str, keys: list[str], rounds: int) -> list[float]:
    from sluice.sources.file_formats import parse_files
    from sluice.sources.parsing import IndexedFile
    from sluice.spec import FilesSourceConfig
    from sluice.storage import open_store

    fmt = kind.split(".")[0]
    config = FilesSourceConfig(path=str(root), format=fmt, schema=SCHEMA)  # type: ignore[arg-type]
    store = open_store(str(root))
    index = [
        IndexedFile(f"file:{root}/{key}", key, i, f"file://{root}/{key}")
        for i, key in enumerate(keys)
    ]
    times = []
    for attempt in range(rounds + 1):  # the first is the warm-up
        started = time.perf_counter()
        frame, _ = parse_files(spark, config, store, index, ("ts",), None)
        frame.write.format("noop").mode("overwrite").save()
        if attempt:
            times.append(time.perf_counter() - started)
    return times


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--formats", default="")
    parser.add_argument("--split-mb", type=int, default=0)
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
