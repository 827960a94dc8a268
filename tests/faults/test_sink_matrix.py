"""The qos crash matrix with real servers: every sink, every fault point, every qos level.

One pipeline writes its window results to five upsert sinks at once — files on S3
(SeaweedFS), a PostgreSQL table, a Delta table on S3, an Iceberg table (a SQL catalog on the
PostgreSQL server, its warehouse on S3) and a Kafka topic (the KRaft broker the tests start;
what a ``read_committed`` consumer reads, every record counted, not just the last per key) —
its late records to a PostgreSQL append table and its dead letters to a Delta append table.
A ``sluice run`` subprocess is killed (SIGKILL) at a fault point of epoch 2 of 3, then the
pipeline is resumed in-process. Each sink is compared with an uninterrupted run of the same
pipeline:

* qos 2: every sink equals the uninterrupted run exactly, and the Iceberg table's snapshot
  summaries name each epoch once;
* qos 1: nothing is missing (duplicates are counted and reported);
* qos 0: nothing is duplicated (losses are counted and reported).

Every case records its cell; after the module the matrix is printed in the terminal report
and written to ``$SLUICE_MATRIX_OUT`` (or the pytest temp dir). make test runs the racing
attempts and one crash between sinks (each sink a Spark-backed crash and recovery, checked
against the independent reference); make sink-matrix runs the whole matrix (3 levels x 11
points), make chaos too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.protocol import FAULT_POINTS, commit_epoch, plan_epoch, process_epoch, run_until_drained
from sluice.sinks.files import STAGING, read_rows
from sluice.spec import parse_spec

from tests.faults.conftest import report
from tests.faults.crashing import crash_step
from tests.fixtures.kafka import read_topic
from tests.fixtures.pipelines import (
    Workspace,
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
)
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=60, seed=5)
FILES_PER_EPOCH = 2
CRASH_EPOCH = 2
KEYS = ("user", "window_start", "window_end")
CONNECTION = "matrix_pg"
CATALOG = "matrix_iceberg"  # an Iceberg SQL catalog in a database of the same server
SINKS = ("files", "postgres", "delta", "iceberg", "kafka", "late→postgres", "dead→delta")
BROKER: list[Any] = []  # the session's Kafka server (fixture broker)

# make sink-matrix / make chaos only: every level at every point (the uninterrupted reference
# ~2.5 min, then ~2 min a case, unloaded): too long for make test, which runs the racing
# attempts below; tests/integration/test_qos.py tells the three levels apart in make test.
CASES = [
    pytest.param(qos, point, id=f"qos{qos}-{point}", marks=[pytest.mark.slow])
    for qos in (2, 1, 0)
    for point in FAULT_POINTS
]
MATRIX: dict[tuple[int, str], dict[str, str]] = {}
NOTHING_STAGED = {"files": 0, "postgres": 0, "delta": 0, "iceberg": 0, "kafka": 0}


# -- the pipeline ---------------------------------------------------------------------------


def _spec(ws: Workspace, tag: str, qos: int) -> dict[str, Any]:
    body = click_spec_dict(ws, name=f"matrix_{tag}", qos=qos, emit="on_update")
    body["source"]["max_files_per_epoch"] = FILES_PER_EPOCH
    body["event_time"]["allowed_lateness"] = "30s"
    body["sinks"] = [
        {"name": "files", "type": "files", "path": ws.uri("out"), "mode": "upsert"},
        {"name": "postgres", "type": "postgres", "table": f"results_{tag}",
         "connection": CONNECTION, "mode": "upsert"},
        {"name": "delta", "type": "delta", "path": ws.uri("lake"), "mode": "upsert"},
        {"name": "iceberg", "type": "iceberg", "table": f"matrix.results_{tag}",
         "connection": CATALOG, "warehouse": ws.uri("warehouse"), "mode": "upsert"},
        {"name": "kafka", "type": "kafka", "topic": f"matrix_{tag}", "mode": "upsert",
         "bootstrap_servers": BROKER[0].bootstrap if BROKER else "127.0.0.1:9"},
    ]  # fmt: skip
    body["late_records"] = {"type": "postgres", "table": f"late_{tag}", "connection": CONNECTION}
    body["dead_letters"] = {"type": "delta", "path": ws.uri("dead")}
    return body


class Outputs:
    """What a reader sees in each sink of one pipeline, as comparable multisets."""

    def __init__(self, spark: Any, ws: Workspace, tag: str, url: str) -> None:
        self.spark, self.ws, self.tag, self.url = spark, ws, tag, url

    def iceberg(self) -> Any:
        """The Iceberg sink of this pipeline (to read its table and snapshots)."""
        from sluice.sinks.iceberg import IcebergSink

        spec = parse_spec(_spec(self.ws, self.tag, 2))
        config = next(s for s in spec.sinks if s.name == "iceberg")
        url = os.environ[f"SLUICE_CONN_{CATALOG.upper()}"]
        store = self.ws.store("warehouse")
        return IcebergSink(config, url, store, f"matrix_{self.tag}", spec.s3)

    def kafka_rows(self) -> list[dict[str, Any]]:
        """Every record a read_committed consumer reads (not the last per key), as rows."""
        rows = []
        for _, value in read_topic(BROKER[0], f"matrix_{self.tag}"):
            if value is not None:
                row = json.loads(value)
                for key in ("window_start", "window_end"):
                    row[key] = datetime.fromisoformat(row[key])
                rows.append(row)
        return rows

    def iceberg_rows(self) -> list[dict[str, Any]]:
        table = self.iceberg().load()
        return [] if table is None else list(table.scan().to_arrow().to_pylist())

    def iceberg_summaries(self) -> list[int]:
        """The epoch of every snapshot summary of this pipeline's Iceberg table, in order."""
        table = self.iceberg().load()
        if table is None:
            return []
        found = [(s.summary or {}).get("sluice.epoch") for s in table.metadata.snapshots]
        return [int(e) for e in found if e is not None]

    def read(self) -> dict[str, Counter[tuple[Any, ...]]]:
        from tests.fixtures.delta_tables import read_table as delta_rows
        from tests.fixtures.postgres_tables import read_table as pg_rows

        changelog = read_rows(self.ws.store("out"), "parquet")
        return {
            "files": _files_table(changelog),
            "postgres": _results(pg_rows(self.url, f"results_{self.tag}")),
            "delta": _results(delta_rows(self.spark, self.ws.uri("lake"))),
            "iceberg": _results(self.iceberg_rows()),
            "kafka": _results(self.kafka_rows()),
            "late→postgres": Counter(
                (r["source_file"], r["source_line"]) for r in pg_rows(self.url, f"late_{self.tag}")
            ),
            "dead→delta": Counter(
                (r["file"], r["line"], r["reason_code"])
                for r in delta_rows(self.spark, self.ws.uri("dead"))
            ),
        }

    def leftovers(self) -> dict[str, int]:
        """Staged data of every sink that no commit has published (yet)."""
        from sluice.sinks.delta import STAGING as DELTA_STAGING
        from sluice.sinks.iceberg import STAGING as ICEBERG_STAGING
        from sluice.sinks.kafka import STAGING as KAFKA_STAGING

        from tests.fixtures.postgres_tables import staging_tables

        return {
            "files": len(self.ws.store("out").list(STAGING)),
            "postgres": len(staging_tables(self.url, f"matrix_{self.tag}")),
            "delta": len(self.ws.store("lake").list(DELTA_STAGING))
            + len(self.ws.store("dead").list(DELTA_STAGING)),
            "iceberg": len(self.ws.store("warehouse").list(ICEBERG_STAGING)),
            # staged under the checkpoint store (the pipeline's, named by its tag)
            "kafka": len(self.ws.store("ckpt").list(f"matrix_{self.tag}/{KAFKA_STAGING}")),
        }


def _row_value(row: dict[str, Any]) -> tuple[Any, ...]:
    def norm(v: Any) -> Any:
        return v.replace(tzinfo=None).isoformat() if hasattr(v, "isoformat") else v

    return tuple(norm(row[k]) for k in (*KEYS, "clicks", "total"))


def _results(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(_row_value(r) for r in rows)


def _files_table(changelog: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The files changelog resolved per key (highest epoch wins); a (key, epoch) written
    twice counts twice, so a duplicate shows."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in changelog:
        by_key.setdefault(_row_value(row)[: len(KEYS)], []).append(row)
    table: Counter[tuple[Any, ...]] = Counter()
    for rows in by_key.values():
        top = max(r["_epoch"] for r in rows)
        for row in rows:
            if row["_epoch"] == top and row["_op"] != "delete":
                table[_row_value(row)] += 1
    return table


def _cell(got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> tuple[int, int]:
    """(duplicates, losses): rows seen more often than in the reference, rows missing."""
    duplicates = sum((got - want).values())
    losses = sum((want - got).values())
    return duplicates, losses


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def matrix_report(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """After the module: reports the cells the crash cases recorded ('=' equal, '+n' duplicated
    rows, '-n' lost rows) in the terminal report and saves them to ``$SLUICE_MATRIX_OUT`` (or
    the pytest temp dir). Under make chaos this is the whole matrix."""
    yield
    if not MATRIX:
        return
    width = max(len(p) for p in FAULT_POINTS)
    lines = [f"{'qos':<4} {'fault point':<{width}}  " + "  ".join(f"{s:>14}" for s in SINKS)]
    for (qos, point), cells in sorted(MATRIX.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        lines.append(f"{qos:<4} {point:<{width}}  " + "  ".join(f"{cells[s]:>14}" for s in SINKS))
    out = Path(os.environ.get("SLUICE_MATRIX_OUT") or tmp_path_factory.mktemp("m") / "matrix.txt")
    out.write_text("\n".join(lines) + "\n")
    # under pytest-xdist the summary is the worker's (not shown): the saved file has it
    report(request.config, f"qos crash matrix: {len(MATRIX)} cases, saved to {out}", lines)


@pytest.fixture(scope="module", autouse=True)
def broker(kafka_server: Any) -> Iterator[Any]:
    BROKER.append(kafka_server)
    yield kafka_server
    BROKER.clear()


@pytest.fixture(scope="module")
def warehouse(postgres_server: Any) -> Iterator[str]:
    url = postgres_server.create_database(f"matrix_{uuid.uuid4().hex[:6]}")
    url = "postgresql://" + url.split("://", 1)[1]
    catalog = postgres_server.create_database(f"matrix_ice_{uuid.uuid4().hex[:6]}")
    catalog = "postgresql://" + catalog.split("://", 1)[1]
    os.environ[f"SLUICE_CONN_{CONNECTION.upper()}"] = url
    os.environ[f"SLUICE_CONN_{CATALOG.upper()}"] = catalog
    yield url
    os.environ.pop(f"SLUICE_CONN_{CONNECTION.upper()}", None)
    os.environ.pop(f"SLUICE_CONN_{CATALOG.upper()}", None)


@pytest.fixture(scope="module")
def s3_root(s3_server: Any) -> Callable[[], Workspace]:
    bucket = s3_server.bucket("sluice-tests")
    return lambda: Workspace("s3", f"s3://{bucket}/matrix-{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="module")
def reference(spark: Any, s3_root: Callable[[], Workspace], warehouse: str) -> Any:
    """The uninterrupted run's output (qos 2, no faults)."""
    ws = s3_root()
    ws.put_files(FILES)
    spec = parse_spec(_spec(ws, "reference", 2))
    run_until_drained(runtime(spec), spark)
    return Outputs(spark, ws, "reference", warehouse).read()


# -- the matrix -----------------------------------------------------------------------------


@pytest.mark.parametrize(("qos", "point"), CASES)
def test_crash_then_resume(
    spark: Any,
    s3_root: Callable[[], Workspace],
    warehouse: str,
    reference: dict[str, Counter[tuple[Any, ...]]],
    tmp_path: Path,
    qos: int,
    point: str,
) -> None:
    tag = f"q{qos}_{uuid.uuid4().hex[:6]}"
    ws = s3_root()
    ws.put_files(FILES)
    body = _spec(ws, tag, qos)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    outputs = Outputs(spark, ws, tag, warehouse)

    proc = _crash_run(spec_path, point)
    assert proc.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at {point}, got rc={proc.returncode}\n{proc.stderr[-3000:]}"
    )
    staged_before = outputs.leftovers()
    rt = runtime(parse_spec(body))
    run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == len(FILES) // FILES_PER_EPOCH

    # Orphans of the dead attempt are gone after the resume, whatever was staged.
    assert outputs.leftovers() == NOTHING_STAGED, staged_before
    if qos == 2 and point == "process.after_prepare":
        assert all(n > 0 for n in staged_before.values()), staged_before

    got = outputs.read()
    cells: dict[str, str] = {}
    for sink in SINKS:
        duplicates, losses = _cell(got[sink], reference[sink])
        cells[sink] = _show(duplicates, losses)
        if qos == 2:
            assert (duplicates, losses) == (0, 0), (sink, point, duplicates, losses)
        elif qos == 1:
            assert losses == 0, (sink, point, losses)
        else:
            assert duplicates == 0, (sink, point, duplicates)
    if qos == 2:  # a snapshot per epoch that changed the table, each epoch once
        summaries = outputs.iceberg_summaries()
        assert summaries == sorted(set(summaries)), summaries
    MATRIX[(qos, point)] = cells


def test_two_attempts_racing_publish_once(
    spark: Any, s3_root: Callable[[], Workspace], warehouse: str
) -> None:
    """Two attempts of one epoch (an Airflow retry while the first still runs) both prepare,
    then commit at the same moment: one wins, every sink shows its rows exactly once, and the
    loser's staged data is gone from every sink."""
    from tests.fixtures.delta_tables import read_table as delta_rows
    from tests.fixtures.postgres_tables import read_table as pg_rows

    tag = f"race_{uuid.uuid4().hex[:6]}"
    ws = s3_root()
    ws.put_files(FILES)
    body = _spec(ws, tag, 2)
    body["source"].pop("max_files_per_epoch")  # one epoch that closes windows
    body["emit"] = "on_close"
    for sink in body["sinks"]:
        sink["mode"] = "append"  # duplicates would show in append sinks
    spec = parse_spec(body)
    first, second = runtime(spec, prefix="a"), runtime(spec, prefix="b")
    plan = plan_epoch(first)
    assert plan is not None
    a = process_epoch(first, spark, plan.epoch)
    b = process_epoch(second, spark, plan.epoch)
    staged = Outputs(spark, ws, tag, warehouse).leftovers()
    assert staged["postgres"] >= 2 and staged["files"] > 0 and staged["delta"] > 0, staged
    assert staged["iceberg"] > 0 and staged["kafka"] > 0, staged

    winners: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        done = [pool.submit(commit_epoch, rt, plan.epoch, rec.attempt)
                for rt, rec in ((first, a), (second, b))]  # fmt: skip
        winners = [f.result().attempt for f in done]
    assert winners[0] == winners[1] in (a.attempt, b.attempt)

    emitted = first.repo.checkpoint(plan.epoch).result.stats.windows_emitted  # type: ignore[union-attr]
    assert emitted > 0
    files = read_rows(ws.store("out"), "parquet")
    pg = pg_rows(warehouse, f"results_{tag}")
    lake = delta_rows(spark, ws.uri("lake"))
    outputs = Outputs(spark, ws, tag, warehouse)
    ice = outputs.iceberg_rows()
    bus = [json.loads(v) for _, v in read_topic(BROKER[0], f"matrix_{tag}") if v is not None]
    for name, rows in (("files", files), ("postgres", pg), ("delta", lake), ("iceberg", ice),
                       ("kafka", bus)):  # fmt: skip
        keys = Counter(_row_value(r)[: len(KEYS)] for r in rows)
        assert len(rows) == emitted and max(keys.values()) == 1, (name, len(rows), emitted)
    assert outputs.leftovers() == NOTHING_STAGED
    assert outputs.iceberg_summaries() == [plan.epoch]  # the winner's snapshot, once
    statuses = sorted(r.status.value for r in first.repo.attempts(plan.epoch))
    assert statuses == ["aborted", "committed"], statuses


def test_a_crash_between_sinks_then_resume_publishes_each_sink_once(
    spark: Any, local_workspace: Workspace, warehouse: str, tmp_path: Path
) -> None:
    """qos 2, every sink kind in one pipeline: a ``sluice commit`` subprocess SIGKILLed after
    the first sink (Kafka) published epoch 2 and before Iceberg, Delta, PostgreSQL, the files
    sink, the late records (PostgreSQL) and the dead letters (Delta) did. The resume publishes
    the rest and re-commits Kafka idempotently: each sink ends equal to the independent
    reference, every window, late record and dead letter once (a read_committed consumer
    reads each window's record once), nothing left staged, each epoch in one Iceberg snapshot
    summary."""
    from tests.fixtures.delta_tables import read_table as delta_rows
    from tests.fixtures.postgres_tables import read_table as pg_rows

    tag = f"crash_{uuid.uuid4().hex[:6]}"
    ws = local_workspace
    ws.put_files(FILES)
    body = _spec(ws, tag, 2)
    body["emit"] = "on_close"  # append sinks: a window published twice shows twice
    body["event_time"]["allowed_lateness"] = "0s"  # what click_reference computes
    body["sinks"] = [dict(s, mode="append") for s in reversed(body["sinks"])]
    assert [s["type"] for s in body["sinks"]] == ["kafka", "iceberg", "delta", "postgres", "files"]
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    reference = click_reference(FILES)

    run_until_drained(rt, spark, max_epochs=1)
    code = crash_step(rt, spark, spec_path, "commit.mid_sinks", CRASH_EPOCH,
                      max_units=FILES_PER_EPOCH, log=tmp_path / "cli.log")  # fmt: skip
    assert code == -signal.SIGKILL, (code, (tmp_path / "cli.log").read_text()[-3000:])
    assert rt.repo.checkpoint(CRASH_EPOCH) is not None
    assert rt.repo.sinks_committed(CRASH_EPOCH) is None
    run_until_drained(rt, spark)

    keys = ["user", "window_start"]
    results = {
        "files": committed_rows(spec, "files"),
        "postgres": pg_rows(warehouse, f"results_{tag}"),
        "delta": delta_rows(spark, ws.uri("lake")),
        "iceberg": Outputs(spark, ws, tag, warehouse).iceberg_rows(),
    }
    bus = [json.loads(v) for _, v in read_topic(BROKER[0], f"matrix_{tag}") if v is not None]
    assert len(bus) == len(reference.emitted)
    assert sorted((r["user"], datetime.fromisoformat(r["window_start"]), r["clicks"])
                  for r in bus) == sorted(
        (r["user"], r["window_start"], r["clicks"]) for r in reference.emitted
    )  # fmt: skip
    for name, rows in results.items():
        rows = [{k: r[k] for k in reference.emitted[0]} for r in rows]
        assert compare_rows(rows, reference.emitted, keys=keys) == [], name
        assert len(rows) == len(reference.emitted), name
    late = [(r["source_file"], r["source_line"]) for r in pg_rows(warehouse, f"late_{tag}")]
    assert sorted(late) == sorted(reference.late)
    dead = [(r["file"], r["line"], r["reason_code"]) for r in delta_rows(spark, ws.uri("dead"))]
    assert sorted(dead) == sorted(reference.dead)
    outputs = Outputs(spark, ws, tag, warehouse)
    assert outputs.leftovers() == NOTHING_STAGED
    summaries = outputs.iceberg_summaries()
    assert summaries == sorted(set(summaries)) and CRASH_EPOCH in summaries, summaries


def _show(duplicates: int, losses: int) -> str:
    if duplicates == losses == 0:
        return "="
    return " ".join(s for s in (f"+{duplicates}" if duplicates else "",
                                f"-{losses}" if losses else "") if s)  # fmt: skip


def _crash_run(spec_path: Path, point: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # AWS_* (s3_server) and SLUICE_CONN_* (warehouse) are here
    env.update(SLUICE_FAULT=point, SLUICE_FAULT_EPOCH=str(CRASH_EPOCH),
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="500")  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
