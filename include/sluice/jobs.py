"""Spark job entry points (``jobs/*.py`` are thin wrappers that call these).

``process_job`` is what the Airflow ``process`` task runs through ``spark-submit``: one attempt
of an already planned epoch. Its last stdout line is ``SLUICE_RESULT <json>`` (epoch, attempt,
counts, the Spark master and application id), so the task log says where the epoch ran.

The warm mode (``sluice serve``, :mod:`sluice.serve`) runs the same attempt in a long-lived
session: both call :func:`sluice.pipeline.open_pipeline`, :func:`ship_package` and
:func:`attempt_summary`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sluice.contracts.records import EngineInfo
from sluice.exceptions import SluiceError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sluice.protocol import Runtime

__all__ = ["RESULT_PREFIX", "attempt_summary", "process_job", "ship_package"]

RESULT_PREFIX = "SLUICE_RESULT "


def process_job(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        summary = _process(args.spec, args.epoch, args.run_id)
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(RESULT_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="run_epoch.py", description=__doc__)
    parser.add_argument("--spec", required=True, help="pipeline spec (YAML)")
    parser.add_argument("--epoch", required=True, type=int, help="the planned epoch to process")
    parser.add_argument("--run-id", default=None, help="the orchestrator's run id, recorded")
    return parser


def _process(spec_path: str, epoch: int, run_id: str | None) -> dict[str, Any]:
    """The cold path: a new driver builds its session, ships the package, runs the attempt."""
    from sluice.pipeline import open_pipeline
    from sluice.protocol.process import refuse_beyond_next
    from sluice.spark import spark_session

    rt = open_pipeline(spec_path, run_id=run_id)
    refuse_beyond_next(rt.name, rt.repo, epoch)  # before a Spark session starts
    spark = spark_session(f"sluice-{rt.name}-epoch-{epoch}", s3=rt.spec.s3)
    return attempt_summary(rt, spark, epoch, executor_sluice=ship_package(spark))


def ship_package(spark: SparkSession) -> str:
    """Ship the ``sluice`` package to executors (once per session) and return where an
    executor's Python imports it from (the shipped zip on a cluster)."""
    from sluice.spark import package_zip

    spark.sparkContext.addPyFile(str(package_zip()))
    return _executor_import_path(spark)


def attempt_summary(
    rt: Runtime,
    spark: SparkSession,
    epoch: int,
    *,
    executor_sluice: str,
    engine: EngineInfo | None = None,
) -> dict[str, Any]:
    """One attempt of planned epoch ``epoch`` (:func:`~sluice.protocol.process_epoch`) and its
    summary: what ``run_epoch.py`` prints after ``SLUICE_RESULT`` (``engine`` adds to what the
    attempt record says about where it ran, not to the summary)."""
    from sluice.protocol import process_epoch

    info = {"executor_sluice": executor_sluice, **(engine or {})}
    record = process_epoch(rt, spark, epoch, engine=info)
    assert record.result is not None
    return {
        "pipeline": rt.name,
        "epoch": record.epoch,
        "attempt": record.attempt,
        "stats": record.result.stats.to_dict(),
        "spark_master": spark.sparkContext.master,
        "spark_application_id": spark.sparkContext.applicationId,
        "executor_sluice": executor_sluice,
    }


def _executor_import_path(spark: Any) -> str:
    """Where an executor's Python imports ``sluice`` from (the shipped zip on a cluster)."""

    def where(_: Any) -> str:
        import sluice.exceptions

        return str(sluice.exceptions.__file__)

    return str(spark.sparkContext.parallelize([0], 1).map(where).first())
