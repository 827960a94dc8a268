"""Nexmark q0 / q5 / q7 / q11 (window TVFs), the full q7 and the joins q3 / q8 on Apache
Flink (PyFlink, Flink SQL): the peer that ``bench/nexmark.py --sections flink`` compares
Sluice with.

    .cache/bench/flink-venv/bin/python bench/peers/flink_nexmark.py \\
        --input DIR --format jsonl|parquet --query q0|q5|q7|q11|q7full|q3|q8 --out OUTDIR \\
        --checkpoints CKDIR [--parallelism 2] [--checkpoint-interval 10s] [--log-dir DIR]
    .cache/bench/flink-venv/bin/python bench/peers/flink_nexmark.py --self-check

``scripts/flink-venv.sh`` makes the venv (``apache-flink==2.3.0``, Java 17) and puts the jars
Flink does not ship into PyFlink's ``lib/``: ``flink-sql-parquet`` with the Hadoop client it
needs (the output is always Parquet, so JSON runs need them too) and ``sluice-bench-flink.jar``
(``bench/peers/java``). ``DIR`` holds the bid files ``sluice.nexmark.write_files`` writes
(``events-<first>-<last>.jsonl|.parquet``; a folder with a ``bid/`` subfolder works too); for
q3 and q8, the folder with the ``person/`` and ``auction/`` subfolders it writes beside.

The job: STREAMING mode on a local MiniCluster (one TaskManager, ``--parallelism`` slots),
EXACTLY_ONCE checkpoints every ``--checkpoint-interval`` to ``file://CKDIR``, a bounded file
source, watermark = the rowtime less one unit (no other out-of-orderness: each source subtask
reads its files in event order, see ``OrderedSplitAssigner.java``), ``table.local-time-zone =
UTC``:

* q0 pass-through: event_id, auction, bidder, price, channel, url, date_time, extra;
* q5 first stage: HOP 10 s every 2 s per auction: auction, window_start, window_end, bids;
* q7 first stage: TUMBLE 10 s, no key: window_start, window_end, max_price, bids;
* q11: SESSION gap 10 s per bidder: bidder, window_start, window_end, bid_count;
* q7full (the standard q7): a window join of q7's window aggregate (MAX(price) per TUMBLE 10 s)
  with the bids' TUMBLE 10 s on price = max_price: every bid carrying its window's highest
  price: auction, price, bidder, date_time, extra, window_start;
* q8: a window join (TUMBLE 10 s on each side, joined on id = seller and the window): every
  (person, auction) pair of a window: id, name, window_start, auction;
* q3: an interval join (auction time within 1 min of the person's, so the state is bounded)
  on id = seller, persons of OR / ID / CA, category-10 auctions: name, city, state, id.

Every window closes at the end of the input (Flink's final MAX_WATERMARK), so the output has
windows that a streaming run would still hold open: compare on ``window_end <= max(date_time)``.
The joins' output is whole (a pair is emitted when both rows are in: the window join's at the
window's end, which the end of the input reaches).

Time: the bids' ``date_time`` has microseconds (a bid every 100 µs), Flink's event time is
milliseconds. q5/q7 use the millisecond rowtime: their windows start on whole seconds, so the
window a bid falls in is the same for its time and its time truncated to the millisecond. A
session's bounds and whether two bids are less than the gap apart are not: q11 runs its session
windows on a microsecond clock (the rowtime's "milliseconds" are the bid's epoch microseconds,
``MICROS_AS_MILLIS``, and the gap is 1000 times 10 s on it) and takes the bounds from the bids
themselves (first bid, last bid + 10 s). Every output is exact to the microsecond.

Output: Parquet files ``OUTDIR/part-*.parquet`` (``.parquet`` appended after the job), timestamps
as INT64 microseconds without a zone, in UTC (DuckDB reads ``TIMESTAMP``). The file sink
commits its files on checkpoints (two-phase: a file is visible once the checkpoint that
covers it completes). Checkpoints seen in a job with Flink 2.3: one as soon as every task
runs, one every interval, and one that Flink triggers when the sinks have finished (the final
commit; the job does not wait for the next interval). Failed ones are Flink's own races at
the edges: a trigger before every task runs, a periodic one declined by tasks that are
closing; ``checkpoint_failures`` lists those Flink records with a reason.

The last line printed is ``FLINK_RESULT {json}``: query, format, events (records the source
emitted, from the job's I/O metrics), rows_out, output_glob, seconds (job submitted to
finished), startup_seconds (process start to job submitted: JVM, MiniCluster, table
environment, and plan_seconds, SQL to submitted job graph), checkpoints_completed /
checkpoints_failed, the completed ones' total duration and the failures' reasons (the job's
checkpoint statistics), parallelism, flink_version. The MiniCluster is started here rather than
per job so that the finished job's statistics are still there to read. Flink's own log goes to
``--log-dir`` (default ``OUTDIR/../flink-log``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

START = time.perf_counter()

BID_COLUMNS = {
    "event_id": "BIGINT",
    "auction": "BIGINT",
    "bidder": "BIGINT",
    "price": "BIGINT",
    "channel": "STRING",
    "url": "STRING",
    "date_time": "TIMESTAMP_LTZ(6)",
    "extra": "STRING",
}
PERSON_COLUMNS = {
    "id": "BIGINT",
    "name": "STRING",
    "city": "STRING",
    "state": "STRING",
    "date_time": "TIMESTAMP_LTZ(6)",
}
AUCTION_COLUMNS = {
    "id": "BIGINT",
    "seller": "BIGINT",
    "category": "BIGINT",
    "date_time": "TIMESTAMP_LTZ(6)",
}
# Flink truncates TIMESTAMP_LTZ(6) to (3) (the millisecond a bid falls in, never the next).
MILLIS_ROWTIME = "CAST(date_time AS TIMESTAMP_LTZ(3))"
# The microsecond clock: one microsecond of the bid's time is one millisecond of event time.
MICROS_ROWTIME = "MICROS_AS_MILLIS(date_time)"
# A watermark W says no record with ts <= W follows. Each source subtask reads its bids in
# time order, but several bids share a millisecond: W = ts would make the rest of the
# millisecond late whenever the periodic watermark falls between them, and a window ending
# on the next millisecond drops them (seen: 9 bids of one q7 window at 10M events, 2 runs in
# 8). W = ts - 1 ms is exact (Flink's own BoundedOutOfOrderness subtracts 1 ms the same way);
# on q11's microsecond clock it is ts - 1 µs.
WATERMARK = "ts - INTERVAL '0.001' SECOND"
UTC = "CAST({} AS TIMESTAMP(6))"  # table.local-time-zone is UTC
SESSION_END = "MAX(date_time) + INTERVAL '10' SECOND"


@dataclass(frozen=True)
class Query:
    """One query: the bid columns it reads, its rowtime ``ts``, its SELECT over view ``bid``
    and the sink's columns. A join (:data:`JOINS`) reads the views of :data:`JOIN_VIEWS`."""

    reads: tuple[str, ...]
    rowtime: str
    select: str
    sink_columns: str


QUERIES = {
    "q0": Query(
        reads=tuple(BID_COLUMNS),
        rowtime=MILLIS_ROWTIME,
        select="SELECT event_id, auction, bidder, price, channel, url, "
        f"{UTC.format('date_time')}, extra FROM bid",
        sink_columns="event_id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, "
        "channel STRING, url STRING, date_time TIMESTAMP(6), extra STRING",
    ),
    "q5": Query(
        reads=("auction", "date_time"),
        rowtime=MILLIS_ROWTIME,
        select="SELECT auction, window_start, window_end, COUNT(*) FROM TABLE(HOP("
        "TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end",
        sink_columns="auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
        "bids BIGINT",
    ),
    "q7": Query(
        reads=("price", "date_time"),
        rowtime=MILLIS_ROWTIME,
        select="SELECT window_start, window_end, MAX(price), COUNT(*) "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end",
        sink_columns="window_start TIMESTAMP(3), window_end TIMESTAMP(3), max_price BIGINT, "
        "bids BIGINT",
    ),
    "q11": Query(
        reads=("bidder", "date_time"),
        rowtime=MICROS_ROWTIME,
        # INTERVAL '10000' SECOND is 10 s on the microsecond clock. window_start/_end are on
        # that clock, so the bounds written are the first bid and the last bid + 10 s.
        select=f"SELECT bidder, {UTC.format('MIN(date_time)')}, {UTC.format(SESSION_END)}, "
        "COUNT(*) FROM TABLE("
        "SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(ts), INTERVAL '10000' SECOND(5))) "
        "GROUP BY bidder, window_start, window_end",
        sink_columns="bidder BIGINT, window_start TIMESTAMP(6), window_end TIMESTAMP(6), "
        "bid_count BIGINT",
    ),
    # a window join may follow a window aggregation (both keep window_start / window_end)
    "q7full": Query(
        reads=("auction", "price", "bidder", "date_time", "extra"),
        rowtime=MILLIS_ROWTIME,
        select=f"SELECT B.auction, B.price, B.bidder, {UTC.format('B.date_time')}, B.extra, "
        "B.window_start FROM (SELECT window_start, window_end, MAX(price) AS max_price "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end) M JOIN "
        "(SELECT auction, price, bidder, date_time, extra, window_start, window_end FROM TABLE("
        "TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND))) B "
        "ON M.window_start = B.window_start AND M.window_end = B.window_end "
        "AND M.max_price = B.price",
        sink_columns="auction BIGINT, price BIGINT, bidder BIGINT, date_time TIMESTAMP(6), "
        "extra STRING, window_start TIMESTAMP(3)",
    ),
}
# A window or interval join of the person and auction views (each with ``ts``, the millisecond
# rowtime: windows start on whole seconds, and the generator's sellers are persons of the last
# seconds, nowhere near the 1 min bound).
JOINS = {
    "q8": Query(
        reads=(),
        rowtime=MILLIS_ROWTIME,
        select="SELECT P.id, P.name, P.window_start, A.id FROM "
        "(SELECT id, name, window_start, window_end FROM TABLE("
        "TUMBLE(TABLE person, DESCRIPTOR(ts), INTERVAL '10' SECOND))) P JOIN "
        "(SELECT id, seller, window_start, window_end FROM TABLE("
        "TUMBLE(TABLE auction, DESCRIPTOR(ts), INTERVAL '10' SECOND))) A "
        "ON P.id = A.seller AND P.window_start = A.window_start "
        "AND P.window_end = A.window_end",
        sink_columns="id BIGINT, name STRING, window_start TIMESTAMP(3), auction BIGINT",
    ),
    "q3": Query(
        reads=(),
        rowtime=MILLIS_ROWTIME,
        select="SELECT P.name, P.city, P.state, A.id FROM auction A, person P "
        "WHERE A.seller = P.id "
        "AND A.ts BETWEEN P.ts - INTERVAL '1' MINUTE AND P.ts + INTERVAL '1' MINUTE "
        "AND P.state IN ('OR', 'ID', 'CA') AND A.category = 10",
        sink_columns="name STRING, city STRING, state STRING, id BIGINT",
    ),
}
# a join's views, each from the subfolder of its name: the columns read
JOIN_VIEWS = {"person": PERSON_COLUMNS, "auction": AUCTION_COLUMNS}
PARQUET_SINK_OPTIONS = {
    "parquet.write.int64.timestamp": "true",  # not INT96
    "parquet.timestamp.time.unit": "micros",
    "parquet.utc-timezone": "true",
}


@dataclass(frozen=True)
class Args:
    input: Path
    format: str
    query: str
    out: Path
    checkpoints: Path
    parallelism: int
    checkpoint_interval: str
    log_dir: Path


@dataclass(frozen=True)
class Result:
    """The ``FLINK_RESULT`` line."""

    query: str
    format: str
    events: int | None
    rows_out: int
    output_glob: str
    seconds: float
    startup_seconds: float
    plan_seconds: float
    checkpoints_completed: int
    checkpoints_failed: int
    checkpoint_seconds: float
    checkpoint_failures: list[str]
    checkpoint_interval: str
    parallelism: int
    job_status: str
    flink_version: str


def parse_args(argv: list[str] | None = None) -> Args | None:
    """The job's arguments, or None for ``--self-check``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--self-check", action="store_true", help="check the install and exit")
    parser.add_argument("--input", type=Path, help="folder of bid files")
    parser.add_argument("--format", choices=["jsonl", "parquet"])
    parser.add_argument("--query", choices=sorted([*QUERIES, *JOINS]))
    parser.add_argument("--out", type=Path, help="output folder (new or empty)")
    parser.add_argument("--checkpoints", type=Path, help="checkpoint folder")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-interval", default="10s")
    parser.add_argument("--log-dir", type=Path, help="Flink's log (default: OUTDIR/../flink-log)")
    ns = parser.parse_args(argv)
    if ns.self_check:
        return None
    missing = [f"--{k}" for k in ("input", "format", "query", "out", "checkpoints")
               if getattr(ns, k) is None]  # fmt: skip
    if missing:
        parser.error(f"missing {', '.join(missing)}")
    bid = ns.input / "bid"
    return Args(
        input=(bid if bid.is_dir() and ns.query not in JOINS else ns.input).resolve(),
        format=ns.format,
        query=ns.query,
        out=ns.out.resolve(),
        checkpoints=ns.checkpoints.resolve(),
        parallelism=ns.parallelism,
        checkpoint_interval=ns.checkpoint_interval,
        log_dir=(ns.log_dir or ns.out.parent / "flink-log").resolve(),
    )


def check_installed() -> None:
    """scripts/flink-venv.sh puts the jars into PyFlink's lib/, on the JVM's classpath."""
    import pyflink

    lib = Path(pyflink.__file__).parent / "lib"
    if not (lib / "sluice-bench-flink.jar").exists():
        sys.exit(f"no sluice-bench-flink.jar in {lib}: run scripts/flink-venv.sh")


def jvm() -> Any:
    from pyflink.java_gateway import get_gateway

    return get_gateway().jvm


# -- the job --------------------------------------------------------------------------------


def start_mini_cluster(parallelism: int) -> Any:
    """A MiniCluster with one TaskManager of ``parallelism`` slots, REST on a free port."""
    conf = jvm().org.apache.flink.configuration.Configuration()
    conf.setString("rest.bind-port", "0")
    conf.setString("rest.address", "localhost")
    mini = jvm().org.apache.flink.runtime.minicluster
    cluster = mini.MiniCluster(
        mini.MiniClusterConfiguration.Builder()
        .setConfiguration(conf)
        .setNumTaskManagers(1)
        .setNumSlotsPerTaskManager(parallelism)
        .build()
    )
    cluster.start()
    return cluster


def environments(args: Args, cluster: Any) -> tuple[Any, Any]:
    """The stream and table environments (STREAMING) that submit to ``cluster``, with
    exactly-once checkpoints to ``args.checkpoints``."""
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    rest = cluster.getRestAddress().get()
    conf = jvm().org.apache.flink.configuration.Configuration()
    for key, value in {
        "execution.target": "remote",
        "rest.address": rest.getHost(),
        "rest.port": str(rest.getPort()),
        "execution.runtime-mode": "STREAMING",
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": args.checkpoint_interval,
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.storage": "filesystem",
        "execution.checkpointing.dir": args.checkpoints.as_uri(),
        # A failed job fails the run (with checkpoints on, Flink would restart it forever).
        "restart-strategy.type": "none",
    }.items():
        conf.setString(key, value)
    # get_execution_environment() would make a LocalStreamEnvironment, which forces
    # execution.target = local (a new MiniCluster per job, gone with the job's statistics).
    env = StreamExecutionEnvironment(
        jvm().org.apache.flink.streaming.api.environment.StreamExecutionEnvironment(conf)
    )
    t_env = StreamTableEnvironment.create(env, EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("table.local-time-zone", "UTC")
    t_env.create_java_temporary_system_function("MICROS_AS_MILLIS", "sluice.bench.MicrosAsMillis")
    return env, t_env


def register_views(env: Any, t_env: Any, args: Args) -> None:
    """The query's views: ``bid``, or for a join ``person`` and ``auction`` (from the
    subfolders of ``args.input``), each with its rowtime ``ts`` and watermark."""
    if args.query in JOINS:
        for name, columns in JOIN_VIEWS.items():
            register_view(env, t_env, args, name, args.input / name, columns, MILLIS_ROWTIME)
        return
    query = QUERIES[args.query]
    reads = {c: BID_COLUMNS[c] for c in query.reads}
    register_view(env, t_env, args, "bid", args.input, reads, query.rowtime)


def register_view(
    env: Any, t_env: Any, args: Args, name: str, folder: Path, columns: dict[str, str],
    rowtime: str,
) -> None:  # fmt: skip
    """View ``name``: ``columns`` of the files in ``folder`` and the rowtime ``ts`` with its
    watermark."""
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors import Source
    from pyflink.table import Schema

    source = Source(ordered_file_source(folder, args.format, columns))
    # The table schema below generates the watermark (right after the source, per subtask).
    data = env.from_source(source, WatermarkStrategy.no_watermarks(), name)
    schema = (
        Schema.new_builder().column_by_expression("ts", rowtime).watermark("ts", WATERMARK).build()
    )
    t_env.create_temporary_view(name, t_env.from_data_stream(data, schema))


def ordered_file_source(folder: Path, fmt: str, columns: dict[str, str]) -> Any:
    """A Java ``FileSource<RowData>`` over ``folder`` reading ``columns`` (name: SQL type),
    with the formats the ``filesystem`` SQL connector uses and the splits handed out in file
    name order.

    Not the ``filesystem`` connector itself: its split assigner keeps the splits in a HashSet,
    so a subtask reads the files in any order and, with a watermark that trusts the order,
    silently drops every bid of a file that comes after a later one."""
    flink = jvm().org.apache.flink
    loader = jvm().java.lang.Thread.currentThread().getContextClassLoader()
    row = ", ".join(f"{name} {kind}" for name, kind in columns.items())
    row_type = flink.table.types.logical.utils.LogicalTypeParser.parse(f"ROW<{row}>", loader)
    paths = gateway_array(flink.core.fs.Path, [flink.core.fs.Path(folder.as_uri())])
    source = flink.connector.file.src.FileSource.forBulkFileFormat(
        bulk_format(fmt, row_type), paths
    )
    return source.setSplitAssigner(jvm().sluice.bench.OrderedSplitAssignerProvider()).build()


def bulk_format(fmt: str, row_type: Any) -> Any:
    """The reader of one file of ``fmt`` as rows of ``row_type`` (Flink's internal RowData)."""
    flink = jvm().org.apache.flink
    type_info = flink.table.runtime.typeutils.InternalTypeInfo.of(row_type)
    if fmt == "jsonl":
        iso_8601 = flink.formats.common.TimestampFormat.ISO_8601  # "...T00:00:00.000400Z"
        # Row type, type info, fail on missing field, ignore parse errors, timestamp format.
        json_rows = flink.formats.json.JsonRowDataDeserializationSchema(
            row_type, type_info, False, False, iso_8601
        )
        return flink.connector.file.table.DeserializationSchemaAdapter(json_rows)
    # Hadoop conf, row type, type info, batch size, UTC timestamps, case-sensitive names.
    return flink.formats.parquet.ParquetColumnarRowInputFormat(
        jvm().org.apache.hadoop.conf.Configuration(), row_type, type_info, 2048, True, True
    )


def gateway_array(java_class: Any, items: list[Any]) -> Any:
    from pyflink.java_gateway import get_gateway

    array = get_gateway().new_array(java_class, len(items))
    for i, item in enumerate(items):
        array[i] = item
    return array


def sql_options(options: dict[str, str]) -> str:
    return ", ".join(f"'{key}' = '{value}'" for key, value in options.items())


def register_sink(t_env: Any, args: Args, query: Query) -> None:
    options = {"connector": "filesystem", "path": args.out.as_uri(), "format": "parquet"}
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink ({query.sink_columns}) "
        f"WITH ({sql_options(options | PARQUET_SINK_OPTIONS)})"
    )


@dataclass(frozen=True)
class Timing:
    plan_seconds: float  # SQL to job graph, submitted (execute_sql returns once it is)
    submitted: float  # perf_counter() then
    seconds: float  # submitted to finished


def run_job(t_env: Any, query: Query) -> tuple[Any, Timing]:
    """Submit ``INSERT INTO sink <select>`` and wait for the job to finish."""
    began = time.perf_counter()
    result = t_env.execute_sql(f"INSERT INTO sink {query.select}")
    submitted = time.perf_counter()
    job_id = result.get_job_client().get_job_id()
    result.wait()
    return job_id, Timing(submitted - began, submitted, time.perf_counter() - submitted)


# -- after the job --------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStats:
    status: str
    events: int | None
    checkpoints_completed: int
    checkpoints_failed: int
    checkpoint_seconds: float
    checkpoint_failures: list[str]


def job_stats(cluster: Any, job_id: Any) -> JobStats:
    """From the finished job's archived execution graph: its status, the records the source
    vertex emitted and its checkpoint statistics."""
    graph = cluster.getArchivedExecutionGraph(job_id._j_job_id).get()
    checkpoints = graph.getCheckpointStatsSnapshot()
    counts = checkpoints.getCounts()
    return JobStats(
        status=str(graph.getState().toString()),
        events=source_records(graph),
        checkpoints_completed=counts.getNumberOfCompletedCheckpoints(),
        checkpoints_failed=counts.getNumberOfFailedCheckpoints(),
        **checkpoint_history(checkpoints),
    )


def source_records(graph: Any) -> int | None:
    """The records the source vertices (a join has two) read: Flink counts what a source
    emits as its task's records in (the task's records out are its chain's last operator's).
    None when the first vertex is not a source."""
    vertices = graph.getVerticesTopologically().iterator()
    total, first = 0, True
    while vertices.hasNext():
        vertex = vertices.next()
        if not vertex.getName().startswith("Source"):
            if first:
                return None
            continue
        first = False
        total += sum(
            task.getCurrentExecutionAttempt().getIOMetrics().getNumRecordsIn()
            for task in vertex.getTaskVertices()
        )
    return total


def checkpoint_history(checkpoints: Any) -> dict[str, Any]:
    """The completed checkpoints' end-to-end durations added up, and why any failed."""
    total_ms, failures = 0, []
    history = checkpoints.getHistory().getCheckpoints().iterator()
    while history.hasNext():
        checkpoint = history.next()
        status = checkpoint.getStatus().toString()
        if status == "COMPLETED":
            total_ms += checkpoint.getEndToEndDuration()
        elif status == "FAILED":
            failures.append(f"{checkpoint.getCheckpointId()}: {checkpoint.getFailureMessage()}")
    return {"checkpoint_seconds": total_ms / 1000, "checkpoint_failures": failures}


def name_parts(out: Path) -> list[Path]:
    """Give Flink's committed part files (``part-<uuid>-<subtask>-<n>``) a ``.parquet``; its
    in-progress files are hidden (``.part-...``) and none are left after a finished job."""
    parts = []
    for part in sorted(out.glob("part-*")):
        if re.fullmatch(r"part-[0-9a-f-]+-\d+-\d+", part.name):
            part = part.rename(part.with_name(part.name + ".parquet"))
        parts.append(part)
    return parts


def count_rows(parts: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(part).metadata.num_rows for part in parts)


def run(args: Args) -> int:
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"--out {args.out} is not empty")
    query = JOINS[args.query] if args.query in JOINS else QUERIES[args.query]
    # Read when PyFlink starts its JVM; by default the log would go into the venv, one file
    # that every run overwrites.
    os.environ.setdefault("FLINK_LOG_DIR", str(args.log_dir))
    cluster = start_mini_cluster(args.parallelism)
    try:
        env, t_env = environments(args, cluster)
        register_views(env, t_env, args)
        register_sink(t_env, args, query)
        job_id, timing = run_job(t_env, query)
        stats = job_stats(cluster, job_id)
    finally:
        cluster.close()
    from pyflink.version import __version__

    result = Result(
        query=args.query,
        format=args.format,
        events=stats.events,
        rows_out=count_rows(name_parts(args.out)),
        output_glob=str(args.out / "*.parquet"),
        seconds=round(timing.seconds, 3),
        startup_seconds=round(timing.submitted - START, 3),
        plan_seconds=round(timing.plan_seconds, 3),
        checkpoints_completed=stats.checkpoints_completed,
        checkpoints_failed=stats.checkpoints_failed,
        checkpoint_seconds=stats.checkpoint_seconds,
        checkpoint_failures=stats.checkpoint_failures,
        checkpoint_interval=args.checkpoint_interval,
        parallelism=args.parallelism,
        job_status=stats.status,
        flink_version=__version__,
    )
    print("FLINK_RESULT " + json.dumps(asdict(result)), flush=True)
    return 0 if stats.status == "FINISHED" else 1


def self_check() -> int:
    """The JVM starts, loads the jars' classes, and MICROS_AS_MILLIS scales time by 1000."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    t_env.get_config().set("table.local-time-zone", "UTC")
    loader = jvm().java.lang.Thread.currentThread().getContextClassLoader()
    for name in ("org.apache.flink.formats.parquet.ParquetColumnarRowInputFormat",
                 "org.apache.hadoop.conf.Configuration",
                 "sluice.bench.OrderedSplitAssignerProvider"):  # fmt: skip
        jvm().java.lang.Class.forName(name, True, loader)
    t_env.create_java_temporary_system_function("MICROS_AS_MILLIS", "sluice.bench.MicrosAsMillis")
    # One microsecond apart in the bids' time is one millisecond apart in event time.
    ltz = "CAST(TIMESTAMP '2026-01-01 00:00:00.{}' AS TIMESTAMP_LTZ(6))"
    scaled = [f"MICROS_AS_MILLIS({ltz.format(f)})" for f in ("123456", "123457")]
    same = t_env.sql_query(
        f"SELECT {scaled[0]} + INTERVAL '0.001' SECOND = {scaled[1]}, {scaled[0]} = {scaled[1]}"
    ).to_pandas()
    if same.values.tolist() != [[True, False]]:
        print(f"self-check: MICROS_AS_MILLIS is wrong: {same.values.tolist()}", file=sys.stderr)
        return 1
    print("self-check: ok", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_installed()
    return self_check() if args is None else run(args)


if __name__ == "__main__":
    sys.exit(main())
