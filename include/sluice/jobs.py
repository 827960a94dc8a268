"""Spark job entry points (``jobs/*.py`` are thin wrappers that call these).

``process_job`` is what the Airflow ``process`` task runs through ``spark-submit``: one attempt
of an already planned epoch. Its last stdout line is ``SLUICE_RESULT <json>`` (epoch, attempt,
counts, the Spark master and application id), so the task log says where the epoch ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sluice.exceptions import SluiceError

__all__ = ["RESULT_PREFIX", "process_job"]

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
    from sluice.protocol import Faults, Runtime, process_epoch
    from sluice.protocol.runtime import connections_from_env
    from sluice.spark import package_zip, spark_session
    from sluice.spec import load_spec

    spec = load_spec(spec_path)
    rt = Runtime.build(
        spec,
        clock=time.time,
        new_attempt_id=lambda: uuid.uuid4().hex[:12],
        faults=Faults.from_env(),
        run_id=run_id,
        connections=connections_from_env(os.environ),
    )
    spark = spark_session(f"sluice-{spec.name}-epoch-{epoch}", s3=spec.s3)
    spark.sparkContext.addPyFile(str(package_zip()))
    executor_sluice = _executor_import_path(spark)
    record = process_epoch(rt, spark, epoch, engine={"executor_sluice": executor_sluice})
    assert record.result is not None
    return {
        "pipeline": spec.name,
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
