"""Nexmark q0 / q5 / q7 / q11 on Apache Flink (PyFlink, Flink SQL window TVFs): the peer that
``make bench`` compares Sluice with.

    .cache/bench/flink-venv/bin/python bench/peers/flink_nexmark.py \\
        --input DIR --format jsonl|parquet --query q0|q5|q7|q11 --out OUTDIR --checkpoints CKDIR \\
        [--parallelism 2] [--checkpoint-interval 10s] [--source ordered|sql]

``DIR`` holds the bid files ``sluice.nexmark.write_files(..., split_by_kind=True)`` writes
(``events-<first>-<last>.jsonl|.parquet``; a folder with a ``bid/`` subfolder works too). The
venv needs ``apache-flink==2.3.0`` (Java 17). Jars Flink does not ship are fetched with Maven
into ``.cache/bench/flink-jars`` on first use: ``flink-sql-parquet`` and the Hadoop client it
needs (the output is always Parquet, so JSON runs need them too), and a two-class jar compiled
here with ``javac`` (below).

The job: STREAMING mode on a local MiniCluster (one TaskManager, ``--parallelism`` slots),
EXACTLY_ONCE checkpoints every ``--checkpoint-interval`` to ``file://CKDIR``, a bounded file
source, rowtime ``ts = CAST(date_time AS TIMESTAMP_LTZ(3))`` with watermark
``ts - INTERVAL '0' SECOND``, ``table.local-time-zone = UTC``:

* q0 pass-through: event_id, auction, bidder, price, channel, url, date_time, extra;
* q5 first stage: HOP 10 s every 2 s per auction: auction, window_start, window_end, bids;
* q7 first stage: TUMBLE 10 s, no key: window_start, window_end, max_price, bids;
* q11: SESSION gap 10 s per bidder: bidder, window_start, window_end, bid_count.

Every window closes at the end of the input (Flink's final MAX_WATERMARK), so the output has
windows that a streaming run would still hold open: compare on ``window_end <= max(date_time)``.

Output: Parquet files ``OUTDIR/part-*.parquet`` (``.parquet`` appended after the job), timestamps
as INT64 microseconds without a zone, in UTC (DuckDB reads ``TIMESTAMP``). Flink's event time is
milliseconds: window bounds are whole milliseconds, and q11's sessions are built from times
truncated to the millisecond (q0's ``date_time`` keeps its microseconds).

Source (``--source``):

* ``ordered`` (default): Flink's ``FileSource`` with the same formats the ``filesystem`` SQL
  connector uses (``JsonRowDataDeserializationSchema`` / ``ParquetColumnarRowInputFormat``,
  only the query's columns), and a split assigner that hands out the files in name (= event)
  order. The watermark is generated per source subtask, so each subtask must read its files in
  time order, or with out-of-orderness 0 whole files arrive behind the watermark and are dropped.
* ``sql``: the stock ``filesystem`` connector (``CREATE TABLE ... WITH ('connector' =
  'filesystem')``). Its ``LocalityAwareSplitAssigner`` keeps the splits in a ``HashSet``, so the
  files go out in arbitrary order and late records are silently dropped: on 1M events q7 counted
  488,701 of 920,000 bids. Kept to show that, not for the benchmark.

The last line printed is ``FLINK_RESULT {json}``: query, format, source, events (records the
source emitted, from the job's I/O metrics), rows_out, seconds (submit to finished),
startup_seconds (JVM, MiniCluster and table environment), checkpoints_completed /
checkpoints_failed (the job's checkpoint statistics), parallelism, flink_version. The MiniCluster
is started here rather than per job so that the finished job's statistics are still there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

START = time.perf_counter()

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".cache" / "bench" / "flink-jars"
FLINK_VERSION = "2.3.0"
MAVEN_JARS = {
    f"flink-sql-parquet-{FLINK_VERSION}.jar": f"org.apache.flink:flink-sql-parquet:{FLINK_VERSION}",
    # flink-sql-parquet calls Hadoop's Configuration and does not bundle it.
    "hadoop-client-api-3.3.6.jar": "org.apache.hadoop:hadoop-client-api:3.3.6",
    "hadoop-client-runtime-3.3.6.jar": "org.apache.hadoop:hadoop-client-runtime:3.3.6",
}
ASSIGNER_JAR = "sluice-bench-ordered-split-assigner-1.jar"
ASSIGNER_PACKAGE = "sluice.bench"

# FileSplitAssigner.Provider must be a serialisable Java object: py4j cannot make one.
ASSIGNER_SOURCES = {
    "OrderedSplitAssigner.java": """
package sluice.bench;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.assigners.FileSplitAssigner;

/** Hands out splits first in, first out, in (path, offset) order, whichever reader asks. */
public final class OrderedSplitAssigner implements FileSplitAssigner {
    private static final Comparator<FileSourceSplit> ORDER =
            Comparator.comparing((FileSourceSplit s) -> s.path().toString())
                    .thenComparingLong(FileSourceSplit::offset);

    private final ArrayDeque<FileSourceSplit> splits = new ArrayDeque<>();

    public OrderedSplitAssigner(Collection<FileSourceSplit> splits) {
        addSplits(splits);
    }

    @Override
    public Optional<FileSourceSplit> getNext(String hostname) {
        return Optional.ofNullable(splits.pollFirst());
    }

    @Override
    public void addSplits(Collection<FileSourceSplit> more) {
        List<FileSourceSplit> all = new ArrayList<>(splits);
        all.addAll(more);
        all.sort(ORDER);
        splits.clear();
        splits.addAll(all);
    }

    @Override
    public Collection<FileSourceSplit> remainingSplits() {
        return new ArrayList<>(splits);
    }
}
""",
    "OrderedSplitAssignerProvider.java": """
package sluice.bench;

import java.util.Collection;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.assigners.FileSplitAssigner;

/** Creates an {@link OrderedSplitAssigner}. */
public final class OrderedSplitAssignerProvider implements FileSplitAssigner.Provider {
    private static final long serialVersionUID = 1L;

    @Override
    public FileSplitAssigner create(Collection<FileSourceSplit> splits) {
        return new OrderedSplitAssigner(splits);
    }
}
""",
}

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


@dataclass(frozen=True)
class Query:
    """One query: the bid columns it reads, its SELECT over view ``bid`` (with rowtime ``ts``)
    and the sink's columns."""

    reads: tuple[str, ...]
    select: str
    sink_columns: str


QUERIES = {
    "q0": Query(
        reads=tuple(BID_COLUMNS),
        select="SELECT event_id, auction, bidder, price, channel, url, "
        "CAST(date_time AS TIMESTAMP(6)) AS date_time, extra FROM bid",
        sink_columns="event_id BIGINT, auction BIGINT, bidder BIGINT, price BIGINT, "
        "channel STRING, url STRING, date_time TIMESTAMP(6), extra STRING",
    ),
    "q5": Query(
        reads=("auction", "date_time"),
        select="SELECT auction, window_start, window_end, COUNT(*) AS bids FROM TABLE(HOP("
        "TABLE bid, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end",
        sink_columns="auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
        "bids BIGINT",
    ),
    "q7": Query(
        reads=("price", "date_time"),
        select="SELECT window_start, window_end, MAX(price) AS max_price, COUNT(*) AS bids "
        "FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY window_start, window_end",
        sink_columns="window_start TIMESTAMP(3), window_end TIMESTAMP(3), max_price BIGINT, "
        "bids BIGINT",
    ),
    "q11": Query(
        reads=("bidder", "date_time"),
        select="SELECT bidder, window_start, window_end, COUNT(*) AS bid_count FROM TABLE("
        "SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
        "GROUP BY bidder, window_start, window_end",
        sink_columns="bidder BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), "
        "bid_count BIGINT",
    ),
}
ROWTIME = "CAST(date_time AS TIMESTAMP_LTZ(3))"
WATERMARK = "ts - INTERVAL '0' SECOND"
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
    source: str


@dataclass(frozen=True)
class Result:
    """The ``FLINK_RESULT`` line."""

    query: str
    format: str
    source: str
    events: int | None
    rows_out: int
    seconds: float
    startup_seconds: float
    checkpoints_completed: int
    checkpoints_failed: int
    checkpoint_interval: str
    parallelism: int
    job_status: str
    flink_version: str


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, required=True, help="folder of bid files")
    parser.add_argument("--format", choices=["jsonl", "parquet"], required=True)
    parser.add_argument("--query", choices=sorted(QUERIES), required=True)
    parser.add_argument("--out", type=Path, required=True, help="output folder (new or empty)")
    parser.add_argument("--checkpoints", type=Path, required=True, help="checkpoint folder")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-interval", default="10s")
    parser.add_argument("--source", choices=["ordered", "sql"], default="ordered")
    ns = parser.parse_args(argv)
    bid = ns.input / "bid"
    return Args(
        input=(bid if bid.is_dir() else ns.input).resolve(),
        format=ns.format,
        query=ns.query,
        out=ns.out.resolve(),
        checkpoints=ns.checkpoints.resolve(),
        parallelism=ns.parallelism,
        checkpoint_interval=ns.checkpoint_interval,
        source=ns.source,
    )


# -- jars -----------------------------------------------------------------------------------


def pyflink_lib() -> Path:
    import pyflink

    return Path(pyflink.__file__).parent / "lib"


def ensure_jars() -> list[Path]:
    """The jars the job needs beyond PyFlink's own, fetched or built once into ``JARS``."""
    JARS.mkdir(parents=True, exist_ok=True)
    for name, artifact in MAVEN_JARS.items():
        if not (JARS / name).exists():
            subprocess.run(
                ["mvn", "-q", "dependency:copy", f"-Dartifact={artifact}",
                 f"-DoutputDirectory={JARS}"],
                check=True,
            )  # fmt: skip
    if not (JARS / ASSIGNER_JAR).exists():
        build_assigner_jar(JARS / ASSIGNER_JAR)
    return [JARS / name for name in [*MAVEN_JARS, ASSIGNER_JAR]]


def build_assigner_jar(jar: Path) -> None:
    """Compile ``ASSIGNER_SOURCES`` against PyFlink's jars."""
    with tempfile.TemporaryDirectory() as tmp:
        src, classes = Path(tmp, "src"), Path(tmp, "classes")
        src.mkdir()
        for name, text in ASSIGNER_SOURCES.items():
            (src / name).write_text(text)
        classpath = str(pyflink_lib() / "*")
        subprocess.run(
            ["javac", "--release", "17", "-cp", classpath, "-d", str(classes),
             *map(str, sorted(src.glob("*.java")))],
            check=True,
        )  # fmt: skip
        partial = jar.with_suffix(".tmp")
        subprocess.run(["jar", "cf", str(partial), "-C", str(classes), "."], check=True)
        partial.rename(jar)


# -- the job --------------------------------------------------------------------------------


def start_mini_cluster(parallelism: int) -> Any:
    """A MiniCluster with one TaskManager of ``parallelism`` slots, REST on a free port."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    conf = jvm.org.apache.flink.configuration.Configuration()
    conf.setString("rest.bind-port", "0")
    conf.setString("rest.address", "localhost")
    mini = jvm.org.apache.flink.runtime.minicluster
    cluster = mini.MiniCluster(
        mini.MiniClusterConfiguration.Builder()
        .setConfiguration(conf)
        .setNumTaskManagers(1)
        .setNumSlotsPerTaskManager(parallelism)
        .build()
    )
    cluster.start()
    return cluster


def environments(args: Args, cluster: Any, jars: list[Path]) -> tuple[Any, Any]:
    """The stream and table environments (STREAMING) that submit to ``cluster``, with the
    checkpointing."""
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    jvm = get_gateway().jvm
    rest = cluster.getRestAddress().get()
    conf = jvm.org.apache.flink.configuration.Configuration()
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
    }.items():
        conf.setString(key, value)
    # get_execution_environment() would make a LocalStreamEnvironment, which forces
    # execution.target = local (a new MiniCluster per job).
    env = StreamExecutionEnvironment(
        jvm.org.apache.flink.streaming.api.environment.StreamExecutionEnvironment(conf)
    )
    env.add_jars(*(jar.as_uri() for jar in jars))
    t_env = StreamTableEnvironment.create(env, EnvironmentSettings.in_streaming_mode())
    t_env.get_config().set("table.local-time-zone", "UTC")
    return env, t_env


def register_bid_view(env: Any, t_env: Any, args: Args, columns: tuple[str, ...]) -> None:
    """View ``bid``: ``columns`` and the rowtime ``ts`` with its watermark."""
    if args.source == "sql":
        t_env.execute_sql(filesystem_table_ddl(args))
        return
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors import Source
    from pyflink.table import Schema

    source = Source(ordered_file_source(args, columns))
    data = env.from_source(source, WatermarkStrategy.no_watermarks(), "bid")
    schema = (
        Schema.new_builder()
        .column_by_expression("ts", ROWTIME)
        .watermark("ts", WATERMARK)
        .build()
    )
    t_env.create_temporary_view("bid", t_env.from_data_stream(data, schema))


def filesystem_table_ddl(args: Args) -> str:
    columns = ", ".join(f"{name} {kind}" for name, kind in BID_COLUMNS.items())
    options = {"connector": "filesystem", "path": args.input.as_uri()}
    if args.format == "jsonl":
        options |= {"format": "json", "json.timestamp-format.standard": "ISO-8601"}
    else:
        options |= {"format": "parquet", "parquet.utc-timezone": "true"}
    return (
        f"CREATE TEMPORARY TABLE bid ({columns}, ts AS {ROWTIME}, "
        f"WATERMARK FOR ts AS {WATERMARK}) WITH ({sql_options(options)})"
    )


def ordered_file_source(args: Args, columns: tuple[str, ...]) -> Any:
    """A Java ``FileSource<RowData>`` over ``args.input`` reading ``columns``, files in order."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    row = ", ".join(f"{name} {BID_COLUMNS[name]}" for name in columns)
    row_type = jvm.org.apache.flink.table.types.logical.utils.LogicalTypeParser.parse(
        f"ROW<{row}>", loader
    )
    type_info = jvm.org.apache.flink.table.runtime.typeutils.InternalTypeInfo.of(row_type)
    if args.format == "jsonl":
        json_schema = jvm.org.apache.flink.formats.json.JsonRowDataDeserializationSchema(
            row_type, type_info, False, False, jvm.org.apache.flink.formats.common.TimestampFormat.ISO_8601
        )
        bulk_format = jvm.org.apache.flink.connector.file.table.DeserializationSchemaAdapter(
            json_schema
        )
    else:
        bulk_format = jvm.org.apache.flink.formats.parquet.ParquetColumnarRowInputFormat(
            jvm.org.apache.hadoop.conf.Configuration(), row_type, type_info, 2048, True, True
        )
    path = jvm.org.apache.flink.core.fs.Path(args.input.as_uri())
    paths = gateway_array(jvm.org.apache.flink.core.fs.Path, [path])
    provider = getattr(jvm, ASSIGNER_PACKAGE).OrderedSplitAssignerProvider()
    builder = jvm.org.apache.flink.connector.file.src.FileSource.forBulkFileFormat(
        bulk_format, paths
    )
    return builder.setSplitAssigner(provider).build()


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


def run_job(t_env: Any, query: Query) -> tuple[Any, float]:
    """Submit ``INSERT INTO sink <select>`` and wait: the job id and the seconds it took."""
    began = time.perf_counter()
    result = t_env.execute_sql(f"INSERT INTO sink {query.select}")
    job_id = result.get_job_client().get_job_id()
    result.wait()
    return job_id, time.perf_counter() - began


# -- after the job --------------------------------------------------------------------------


@dataclass(frozen=True)
class JobStats:
    status: str
    events: int | None
    checkpoints_completed: int
    checkpoints_failed: int


def job_stats(cluster: Any, job_id: Any) -> JobStats:
    """From the finished job's archived execution graph: its status, the records the source
    vertex emitted (its ``numRecordsIn``, which Flink counts for sources) and checkpoints."""
    graph = cluster.getArchivedExecutionGraph(job_id._j_job_id).get()  # noqa: SLF001
    counts = graph.getCheckpointStatsSnapshot().getCounts()
    it = graph.getCheckpointStatsSnapshot().getHistory().getCheckpoints().iterator()
    while it.hasNext():
        c = it.next()
        print("DEBUG", c.getCheckpointId(), c.getStatus().toString(), c.getTriggerTimestamp(), c.getEndToEndDuration(), c.getNumberOfAcknowledgedSubtasks(), c.getNumberOfSubtasks(), (c.getFailureMessage() if c.getStatus().toString() == "FAILED" else ""))
    source = graph.getVerticesTopologically().iterator().next()
    events = None
    if source.getName().startswith("Source"):
        events = sum(
            vertex.getCurrentExecutionAttempt().getIOMetrics().getNumRecordsIn()
            for vertex in source.getTaskVertices()
        )
    return JobStats(
        status=str(graph.getState().toString()),
        events=events,
        checkpoints_completed=counts.getNumberOfCompletedCheckpoints(),
        checkpoints_failed=counts.getNumberOfFailedCheckpoints(),
    )


def name_parts(out: Path) -> list[Path]:
    """Give Flink's committed part files (``part-<uuid>-<subtask>-<n>``) a ``.parquet``."""
    parts = []
    for part in sorted(out.glob("part-*")):
        if re.fullmatch(r"part-[0-9a-f-]+-\d+-\d+", part.name):
            part = part.rename(part.with_name(part.name + ".parquet"))
        parts.append(part)
    return parts


def count_rows(parts: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(part).metadata.num_rows for part in parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"--out {args.out} is not empty")
    query = QUERIES[args.query]
    jars = ensure_jars()
    cluster = start_mini_cluster(args.parallelism)
    try:
        env, t_env = environments(args, cluster, jars)
        register_bid_view(env, t_env, args, query.reads)
        register_sink(t_env, args, query)
        startup = time.perf_counter() - START
        job_id, seconds = run_job(t_env, query)
        stats = job_stats(cluster, job_id)
    finally:
        cluster.close()
    from pyflink.version import __version__

    result = Result(
        query=args.query,
        format=args.format,
        source=args.source,
        events=stats.events,
        rows_out=count_rows(name_parts(args.out)),
        seconds=round(seconds, 3),
        startup_seconds=round(startup, 3),
        checkpoints_completed=stats.checkpoints_completed,
        checkpoints_failed=stats.checkpoints_failed,
        checkpoint_interval=args.checkpoint_interval,
        parallelism=args.parallelism,
        job_status=stats.status,
        flink_version=__version__,
    )
    print("FLINK_RESULT " + json.dumps(asdict(result)), flush=True)
    return 0 if stats.status == "FINISHED" else 1


if __name__ == "__main__":
    sys.exit(main())
