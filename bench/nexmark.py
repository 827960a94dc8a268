"""Nexmark side by side: Sluice at qos 0/1/2 against a plain Spark batch, Spark Structured
Streaming, PyFlink and DuckDB, on the same generated data, on this machine.

    make bench          # 10M events, epochs of 1M (bench/results/latest.md + latest.png)
    make bench-quick    # a smoke-size run of every section (writes bench/results/quick.md)
    .venv/bin/python bench/nexmark.py [--events N] [--epoch-events M] [--sections a,b,...]
        [--queries q0,q5,q7,q11,q3,q8,q7full]

Queries (``--queries``, default all): q0/q5/q7/q11 read the bids; q3 and q8 join the person
and auction streams, q7full (the standard q7: the rows of the highest bids) joins q7's maxima
back to the bids (``bench/nexmark_joins.py``): the duckdb, sluice, sss and flink sections
run them too, their rows in the report's section "Joins".

Sections (``--sections``, default all, in this order):

* ``data``: Nexmark events ``[0, N)`` as Parquet and JSON lines files
  (``sluice.nexmark.write_files``, one file per ``--file-events`` events, a folder per kind:
  ``bid/``, ``person/``, ``auction/``, every kind cut at the same event numbers), cached
  under ``.cache/bench/nexmark``.
* ``duckdb``: every query in one SQL query each, over each format: the near-hardware bound,
  and the reference every other engine's output is checked against.
* ``plain``: the same Spark DataFrame query, run once as a plain batch (no state, no
  checkpoint): over all N events, and over one epoch's files (the base of the overhead);
  bid queries only.
* ``sluice``: the shipped window specs over the files source in epochs of ``--epoch-events``,
  at qos 0, 1 and 2 on Parquet and qos 2 on JSON lines, in one long-lived Spark session:
  plan / process / commit per epoch, the state snapshot's size and write time; the joins as
  a join spec of two files sources (an epoch's files of each), qos 0 and 2 on Parquet, qos 2
  on JSON lines.
* ``sss``: Spark Structured Streaming, ``Trigger.AvailableNow``, RocksDB state store,
  a checkpoint location, ``maxFilesPerTrigger`` = an epoch's files (of each side for the
  joins: a stream-stream join of two file streams with watermarks).
* ``flink``: PyFlink SQL (window TVFs; a window join and an interval join) on a local
  mini-cluster with exactly-once checkpoints (``bench/peers/flink_nexmark.py``, in its own
  venv ``.cache/bench/flink-venv``).
* ``fixed``: the fixed cost of a near-empty epoch (one new 1-record file): cold (new
  processes per step, ``spark-submit jobs/run_epoch.py`` as the DAG's process task) and warm
  (the long-lived session; and the ``sluice serve`` epoch server when available).
* ``scaling``: epoch time as the total state grows with the touched keys fixed, and as the
  events per epoch grow.

Sluice's process step, Structured Streaming's micro-batch and the plain batch of one epoch are
also probed (``bench/probe.py``): Spark jobs, input passes, Py4J calls and executor CPU seconds
per steady epoch, counts that timing noise cannot move.

Every engine's output is compared with DuckDB's (windows that closed: ``end <= `` the last
bid's time, as Sluice's ``emit: on_close``; the joins' whole output, every pair as often as
the unbounded join has it); a mismatch is printed and its time not counted.
Each row of the report carries the command, the machine and the date. Speed is measured here,
never asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fixtures (runtime builder), bench.probe

from bench import nexmark_joins as joins  # noqa: E402
from bench.probe import PROBE_CONF, Counts, Py4JCounter, SparkProbe, Work, streaming_batch  # noqa: E402

CACHE = ROOT / ".cache" / "bench"
RESULTS = ROOT / "bench" / "results"
WORK = Path(os.environ.get("SLUICE_BENCH_WORK") or CACHE / "work")  # scratch: outputs, checkpoints
FLINK_PYTHON = CACHE / "flink-venv" / "bin" / "python"
QUERIES = ("q0", "q5", "q7", "q11")
SECTIONS = ("data", "duckdb", "plain", "sluice", "sss", "flink", "fixed", "scaling")
SECOND_US = 1_000_000
BID_SCHEMA = {
    "event_id": "long",
    "auction": "long",
    "bidder": "long",
    "price": "long",
    "channel": "string",
    "url": "string",
    "date_time": "timestamp",
    "extra": "string",
}
BID_DDL = ", ".join(f"{name} {'bigint' if t == 'long' else t}" for name, t in BID_SCHEMA.items())
# The columns that identify a result row, per query (window columns as µs since the epoch).
KEYS = {
    "q0": ["event_id"],
    "q5": ["auction", "ws", "we"],
    "q7": ["ws", "we"],
    "q11": ["bidder", "ws", "we"],
}
VALUES = {"q0": [], "q5": ["bids"], "q7": ["max_price", "bids"], "q11": ["bid_count"]}


# --- the report -------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    engine: str
    query: str = ""
    format: str = ""
    events: int = 0
    seconds: float = 0.0
    rows_out: int | None = None
    check: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@dataclass
class Report:
    command: str
    args: argparse.Namespace
    out: Path
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        rate = f", {row.events_per_s:,.0f} events/s" if row.events and row.seconds else ""
        check = f" [{row.check}]" if row.check else ""
        say(
            f"{row.section} {row.engine} {row.query} {row.format}: {row.seconds:.2f} s{rate}{check}"
        )
        self.write()
        return row

    def write(self, final: bool = False) -> None:
        from bench.report import render

        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(self.with_joins(render(self, final=final)))
        self.out.with_suffix(".json").write_text(
            json.dumps(
                {
                    "command": self.command,
                    "machine": machine(),
                    "date": today(),
                    "rows": [{**r.__dict__, "events_per_s": r.events_per_s} for r in self.rows],
                    "notes": self.notes,
                },
                indent=1,
                default=str,
            )
        )

    def with_joins(self, text: str) -> str:
        """``text`` (bench/report.py's) with the joins' section (bench/nexmark_joins.py)
        before its notes (or its chart; or at the end)."""
        where = f"{machine()} | {today()} | `{self.command}`"
        section = joins.render(self.rows, where, os.cpu_count() or 1)
        if not section:
            return text
        for marker in ("\n## Notes\n", "\n![chart]"):
            at = text.find(marker)
            if at >= 0:
                return text[: at + 1] + "\n".join(section) + "\n" + text[at + 1 :]
        return text + "\n" + "\n".join(section) + "\n"


def say(text: str) -> None:
    print(f"bench [{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def machine() -> str:
    with open("/proc/meminfo") as f:
        kib = int(f.readline().split()[1])
    return f"{os.cpu_count()} cores, {round(kib / 1024 / 1024)} GiB"


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def today() -> str:
    return f"{datetime.now(UTC):%Y-%m-%d}"


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - started)


# --- data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    root: Path
    events: int
    file_events: int

    def dir(self, fmt: str, kind: str = "bid") -> Path:
        return self.root / fmt / kind

    def glob(self, fmt: str, kind: str = "bid") -> str:
        return str(self.dir(fmt, kind) / f"*.{fmt}")

    def files(self, fmt: str, kind: str = "bid") -> list[Path]:
        return sorted(self.dir(fmt, kind).glob(f"*.{fmt}"))

    def bids(self, files: list[Path] | None = None) -> int:
        """Bids in ``files`` (default: all): the rows every query reads (92% of events)."""
        import pyarrow.parquet as pq

        chosen = self.files("parquet") if files is None else files
        return sum(pq.ParquetFile(p).metadata.num_rows for p in chosen)

    def join_records(self, query: str) -> int:
        """The records join ``query`` reads: persons and auctions for q3 and q8 (8% of
        events), the bids for the full q7 (counted once, though both its stages read them)."""
        import pyarrow.parquet as pq

        if query == joins.FULL_Q7:
            return self.bids()
        files = [f for kind in joins.SIDES.values() for f in self.files("parquet", kind)]
        return sum(pq.ParquetFile(p).metadata.num_rows for p in files)


def write_dataset(report: Report, events: int, file_events: int, formats: list[str]) -> Dataset:
    from sluice.nexmark import write_files

    ds = Dataset(CACHE / "nexmark" / f"{events}-{file_events}", events, file_events)
    for fmt in formats:
        done = ds.root / fmt / ".complete"
        # a cache from before q3/q8 kept the bids only
        kinds = ("bid", *joins.SIDES.values())
        if done.exists() and all(ds.files(fmt, kind) for kind in kinds):
            say(f"data: {fmt} cached in {ds.root / fmt}")
            continue
        shutil.rmtree(ds.root / fmt, ignore_errors=True)
        with timed() as t:
            write_files(
                str(ds.root / fmt),
                0,
                events,
                format=fmt,
                events_per_file=file_events,  # type: ignore[arg-type]
            )
        size = sum(p.stat().st_size for p in ds.files(fmt))
        sides = {k: sum(p.stat().st_size for p in ds.files(fmt, k)) for k in joins.SIDES.values()}
        done.write_text("ok\n")
        report.add(
            Row(
                "data",
                "generator",
                "",
                fmt,
                events,
                t[0],
                len(ds.files(fmt)),
                extra={"bytes": size, **{f"{k}_bytes": n for k, n in sides.items()}},
            )
        )
    return ds


# --- DuckDB: the reference and the near-hardware bound --------------------------------


def duckdb_connection() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def source_sql(ds: Dataset, fmt: str) -> str:
    if fmt == "parquet":
        return f"read_parquet('{ds.glob(fmt)}')"
    columns = ", ".join(
        f"{n}: '{'BIGINT' if t == 'long' else 'TIMESTAMP' if t == 'timestamp' else 'VARCHAR'}'"
        for n, t in BID_SCHEMA.items()
    )
    return f"read_json('{ds.glob(fmt)}', format = 'newline_delimited', columns = {{{columns}}})"


def reference_sql(query: str, bids: str) -> str:
    """The query in DuckDB SQL over ``bids``, keys and values named as :data:`KEYS` /
    :data:`VALUES`; windowed queries only emit windows with ``we <= `` the last bid's time."""
    t = "epoch_us(date_time)"
    if query == "q0":
        return f"SELECT * FROM {bids}"
    if query == "q5":
        size, slide = 10 * SECOND_US, 2 * SECOND_US
        return f"""
            WITH b AS (SELECT auction, {t} AS t FROM {bids}),
            final AS (SELECT max(t) AS wm FROM b),
            hop AS (SELECT auction, t - t % {slide} - i * {slide} AS ws
                    FROM b, range(0, {size // slide}) AS r(i))
            SELECT auction, ws, ws + {size} AS we, count(*) AS bids
            FROM hop, final WHERE ws + {size} <= final.wm GROUP BY auction, ws"""
    if query == "q7":
        size = 10 * SECOND_US
        return f"""
            WITH b AS (SELECT price, {t} AS t FROM {bids}),
            final AS (SELECT max(t) AS wm FROM b)
            SELECT t - t % {size} AS ws, t - t % {size} + {size} AS we,
                   max(price) AS max_price, count(*) AS bids
            FROM b, final WHERE t - t % {size} + {size} <= final.wm GROUP BY ws"""
    gap = 10 * SECOND_US
    return f"""
        WITH b AS (SELECT bidder, {t} AS t FROM {bids}),
        final AS (SELECT max(t) AS wm FROM b),
        marked AS (SELECT bidder, t, CASE WHEN t - lag(t) OVER (PARTITION BY bidder ORDER BY t)
                          <= {gap} THEN 0 ELSE 1 END AS starts FROM b),
        numbered AS (SELECT bidder, t, sum(starts) OVER (PARTITION BY bidder ORDER BY t
                            ROWS UNBOUNDED PRECEDING) AS session FROM marked)
        SELECT bidder, min(t) AS ws, max(t) + {gap} AS we, count(*) AS bid_count
        FROM numbered, final GROUP BY bidder, session, final.wm
        HAVING max(t) + {gap} <= final.wm"""


def run_duckdb(
    report: Report, ds: Dataset, formats: list[str], queries: list[str]
) -> dict[str, Any]:
    """Each query over each format, written to Parquet (the write is part of the time, as
    every engine writes its output). Returns the reference tables (from Parquet input)."""
    con = duckdb_connection()
    out = WORK / "duckdb"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for fmt in formats:
        for query in queries:
            join = query in joins.JOIN_QUERIES
            if query == joins.FULL_Q7:
                sql = joins.full_q7_reference_sql(source_sql(ds, fmt))
            elif join:
                kinds = [joins.duckdb_source(ds.root, fmt, k) for k in joins.SIDES.values()]
                sql = joins.reference_sql(query, *kinds)
            else:
                sql = reference_sql(query, source_sql(ds, fmt))
            target = out / f"{query}-{fmt}.parquet"
            with timed() as t:
                con.execute(f"COPY ({sql}) TO '{target}' (FORMAT parquet)")
            (rows,) = con.execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()
            if fmt == "parquet":
                REFERENCE[query] = target
            check = "reference" if fmt == "parquet" else same_tables(REFERENCE[query], target)
            section, records = (
                ("join-duckdb", ds.join_records(query)) if join else ("duckdb", ds.bids())
            )
            report.add(Row(section, "DuckDB", query, fmt, records, t[0], rows, check))
    con.close()
    return {q: out / f"{q}-parquet.parquet" for q in queries}


def same_tables(a: Path, b: Path) -> str:
    con = duckdb_connection()
    try:
        diff = [
            con.execute(
                f"SELECT count(*) FROM (SELECT * FROM read_parquet('{x}') "
                f"EXCEPT ALL SELECT * FROM read_parquet('{y}'))"
            ).fetchone()[0]
            for x, y in ((a, b), (b, a))
        ]
        return "match" if diff == [0, 0] else f"DIFFERS: {diff[0]} missing, {diff[1]} extra"
    finally:
        con.close()


REFERENCE: dict[str, Path] = {}


def normalized_sql(query: str, relation: str) -> str:
    """An engine's output as the reference's columns (windows as µs)."""
    if query == "q0":
        return (
            f"SELECT event_id, auction, bidder, price, channel, url, epoch_us(date_time) AS t, "
            f"extra FROM {relation}"
        )
    values = ", ".join(VALUES[query])
    keys = [k for k in KEYS[query] if k not in ("ws", "we")]
    lead = ", ".join(keys) + ", " if keys else ""
    return (
        f"SELECT {lead}epoch_us(CAST(window_start AS TIMESTAMP)) AS ws, "
        f"epoch_us(CAST(window_end AS TIMESTAMP)) AS we, {values} FROM {relation}"
    )


def check_join_output(
    query: str, relation_glob: str, *, closed_before_us: int | None = None
) -> str:
    """``match`` when the engine's rows of join ``query`` equal the reference's as a
    multiset (every pair, each as often), else what differs. ``closed_before_us`` (full q7):
    drop the rows of windows that end after it (an engine that flushes every window at the
    end of its input)."""
    con = duckdb_connection()
    try:
        engine = joins.normalized_sql(query, f"read_parquet('{relation_glob}')")
        if closed_before_us is not None:
            size = joins.Q7_WINDOW_US
            engine = f"SELECT * FROM ({engine}) WHERE ws + {size} <= {closed_before_us}"
        reference = f"SELECT * FROM read_parquet('{REFERENCE[query]}')"
        missing, extra = (
            con.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchone()[0]
            for a, b in ((reference, engine), (engine, reference))
        )
        if missing == extra == 0:
            return "match"
        return f"DIFFERS: {missing} reference rows missing, {extra} rows not in the reference"
    finally:
        con.close()


def last_bid_us(ds: Dataset) -> int:
    """The last bid's time (µs): the final watermark of an in-order run."""
    con = duckdb_connection()
    try:
        sql = f"SELECT max(epoch_us(date_time)) FROM {source_sql(ds, 'parquet')}"
        return int(con.execute(sql).fetchone()[0])
    finally:
        con.close()


def check_output(query: str, ds: Dataset, relation_glob: str, *, closed_only: bool = False) -> str:
    """``match`` when the engine's rows equal the reference's, else what differs.
    ``closed_only``: drop the engine's windows that had not closed at the final watermark
    (engines that flush every window at end of input)."""
    con = duckdb_connection()
    try:
        reference = f"read_parquet('{REFERENCE[query]}')"
        reader = (
            f"read_parquet('{relation_glob}', union_by_name = true)"
            if relation_glob.endswith(".parquet") or "*" in relation_glob
            else relation_glob
        )
        engine = normalized_sql(query, reader)
        if query == "q0":
            ref = (
                "SELECT event_id, auction, bidder, price, channel, url, epoch_us(date_time) AS t, "
                f"extra FROM {reference}"
            )
            sums = [
                con.execute(
                    f"SELECT count(*), sum(hash(event_id, auction, bidder, price, channel, url, "
                    f"t, extra)::HUGEINT) FROM ({sql})"
                ).fetchone()
                for sql in (ref, engine)
            ]
            return "match" if sums[0] == sums[1] else f"DIFFERS: reference {sums[0]}, got {sums[1]}"
        if closed_only:
            wm = con.execute(
                f"SELECT max(epoch_us(date_time)) FROM {source_sql(ds, 'parquet')}"
            ).fetchone()[0]
            engine = f"SELECT * FROM ({engine}) WHERE we <= {wm}"
        missing = con.execute(
            f"SELECT count(*) FROM (SELECT * FROM {reference} EXCEPT ALL {engine})"
        ).fetchone()[0]
        extra = con.execute(
            f"SELECT count(*) FROM ({engine} EXCEPT ALL SELECT * FROM {reference})"
        ).fetchone()[0]
        if missing == extra == 0:
            return "match"
        return f"DIFFERS: {missing} reference rows missing, {extra} rows not in the reference"
    finally:
        con.close()


# --- Spark: the same query as a plain batch, as Sluice specs, and in Structured Streaming --


def spark_query(query: str, df: Any, *, streaming: bool = False) -> Any:
    """The query in the DataFrame API (Spark's own window functions)."""
    from pyspark.sql import functions as F

    if query == "q0":
        return df
    if streaming:
        df = df.withWatermark("date_time", "0 seconds")
    one = F.count(F.lit(1))
    if query == "q5":
        grouped = df.groupBy(F.window("date_time", "10 seconds", "2 seconds"), "auction")
        out, keys, window = grouped.agg(one.alias("bids")), ["auction"], "window"
    elif query == "q7":
        grouped = df.groupBy(F.window("date_time", "10 seconds"))
        out = grouped.agg(F.max("price").alias("max_price"), one.alias("bids"))
        keys, window = [], "window"
    else:
        grouped = df.groupBy(F.session_window("date_time", "10 seconds"), "bidder")
        out, keys, window = grouped.agg(one.alias("bid_count")), ["bidder"], "session_window"
    return out.select(
        *keys,
        F.col(f"{window}.start").alias("window_start"),
        F.col(f"{window}.end").alias("window_end"),
        *VALUES[query],
    )


def read_batch(spark: Any, fmt: str, paths: list[str]) -> Any:
    reader = spark.read.schema(BID_DDL)
    return reader.parquet(*paths) if fmt == "parquet" else reader.json(paths)


def run_plain(
    report: Report, spark: Any, ds: Dataset, files_per_epoch: int, queries: list[str]
) -> dict[str, float]:
    """Each query once over all N events, and over the first epoch's files: the base the
    checkpoint overhead is measured against. Returns the per-epoch base per query."""
    per_epoch: dict[str, float] = {}
    for query in queries:
        for scope in ("all", "epoch"):
            files = ds.files("parquet")
            paths = [str(p) for p in (files if scope == "all" else files[:files_per_epoch])]
            events = ds.bids(files if scope == "all" else files[:files_per_epoch])
            out = WORK / "plain" / f"{query}-{scope}"
            shutil.rmtree(out, ignore_errors=True)
            with SparkProbe(spark, [ds.dir("parquet")]) as probe, timed() as t:
                spark_query(query, read_batch(spark, "parquet", paths)).write.parquet(str(out))
            check = ""
            if scope == "all":
                check = check_output(query, ds, f"{out}/*.parquet", closed_only=True)
            else:
                per_epoch[query] = t[0]
            report.add(
                Row("plain", f"Spark batch ({scope})", query, "parquet", events, t[0], None, check,
                    extra={"work": probe.counts.as_dict()})
            )  # fmt: skip
    return per_epoch


SPECS: dict[str, dict[str, Any]] = {
    # q0: a stateless pipeline (no window, no process function) appends every bid's columns
    # (the source schema's) as they came (docs/stateless.md).
    "q0": {},
    "q5": {
        "key_by": ["auction"],
        "window": {"type": "hopping", "size": "10s", "slide": "2s"},
        "aggregates": {"bids": "count(*)"},
        "emit": "on_close",
    },
    "q7": {
        "window": {"type": "tumbling", "size": "10s"},
        "aggregates": {"max_price": "max(price)", "bids": "count(*)"},
        "emit": "on_close",
    },
    "q11": {
        "key_by": ["bidder"],
        "window": {"type": "session", "gap": "10s"},
        "aggregates": {"bid_count": "count(*)"},
        "emit": "on_close",
    },
}


def sluice_spec(
    name: str, body: dict[str, Any], source: dict[str, Any], qos: int, work: Path
) -> Path:
    """Write a spec into ``work``; sinks and checkpoints there."""
    import yaml

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = {
        "name": name,
        "source": source,
        "event_time": {
            "column": source.get("event_time", "date_time"),
            "max_out_of_orderness": "0s",
        },
        **body,
        "qos": qos,
        "sinks": [{"name": "out", "type": "files", "path": str(work / "out"), "format": "parquet"}],
        "late_records": {"type": "files", "path": str(work / "late"), "format": "parquet"},
        "dead_letters": {"type": "files", "path": str(work / "dead"), "format": "parquet"},
        "checkpoint": {"storage": str(work / "checkpoints")},
    }
    spec["source"] = {k: v for k, v in source.items() if k != "event_time"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def bid_source(ds: Dataset, fmt: str, files_per_epoch: int) -> dict[str, Any]:
    return {
        "type": "files",
        "path": str(ds.dir(fmt)),
        "format": fmt,
        "schema": dict(BID_SCHEMA),
        "max_files_per_epoch": files_per_epoch,
    }


@dataclass
class EpochTimes:
    plan: float
    process: float
    commit: float
    state_write: float
    state_bytes: int
    state_rows: int
    records: int
    work: Counts | None = None  # the process step's Spark work (bench/probe.py), when probed
    plan_py4j: int = 0  # Py4J calls of the plan and commit steps
    commit_py4j: int = 0
    probe_s: float = 0.0  # the probe's own time (status store reads), in no step's time

    @property
    def total(self) -> float:
        return self.plan + self.process + self.commit


class StateTimer:
    """Times ``sluice.protocol.process._write_state`` (the snapshot of S_{k+1})."""

    def __init__(self) -> None:
        from sluice.protocol import process

        self.module = process
        self.original = process._write_state
        self.seconds = 0.0

    def __enter__(self) -> StateTimer:
        def timed_write(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        self.module._write_state = timed_write
        return self

    def __exit__(self, *exc: object) -> None:
        self.module._write_state = self.original


def run_sluice_epochs(
    spark: Any,
    spec_path: Path,
    *,
    max_epochs: int | None = None,
    max_units: int | None = None,
    probe: bool = True,
) -> list[EpochTimes]:
    """plan -> process -> commit until drained (or ``max_epochs``), each step timed.
    ``probe``: count each process step's Spark work (:class:`bench.probe.SparkProbe`, input
    passes = scans of the source's folder, of either side's for a join) and the plan and
    commit steps' Py4J calls; the probe's own time (before and after the step) is kept apart
    in ``probe_s``."""
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    rt = runtime(load_spec(str(spec_path)))
    join = rt.spec.join
    inputs = [s.source.path for s in join.sides] if join else [rt.spec.source.path]
    epochs: list[EpochTimes] = []
    with StateTimer() as state:
        while max_epochs is None or len(epochs) < max_epochs:
            t0 = time.perf_counter()
            with Py4JCounter() as plan_calls:
                plan = plan_epoch(rt, max_units=max_units)
            if plan is None:
                break
            t1 = time.perf_counter()
            state.seconds = 0.0
            probed = SparkProbe(spark, inputs) if probe else None
            with probed or contextlib.nullcontext():
                t1p = time.perf_counter()
                record = process_epoch(rt, spark, plan.epoch)
                t2 = time.perf_counter()
            t2p = time.perf_counter()
            with Py4JCounter() as commit_calls:
                checkpoint = commit_epoch(rt, plan.epoch, record.attempt)
            t3 = time.perf_counter()
            result = checkpoint.result
            assert result is not None
            ref = result.state
            files = [v for part in ref.parts for _, v in part.files] or [
                v for _, v in ref.files or ()
            ]
            size = sum(int(v.split(":", 1)[0]) for v in files)
            epochs.append(
                EpochTimes(
                    t1 - t0,
                    t2 - t1p,
                    t3 - t2p,
                    state.seconds,
                    size,
                    ref.rows,
                    result.stats.records_read,
                    probed.counts if probed else None,
                    plan_calls.calls,
                    commit_calls.calls,
                    (t1p - t1) + (t2p - t2),
                )
            )
    return epochs


def steady_work(epochs: list[EpochTimes]) -> dict[str, Any]:
    """The medians of the probed counts over the steady epochs (every epoch but the first,
    which loads no state; the only one when there is one)."""
    steady = epochs[1:] or epochs
    work = [e.work for e in steady if e.work is not None]
    if not work:
        return {}
    return {
        **Counts.median(work),
        "plan_py4j": statistics.median(e.plan_py4j for e in steady),
        "commit_py4j": statistics.median(e.commit_py4j for e in steady),
        "steady": len(work),
    }


def run_sluice(
    report: Report,
    spark: Any,
    ds: Dataset,
    files_per_epoch: int,
    plain: dict[str, float],
    runs: list[tuple[str, int, bool]],
    queries: list[str],
) -> None:
    """Each query at each (format, qos, strict schema) of ``runs``: after a warm-up and one
    untimed round of every level, measured twice, in the order of ``runs`` and then in the
    reverse order (ABBA), reported as the mean of the two. The JVM keeps getting faster over
    a session's first runs (its JIT compiles more of the per-row code): in one fixed order
    the first level measured ran slowest whichever it was (run as qos 2, 1, 0, q5 Parquet
    took 2.79 / 2.33 / 1.94 s; qos 0 had been the slowest when it ran first)."""
    cores = int(spark.sparkContext.defaultParallelism)
    for query in queries:
        # not timed: the first epochs of a query in a format compile its code (Spark's
        # codegen, the JIT) and build the plans kept per context (JSON lines' parse)
        for fmt in dict.fromkeys(fmt for fmt, _, _ in runs):
            warm = sluice_spec(f"bench_{query}_warm", SPECS[query],
                               bid_source(ds, fmt, files_per_epoch), 2,
                               WORK / "sluice" / f"warm-{query}-{fmt}")  # fmt: skip
            run_sluice_epochs(spark, warm, max_epochs=2, probe=False)
        measured: dict[tuple[str, int, bool], list[Round]] = {run: [] for run in runs}
        # a settling round (every level once, untimed): ABBA cancels a steady drift, not the
        # steeper speed-up of the first runs after the warm-up
        for fmt, qos, strict in runs:
            name = f"bench_{query}_{fmt}_qos{qos}{'_strict' if strict else ''}"
            source = bid_source(ds, fmt, files_per_epoch)
            source["strict_schema"] = strict
            settle = sluice_spec(name, SPECS[query], source, qos, WORK / "sluice" / name / "settle")
            run_sluice_epochs(spark, settle, probe=False)
        for fmt, qos, strict in [*runs, *reversed(runs)]:
            name = f"bench_{query}_{fmt}_qos{qos}{'_strict' if strict else ''}"
            work = WORK / "sluice" / name / str(len(measured[(fmt, qos, strict)]))
            source = bid_source(ds, fmt, files_per_epoch)
            if strict:  # every column type-checked (docs/dead-letters.md)
                source["strict_schema"] = True
            spec = sluice_spec(name, SPECS[query], source, qos, work)
            with timed() as t:
                epochs = run_sluice_epochs(spark, spec)
            seconds = t[0] - sum(e.probe_s for e in epochs)  # the probe's reads not counted
            check = check_output(query, ds, f"{work}/out/*.parquet")
            measured[(fmt, qos, strict)].append((seconds, epochs, check, work))
        for (fmt, qos, strict), rounds in measured.items():
            engine = f"Sluice qos {qos}{' strict' if strict else ''}"
            base = plain.get(query) if fmt == "parquet" else None
            report.add(sluice_row("sluice", engine, query, fmt, qos, cores, rounds, base))


Round = tuple[float, list[EpochTimes], str, Path]  # seconds, epochs, check, work folder


def sluice_row(
    section: str, engine: str, query: str, fmt: str, qos: int, cores: int,
    rounds: list[Round], base: float | None,
) -> Row:  # fmt: skip
    """The row of a run measured in ``rounds`` (the mean of their times; the epochs' medians;
    the state after the last epoch; the Spark work of the last round's steady epochs)."""
    seconds = statistics.mean(r[0] for r in rounds)
    epochs = [e for r in rounds for e in r[1]]
    checks = sorted({r[2] for r in rounds})
    work = rounds[-1][3]
    per_epoch = statistics.median(e.total for e in epochs)
    return Row(
        section,
        engine,
        query,
        fmt,
        sum(e.records for e in rounds[0][1]),
        seconds,
        rows_out(f"{work}/out/*.parquet"),
        checks[0] if len(checks) == 1 else " / ".join(checks),
        extra={
            "qos": qos,
            "cores": cores,
            "rounds": [r[0] for r in rounds],
            "epochs": len(rounds[0][1]),
            "epoch_s": per_epoch,
            "plan_s": statistics.median(e.plan for e in epochs),
            "process_s": statistics.median(e.process for e in epochs),
            "commit_s": statistics.median(e.commit for e in epochs),
            "state_write_s": statistics.median(e.state_write for e in epochs),
            "state_bytes": epochs[-1].state_bytes if epochs else 0,
            "state_bytes_max": max((e.state_bytes for e in epochs), default=0),
            "state_rows": epochs[-1].state_rows if epochs else 0,
            "plain_epoch_s": base,
            "overhead": (per_epoch / base - 1) if base else None,
            "work": steady_work(rounds[-1][1]),
            "probe_s": sum(e.probe_s for e in epochs),
        },
    )


# Sluice's runs of the joins: (format, qos)
JOIN_RUNS = (("parquet", 0), ("parquet", 2), ("jsonl", 2))


def join_spec_file(
    ds: Dataset, query: str, name: str, fmt: str, files_per_epoch: int, qos: int, work: Path
) -> Path:
    """Write the join spec of ``query`` (:func:`bench.nexmark_joins.join_spec`) into a new
    ``work``; sinks and checkpoints there."""
    import yaml

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = joins.join_spec(query, name, ds.root, fmt, files_per_epoch, qos, work)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sluice_join_run(
    ds: Dataset, query: str, name: str, fmt: str, files_per_epoch: int, qos: int, work: Path,
    spark: Any, *, max_epochs: int | None = None, probe: bool = True,
) -> tuple[float, list[EpochTimes]]:  # fmt: skip
    """One run of join ``query`` into a new ``work`` (its output in ``work/out``): the
    seconds (the probe's reads not counted) and the epochs. The full q7 runs its first stage
    (the bench's q7 spec, ``work``'s sibling ``-max``) to the end, then its second
    (:func:`bench.nexmark_joins.full_q7_rows_spec`); its epochs are both stages'."""
    import yaml
    from sluice.nexmark import NexmarkConfig

    with timed() as t:
        if query != joins.FULL_Q7:
            spec = join_spec_file(ds, query, name, fmt, files_per_epoch, qos, work)
            epochs = run_sluice_epochs(spark, spec, max_epochs=max_epochs, probe=probe)
        else:
            first_work = work.with_name(f"{work.name}-max")
            first = sluice_spec(f"{name}_max", SPECS["q7"], bid_source(ds, fmt, files_per_epoch),
                                qos, first_work)  # fmt: skip
            epochs = run_sluice_epochs(spark, first, max_epochs=max_epochs, probe=probe)
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            span_s = -(-files_per_epoch * ds.file_events // NexmarkConfig().events_per_second)
            second = joins.full_q7_rows_spec(
                name, first_work / "out", ds.dir(fmt), fmt, files_per_epoch, qos, work, span_s
            )
            path = work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(second, sort_keys=False))
            epochs += run_sluice_epochs(spark, path, max_epochs=max_epochs, probe=probe)
    return t[0] - sum(e.probe_s for e in epochs), epochs


def run_sluice_joins(
    report: Report, spark: Any, ds: Dataset, files_per_epoch: int, queries: list[str],
    runs: tuple[tuple[str, int], ...] = JOIN_RUNS,
) -> None:  # fmt: skip
    """The joins as :func:`run_sluice` runs the bid queries: two warm-up epochs per format, a
    settling round, then every run twice in ABBA order, reported as the mean. Each epoch
    reads ``files_per_epoch`` files of each side."""
    cores = int(spark.sparkContext.defaultParallelism)
    for query in queries:
        for fmt in dict.fromkeys(fmt for fmt, _ in runs):  # not timed: codegen, the JIT
            sluice_join_run(ds, query, f"bench_{query}_warm", fmt, files_per_epoch, 2,
                            WORK / "sluice" / f"warm-{query}-{fmt}", spark, max_epochs=2,
                            probe=False)  # fmt: skip
        for fmt, qos in runs:  # the settling round
            name = f"bench_{query}_{fmt}_qos{qos}"
            sluice_join_run(ds, query, name, fmt, files_per_epoch, qos,
                            WORK / "sluice" / name / "settle", spark, probe=False)  # fmt: skip
        measured: dict[tuple[str, int], list[Round]] = {run: [] for run in runs}
        for fmt, qos in [*runs, *reversed(runs)]:
            name = f"bench_{query}_{fmt}_qos{qos}"
            work = WORK / "sluice" / name / str(len(measured[(fmt, qos)]))
            seconds, epochs = sluice_join_run(ds, query, name, fmt, files_per_epoch, qos, work,
                                              spark)  # fmt: skip
            check = check_join_output(query, f"{work}/out/*.parquet")
            measured[(fmt, qos)].append((seconds, epochs, check, work))
        for (fmt, qos), rounds in measured.items():
            engine = f"Sluice qos {qos}"
            row = sluice_row("join-sluice", engine, query, fmt, qos, cores, rounds, None)
            if query == joins.FULL_Q7:  # the bids once, not once per stage
                row.events = ds.join_records(query)
            report.add(row)


def rows_out(glob: str) -> int:
    con = duckdb_connection()
    try:
        files = list(Path(glob).parent.glob(Path(glob).name))
        if not files:
            return 0
        return int(con.execute(f"SELECT count(*) FROM read_parquet('{glob}')").fetchone()[0])
    finally:
        con.close()


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def run_sss(
    report: Report, spark: Any, ds: Dataset, files_per_epoch: int, formats: list[str],
    queries: list[str],
) -> None:  # fmt: skip
    """Structured Streaming: AvailableNow over the same files, RocksDB state, a checkpoint
    location; one micro-batch per epoch's worth of files. Each query first runs once over a
    folder holding the first file only (not timed), as Sluice's runs are warmed up."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    for fmt in formats:
        for query in queries:
            first = WORK / "sss" / f"warm-{fmt}" / "in"
            shutil.rmtree(first.parent, ignore_errors=True)
            first.mkdir(parents=True)
            (first / ds.files(fmt)[0].name).symlink_to(ds.files(fmt)[0])
            sss_run(spark, query, fmt, first, first.parent / query, 1)  # not measured
            work = WORK / "sss" / f"{query}-{fmt}"
            with SparkProbe(spark, [ds.dir(fmt)]) as probe, timed() as t:
                progress, calls = sss_run(spark, query, fmt, ds.dir(fmt), work, files_per_epoch)
            batches = [p for p in progress if p.get("numInputRows", 0) > 0]
            check = check_output(query, ds, f"{work}/out/*.parquet")
            report.add(
                Row(
                    "sss",
                    "Spark Structured Streaming",
                    query,
                    fmt,
                    sum(int(p["numInputRows"]) for p in progress),
                    t[0],
                    rows_out(f"{work}/out/*.parquet"),
                    check,
                    extra={
                        "batches": len(progress),
                        "data_batches": len(batches),
                        "epoch_s": statistics.median(
                            p["durationMs"]["triggerExecution"] / 1000 for p in batches
                        )
                        if batches
                        else None,
                        "state_store": "RocksDB",
                        "work": sss_work(probe.work, batches, calls),
                    },
                )
            )


def available_now(frame: Any, work: Path) -> Any:
    """Start ``frame`` as an AvailableNow query into ``work/out`` (Parquet, append, its
    checkpoint in ``work/checkpoint``) and wait for it to end: the finished query."""
    running = (
        frame.writeStream.format("parquet")
        .option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    running.awaitTermination()
    return running


def sss_run(
    spark: Any, query: str, fmt: str, folder: Path, work: Path, files_per_trigger: int
) -> tuple[list[dict[str, Any]], int]:
    """One AvailableNow run of ``query`` over ``folder`` into ``work``: its progress list and
    the Py4J calls Python made to define, start and await it."""
    shutil.rmtree(work, ignore_errors=True)
    with Py4JCounter() as calls:
        reader = spark.readStream.schema(BID_DDL).option("maxFilesPerTrigger", files_per_trigger)
        df = reader.parquet(str(folder)) if fmt == "parquet" else reader.json(str(folder))
        running = available_now(spark_query(query, df, streaming=True), work)
    return list(running.recentProgress), calls.calls


def run_sss_joins(
    report: Report, spark: Any, ds: Dataset, files_per_epoch: int, formats: list[str],
    queries: list[str],
) -> None:  # fmt: skip
    """The joins in Structured Streaming: a file stream per side (``maxFilesPerTrigger`` =
    an epoch's files each: a micro-batch reads the same event range of both), a stream-stream
    join (:func:`bench.nexmark_joins.sss_query`), AvailableNow, RocksDB state. Each query
    first runs once over the first file of each side (not timed)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    for fmt in formats:
        for query in queries:
            first = WORK / "sss" / f"warm-joins-{fmt}" / "in"
            shutil.rmtree(first.parent, ignore_errors=True)
            for kind in joins.kinds(query):
                (first / kind).mkdir(parents=True)
                head = ds.files(fmt, kind)[0]
                (first / kind / head.name).symlink_to(head)
            sss_join_run(spark, query, fmt, first, first.parent / query, 1)  # not measured
            work = WORK / "sss" / f"{query}-{fmt}"
            inputs = [ds.dir(fmt, kind) for kind in joins.kinds(query)]
            with SparkProbe(spark, inputs) as probe, timed() as t:
                progress, calls = sss_join_run(
                    spark, query, fmt, ds.root / fmt, work, files_per_epoch
                )
            batches = [p for p in progress if p.get("numInputRows", 0) > 0]
            report.add(
                Row(
                    "join-sss",
                    "Spark Structured Streaming",
                    query,
                    fmt,
                    # not numInputRows: the JSON reader counts the rows its pushed-down filters
                    # (q3's) let through
                    ds.join_records(query),
                    t[0],
                    rows_out(f"{work}/out/*.parquet"),
                    check_join_output(query, f"{work}/out/*.parquet"),
                    extra={
                        "batches": len(progress),
                        "data_batches": len(batches),
                        "epoch_s": statistics.median(
                            p["durationMs"]["triggerExecution"] / 1000 for p in batches
                        )
                        if batches
                        else None,
                        "state_store": "RocksDB",
                        "input_rows": sum(int(p["numInputRows"]) for p in progress),
                        "state_rows": _sss_state_rows(progress),
                        # the full q7's two queries number their micro-batches alike: the
                        # probe cannot tell their jobs apart
                        "work": {}
                        if query == joins.FULL_Q7
                        else sss_work(probe.work, batches, calls),
                    },
                )
            )


def sss_join_run(
    spark: Any, query: str, fmt: str, folder: Path, work: Path, files_per_trigger: int
) -> tuple[list[dict[str, Any]], int]:
    """One AvailableNow run of join ``query`` over ``folder``'s ``person/`` and ``auction/``
    into ``work``: its progress list and the Py4J calls Python made to define, start and
    await it."""
    if query == joins.FULL_Q7:
        return sss_full_q7_run(spark, fmt, folder / "bid", work, files_per_trigger)
    shutil.rmtree(work, ignore_errors=True)
    with Py4JCounter() as calls:
        sides = []
        for name, kind in joins.SIDES.items():
            reader = spark.readStream.schema(joins.ddl(joins.SCHEMAS[name]))
            reader = reader.option("maxFilesPerTrigger", files_per_trigger)
            path = str(folder / kind)
            sides.append(reader.parquet(path) if fmt == "parquet" else reader.json(path))
        running = available_now(joins.sss_query(query, *sides), work)
    return list(running.recentProgress), calls.calls


def sss_full_q7_run(
    spark: Any, fmt: str, bids: Path, work: Path, files_per_trigger: int
) -> tuple[list[dict[str, Any]], int]:
    """The full q7 in Structured Streaming: q7 (:func:`sss_run`) over ``bids`` into
    ``work``'s sibling ``-max`` to the end, then the join of its output file stream with the
    bid stream (:func:`bench.nexmark_joins.sss_full_q7_rows`; an epoch's bid files per
    micro-batch, every maximum in the first) into ``work``: both queries' progress lists
    and Py4J calls."""
    first_work = work.with_name(f"{work.name}-max")
    progress, calls = sss_run(spark, "q7", fmt, bids, first_work, files_per_trigger)
    shutil.rmtree(work, ignore_errors=True)
    with Py4JCounter() as second_calls:
        maxima_ddl = joins.ddl(joins.MAXIMA_SCHEMA)
        maxima = spark.readStream.schema(maxima_ddl).parquet(str(first_work / "out"))
        reader = spark.readStream.schema(BID_DDL).option("maxFilesPerTrigger", files_per_trigger)
        bid_stream = reader.parquet(str(bids)) if fmt == "parquet" else reader.json(str(bids))
        running = available_now(joins.sss_full_q7_rows(maxima, bid_stream), work)
    return [*progress, *running.recentProgress], calls + second_calls.calls


def _sss_state_rows(progress: list[dict[str, Any]]) -> int | None:
    """The rows in the join's state stores after the last micro-batch."""
    if not progress:
        return None
    return sum(int(op.get("numRowsTotal", 0)) for op in progress[-1].get("stateOperators", []))


def sss_work(work: Work, batches: list[dict[str, Any]], calls: int) -> dict[str, Any]:
    """The medians of the probed counts over the steady micro-batches (those with data but the
    first), each batch's jobs and executions told apart by their description (``batch = N``).
    Py4J calls: the whole run's (define, start, await): a micro-batch itself makes none, the
    stream thread runs in the JVM."""
    ids = sorted(int(p["batchId"]) for p in batches)
    steady = ids[1:] or ids
    runs = [
        replace(work.counts(lambda d, b=b: streaming_batch(d) == b), py4j_calls=calls)
        for b in steady
    ]
    if any(r.jobs == 0 for r in runs):
        raise RuntimeError(f"no Spark job found for some of micro-batches {steady}")
    return {**Counts.median(runs), "steady": len(runs)}


# --- PyFlink ----------------------------------------------------------------------------


def run_flink(
    report: Report, ds: Dataset, formats: list[str], interval: str, queries: list[str]
) -> None:
    script = ROOT / "bench" / "peers" / "flink_nexmark.py"
    if not FLINK_PYTHON.exists():
        report.notes.append(
            f"PyFlink skipped: no {FLINK_PYTHON.relative_to(ROOT)} (make flink-venv creates it)"
        )
        say(report.notes[-1])
        return
    for fmt in formats:
        for query in queries:
            join = query in joins.JOIN_QUERIES
            work = WORK / "flink" / f"{query}-{fmt}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            # q3 and q8: person/ and auction/
            folder = ds.root / fmt if join and query != joins.FULL_Q7 else ds.dir(fmt)
            command = [
                str(FLINK_PYTHON), str(script), "--input", str(folder), "--format", fmt,
                "--query", query, "--out", str(work / "out"),
                "--checkpoints", str(work / "checkpoints"), "--parallelism", "2",
                "--checkpoint-interval", interval,
            ]  # fmt: skip
            with timed() as t:
                done = subprocess.run(command, capture_output=True, text=True, check=False)
            result = next(
                (
                    json.loads(line.split(" ", 1)[1])
                    for line in done.stdout.splitlines()
                    if line.startswith("FLINK_RESULT ")
                ),
                None,
            )
            if done.returncode != 0 or result is None:
                tail = (done.stderr or done.stdout)[-2000:]
                report.notes.append(f"PyFlink {query} {fmt} failed ({done.returncode}): {tail}")
                say(report.notes[-1])
                continue
            out_glob = result.get("output_glob") or f"{work}/out/*.parquet"
            if query == joins.FULL_Q7:  # Flink closes every window at the end of its input
                check = check_join_output(query, out_glob, closed_before_us=last_bid_us(ds))
            elif join:
                check = check_join_output(query, out_glob)
            else:
                check = check_output(query, ds, out_glob, closed_only=True)
            report.add(
                Row(
                    "join-flink" if join else "flink",
                    "PyFlink",
                    query,
                    fmt,
                    # the full q7's: the bids once (its job may scan them twice)
                    ds.join_records(query)
                    if query == joins.FULL_Q7
                    else int(
                        result.get("events") or (ds.join_records(query) if join else ds.bids())
                    ),
                    float(result["seconds"]),
                    result.get("rows_out"),
                    check,
                    extra={
                        "checkpoints": result.get("checkpoints_completed"),
                        "startup_s": result.get("startup_seconds"),
                        "plan_s": result.get("plan_seconds"),
                        "checkpoints_failed": result.get("checkpoints_failed"),
                        "checkpoint_s": result.get("checkpoint_seconds"),
                        "wall_s": t[0],
                        "version": result.get("flink_version"),
                    },
                )
            )


# --- fixed cost of an epoch ------------------------------------------------------------


def trickle_file(folder: Path, n: int) -> None:
    """The n-th one-bid file of the fixed-cost pipeline (bid n, n seconds after the start)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * SECOND_US)
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "event_id": [n],
            "auction": [n % 7],
            "bidder": [n % 5],
            "price": [100 + n],
            "channel": ["c"],
            "url": ["u"],
            "date_time": pa.array([start + n * SECOND_US], pa.timestamp("us", tz="UTC")),
            "extra": [""],
        }
    )
    pq.write_table(table, folder / f"events-{n:012d}.parquet")


def run_fixed(report: Report, spark: Any, repeats: int) -> None:
    """A near-empty epoch (one new 1-bid file) of q5, cold and warm. An epoch with no new
    data at all is never run: plan finds nothing and the DAG run ends there."""
    work = WORK / "fixed"
    source = {"type": "files", "path": str(work / "in" / "bid"), "format": "parquet",
              "schema": dict(BID_SCHEMA)}  # fmt: skip
    modes: dict[str, list[dict[str, float]]] = {}

    # cold: every step a new process, process a new Spark driver (spark-submit), as the DAG
    spec = sluice_spec("bench_fixed_cold", SPECS["q5"], source, 2, work / "cold")
    shutil.rmtree(work / "in", ignore_errors=True)
    cold: list[dict[str, float]] = []
    for n in range(repeats + 1):  # the first epoch starts the state: not counted
        trickle_file(work / "in" / "bid", n)
        steps = cold_epoch(spec, n + 1)
        if n:
            cold.append(steps)
    modes["cold (new processes, spark-submit)"] = cold

    # warm: the long-lived session of this process
    shutil.rmtree(work / "in", ignore_errors=True)
    spec = sluice_spec("bench_fixed_warm", SPECS["q5"], source, 2, work / "warm")
    warm: list[dict[str, float]] = []
    for n in range(repeats + 1):
        trickle_file(work / "in" / "bid", n)
        # not probed: draining the listener bus before process would hide part of the cost
        (e,) = run_sluice_epochs(spark, spec, max_epochs=1, probe=False)
        if n:
            warm.append({"plan": e.plan, "process": e.process, "commit": e.commit})
    modes["warm (long-lived session, in-process)"] = warm

    served = run_fixed_served(work, source, repeats)
    if served:
        modes["warm (sluice serve, one request per epoch)"] = served[-repeats:]
        # the same server's first epochs (after the one that starts the state): a new JVM
        # compiles Spark's planning code as it goes, which the long-lived session above
        # (it ran every other section first) has done long before
        modes["warm (sluice serve), a new server's epochs 2-6"] = served[:repeats]

    for mode, runs in modes.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in ("plan", "process", "commit")}
        total = statistics.median(sum(r.values()) for r in runs)
        report.add(
            Row(
                "fixed",
                mode,
                "q5",
                "parquet",
                1,
                total,
                None,
                "",
                extra={**{f"{k}_s": v for k, v in medians.items()}, "repeats": len(runs)},
            )
        )


def cold_epoch(spec: Path, epoch: int) -> dict[str, float]:
    """One epoch as the DAG's cold execution runs it: ``sluice plan``, a ``spark-submit`` of
    jobs/run_epoch.py (a new Spark driver), ``sluice commit``, each a new process; seconds
    per step."""
    from sluice.spark import engine_jars, submit_conf

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    sluice_cli = str(Path(sys.executable).parent / "sluice")
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in submit_conf().items():
        submit += ["--conf", f"{key}={value}"]
    jars = ",".join(str(p) for p in engine_jars())
    if jars:
        submit += ["--jars", jars]
    run = [*submit, str(ROOT / "jobs" / "run_epoch.py"), "--spec", str(spec), "--epoch", str(epoch)]
    steps: dict[str, float] = {}
    for step, command in (
        ("plan", [sluice_cli, "plan", str(spec)]),
        ("process", run),
        ("commit", [sluice_cli, "commit", str(spec)]),
    ):
        with timed() as t:
            done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{step} of epoch {epoch} of {spec} failed:\n{done.stderr[-4000:]}")
        steps[step] = t[0]
    return steps


# Epochs a new server runs before it is measured (JIT, codegen): the in-process session it is
# compared with has run every section before; a server lives for days. Its first epochs are
# reported too.
SERVED_WARM_UP = 30


def run_fixed_served(work: Path, source: dict[str, Any], repeats: int) -> list[dict[str, float]]:
    """The same through ``sluice serve`` (the DAG's warm execution, docs/warm-execution.md): a
    server process with its own long-lived Spark driver; plan and commit here (the DAG's
    Python tasks), process one HTTP request an epoch."""
    from sluice.protocol import commit_epoch, plan_epoch
    from sluice.serve import ServeClient, ServeError
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    shutil.rmtree(work / "in", ignore_errors=True)
    spec = sluice_spec("bench_fixed_served", SPECS["q5"], source, 2, work / "served")
    rt = runtime(load_spec(str(spec)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = secrets.token_urlsafe(24)
    log = (work / "serve.log").open("wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "sluice"), "serve", "--port", str(port),
         "--master", f"local[{os.cpu_count() or 2}]", "--pipelines-dir", str(spec.parent)],
        env={**os.environ, "SLUICE_SERVE_TOKEN": token, "SLUICE_SERVE_STATE_DIR": str(work / "st")},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    client = ServeClient(f"http://127.0.0.1:{port}", token, timeout=120)
    steps: list[dict[str, float]] = []
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                client.health()
                break
            except ServeError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"no sluice serve: see {work}/serve.log") from None
                time.sleep(0.2)
        for n in range(repeats + SERVED_WARM_UP):  # state start and the server's warm-up
            trickle_file(work / "in" / "bid", n)
            t0 = time.perf_counter()
            plan = plan_epoch(rt)
            assert plan is not None
            t1 = time.perf_counter()
            client.process(spec, plan.epoch, f"bench_{n}")
            t2 = time.perf_counter()
            commit_epoch(rt, plan.epoch)
            t3 = time.perf_counter()
            if n:  # the first epoch starts the state
                steps.append({"plan": t1 - t0, "process": t2 - t1, "commit": t3 - t2})
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
        log.close()
    return steps


# --- scaling ----------------------------------------------------------------------------


def keyed_files(folder: Path, total_keys: int, touched: int, epochs: int) -> None:
    """File 0: one record for each of ``total_keys`` keys; files 1..epochs: ``touched``
    records over a fixed spread of keys. All in one day: the 1-day windows never close, so
    the state holds every key."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * SECOND_US)
    folder.mkdir(parents=True, exist_ok=True)
    keys = np.arange(total_keys, dtype=np.int64)
    times = start + np.arange(total_keys, dtype=np.int64)
    t0 = start + total_keys
    spread = np.linspace(0, total_keys - 1, touched).astype(np.int64)
    chunks = [(keys, times)] + [
        (spread, t0 + e * touched + np.arange(touched, dtype=np.int64)) for e in range(epochs)
    ]
    for i, (k, t) in enumerate(chunks):
        table = pa.table(
            {
                "key": pa.array(k, pa.int64()),
                "value": pa.array(k % 100, pa.int64()),
                "ts": pa.array(t, pa.timestamp("us", tz="UTC")),
            }
        )
        pq.write_table(table, folder / f"part-{i:06d}.parquet")


def run_scaling(report: Report, spark: Any, state_sizes: list[int], epoch_sizes: list[int],
                touched: int) -> None:  # fmt: skip
    from sluice.nexmark import write_files

    # the first run is not timed: it compiles the code (Spark's codegen, the JIT), as the
    # first run of every other section is (without it the smallest state pays it alone)
    for n, keys in enumerate([min(state_sizes), *state_sizes]):
        spec = _state_spec("bench_state", WORK / "scaling" / f"state-{keys}", keys, touched)
        epochs = run_sluice_epochs(spark, spec, probe=False)
        if n == 0:
            continue
        first, rest = epochs[0], epochs[1:]
        report.add(
            Row(
                "scaling-state",
                "Sluice qos 2",
                "tumbling 1d per key",
                "parquet",
                touched,
                statistics.median(e.total for e in rest),
                None,
                "",
                extra={
                    "state_keys": keys,
                    "touched_keys": touched,
                    "first_epoch_s": first.total,
                    # the epoch that builds the stored windows' index in memory (windows/index.py)
                    "slowest_s": max(e.total for e in rest),
                    "process_s": statistics.median(e.process for e in rest),
                    "state_write_s": statistics.median(e.state_write for e in rest),
                    "state_bytes": rest[-1].state_bytes,
                    "state_rows": rest[-1].state_rows,
                },
            )
        )
    run_scaling_cold(report, [min(state_sizes), max(state_sizes)], touched)
    for size in epoch_sizes:
        data = CACHE / "nexmark" / f"epochs-{size}"
        if not (data / ".complete").exists():
            shutil.rmtree(data, ignore_errors=True)
            write_files(str(data), 0, 2 * size, format="parquet", events_per_file=size)
            for kind in ("person", "auction"):
                shutil.rmtree(data / kind, ignore_errors=True)
            (data / ".complete").write_text("ok\n")
        source = {"type": "files", "path": str(data / "bid"), "format": "parquet",
                  "schema": dict(BID_SCHEMA), "max_files_per_epoch": 1}  # fmt: skip
        spec = sluice_spec(
            "bench_epochs", SPECS["q11"], source, 2, WORK / "scaling" / f"epochs-{size}"
        )
        epochs = run_sluice_epochs(spark, spec, probe=False)
        last = epochs[-1]
        report.add(
            Row(
                "scaling-epoch",
                "Sluice qos 2",
                "q11",
                "parquet",
                last.records,
                last.total,
                None,
                "",
                extra={
                    "events_per_epoch": size,
                    "first_epoch_s": epochs[0].total,
                    "process_s": last.process,
                    "state_rows": last.state_rows,
                    "state_bytes": last.state_bytes,
                },
            )
        )


def _state_spec(name: str, work: Path, keys: int, touched: int, epochs: int = 3) -> Path:
    """The state-scaling pipeline (1-day windows per key, on_close) over fresh input: a file
    of ``keys`` keys, then ``epochs`` files of ``touched`` keys (:func:`keyed_files`)."""
    shutil.rmtree(work, ignore_errors=True)
    keyed_files(work / "in", keys, touched, epochs)
    source = {"type": "files", "path": str(work / "in"), "format": "parquet",
              "schema": {"key": "long", "value": "long", "ts": "timestamp"},
              "max_files_per_epoch": 1, "event_time": "ts"}  # fmt: skip
    body = {"key_by": ["key"], "window": {"type": "tumbling", "size": "1d"}, "emit": "on_close",
            "aggregates": {"n": "count(*)", "total": "sum(value)"}}  # fmt: skip
    return sluice_spec(name, body, source, 2, work / "run")


def run_scaling_cold(report: Report, state_sizes: list[int], touched: int) -> None:
    """The same in cold mode (#35): every epoch a new ``spark-submit`` (:func:`cold_epoch`),
    which knows nothing of the state but what the checkpoint store holds. The epoch that
    loads the keys is not counted; the median of the three after it is."""
    for keys in state_sizes:
        spec = _state_spec("bench_state_cold", WORK / "scaling" / f"cold-{keys}", keys, touched)
        epochs = [cold_epoch(spec, n + 1) for n in range(4)]
        first, rest = epochs[0], epochs[1:]
        report.add(
            Row(
                "scaling-state-cold",
                "Sluice qos 2, cold (spark-submit per epoch)",
                "tumbling 1d per key",
                "parquet",
                touched,
                statistics.median(sum(e.values()) for e in rest),
                None,
                "",
                extra={
                    "state_keys": keys,
                    "touched_keys": touched,
                    "first_epoch_s": sum(first.values()),
                    "process_s": statistics.median(e["process"] for e in rest),
                    "slowest_s": max(sum(e.values()) for e in rest),
                },
            )
        )


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    args = _parser().parse_args()
    if args.quick:
        defaults = {"events": 500_000, "epoch_events": 250_000, "file_events": 50_000,
                    "state_sizes": "10000,100000", "epoch_sizes": "10000,100000,250000",
                    "repeats": 2, "out": RESULTS / "quick.md",
                    "flink_checkpoint_interval": "2s"}  # fmt: skip
        for key, value in defaults.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    args.events = args.events or 10_000_000
    args.epoch_events = args.epoch_events or 1_000_000
    args.file_events = args.file_events or 100_000
    args.state_sizes = args.state_sizes or "10000,100000,1000000,10000000"
    args.epoch_sizes = args.epoch_sizes or "10000,100000,1000000,10000000"
    args.repeats = args.repeats or 5
    args.flink_checkpoint_interval = args.flink_checkpoint_interval or "10s"
    args.out = Path(args.out or RESULTS / "latest.md")
    if args.epoch_events % args.file_events:
        raise SystemExit("--epoch-events must be a multiple of --file-events")
    sections = args.sections.split(",") if args.sections else list(SECTIONS)
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    queries = args.queries.split(",") if args.queries else [*QUERIES, *joins.JOIN_QUERIES]
    unknown = set(queries) - {*QUERIES, *joins.JOIN_QUERIES}
    if unknown:
        raise SystemExit(f"unknown queries {sorted(unknown)}; choose from "
                         f"{', '.join([*QUERIES, *joins.JOIN_QUERIES])}")  # fmt: skip
    bid_queries = [q for q in QUERIES if q in queries]
    join_queries = [q for q in joins.JOIN_QUERIES if q in queries]
    formats = ["parquet", "jsonl"]
    files_per_epoch = args.epoch_events // args.file_events
    command = " ".join(["bench/nexmark.py", *sys.argv[1:]])
    report = Report(args.label or command, args, args.out)
    say(f"{report.command}: {machine()}, {cpu_model()}; sections {', '.join(sections)}")

    ds = write_dataset(report, args.events, args.file_events, formats)
    duck = run_duckdb(report, ds, formats, [*bid_queries, *join_queries])
    REFERENCE.update(duck)
    spark = None
    try:
        if set(sections) & {"plain", "sluice", "sss", "fixed", "scaling"}:
            from sluice.spark import spark_session

            # PROBE_CONF: a longer status-store history and whole scan locations (bench/probe.py)
            spark = spark_session(
                "sluice-nexmark-bench",
                extra_conf={"spark.driver.memory": args.driver_memory, **PROBE_CONF},
            )
            warm_up(spark, ds, files_per_epoch)
        plain: dict[str, float] = {}
        if "plain" in sections:
            plain = run_plain(report, spark, ds, files_per_epoch, bid_queries)
        if "sluice" in sections:
            runs = [("parquet", 0, False), ("parquet", 1, False), ("parquet", 2, False),
                    ("jsonl", 2, False), ("jsonl", 2, True)]  # fmt: skip
            run_sluice(report, spark, ds, files_per_epoch, plain, runs, bid_queries)
            run_sluice_joins(report, spark, ds, files_per_epoch, join_queries)
        if "sss" in sections:
            run_sss(report, spark, ds, files_per_epoch, formats, bid_queries)
            run_sss_joins(report, spark, ds, files_per_epoch, formats, join_queries)
        if "flink" in sections:
            run_flink(report, ds, formats, args.flink_checkpoint_interval,
                      [*bid_queries, *join_queries])  # fmt: skip
        if "fixed" in sections:
            run_fixed(report, spark, args.repeats)
        if "scaling" in sections:
            run_scaling(
                report, spark, ints(args.state_sizes), ints(args.epoch_sizes), args.touched_keys
            )
    finally:
        if spark is not None:
            spark.stop()
    report.notes.append(f"total bench time {time.perf_counter() - report.started:.0f} s")
    report.write(final=True)
    print(args.out.read_text())
    return 0


def warm_up(spark: Any, ds: Dataset, files_per_epoch: int) -> None:
    """One small Sluice epoch and one batch query before anything is timed (JIT, Python
    workers, class loading), so the first measured engine does not pay for them."""
    work = WORK / "warm-up"
    spec = sluice_spec("bench_warm_up", SPECS["q5"], bid_source(ds, "parquet", 1), 2, work)
    run_sluice_epochs(spark, spec, max_epochs=1, probe=False)
    spark_query("q11", read_batch(spark, "parquet", [str(ds.files("parquet")[0])])).count()


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke-size defaults (make bench-quick)"
    )
    parser.add_argument("--events", type=int, default=None, help="Nexmark events (default 10M)")
    parser.add_argument("--epoch-events", type=int, default=None, help="events per epoch (1M)")
    parser.add_argument("--file-events", type=int, default=None, help="events per file (100k)")
    parser.add_argument("--sections", default=None, help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--queries", default=None,
                        help=f"comma list of {', '.join([*QUERIES, *joins.JOIN_QUERIES])} "
                        "(default all)")  # fmt: skip
    parser.add_argument("--state-sizes", default=None, help="total keys (10k..10M)")
    parser.add_argument("--epoch-sizes", default=None, help="events per epoch (10k..10M)")
    parser.add_argument("--touched-keys", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=None, help="fixed-cost epochs (5)")
    parser.add_argument("--flink-checkpoint-interval", default=None, help="10s (quick: 2s)")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--label", default=None, help="the command recorded in every row")
    parser.add_argument("--out", default=None, help="report path (bench/results/latest.md)")
    return parser


if __name__ == "__main__":
    raise SystemExit(main())
