"""The DAG factory: one DAG per pipeline spec, ``sluice__<name>``, ``plan >> process >> commit``.

* ``schedule`` = ``checkpoint.interval``; ``dagrun_timeout`` = ``checkpoint.timeout``;
* ``max_active_runs=1`` and every task in the one-slot pool ``sluice__<name>`` (created by
  ``python -m sluice.airflow.provision``), so scheduled, manual and backfill runs never overlap;
* retries with exponential backoff from the spec's ``restart`` block;
* ``plan`` and ``commit`` are light Python tasks, ``process`` a spark-submit of
  ``jobs/run_epoch.py`` on the Spark connection (``$SLUICE_SPARK_CONN_ID``, default
  ``sluice_spark``), or in warm mode a request to ``sluice serve`` (connection
  ``$SLUICE_SERVE_CONN_ID``, default ``sluice_serve``): the spec's ``execution``, else
  ``$SLUICE_EXECUTION`` (``cold`` by default), decides (:func:`execution_mode`);
* paused or not when Airflow first sees it: ``$SLUICE_UNPAUSED`` (:func:`paused_upon_creation`);
* every sink (outputs, late records, dead letters) is an Asset whose events carry the epoch
  and its counts;
* the trigger form's params are :data:`TRIGGER_PARAMS`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, Param, task

from sluice.airflow.hooks import DEFAULT_SERVE_CONN
from sluice.airflow.locations import check_apart
from sluice.airflow.operators import SluiceProcessOperator, SluiceServedProcessOperator
from sluice.airflow.tasks import asset_extra, commit_task, plan_task
from sluice.protocol.request import RunRequest
from sluice.spec import PipelineSpec, SinkSpec, format_duration, load_spec
from sluice.spec.model import EXECUTION_MODES

__all__ = [
    "EXECUTION_ENV",
    "PIPELINES_DIR_ENV",
    "SERVE_CONN_ENV",
    "SPARK_CONN_ENV",
    "build_dag",
    "build_dags",
    "dag_id",
    "execution_mode",
    "paused_upon_creation",
    "pool_name",
    "sink_asset",
    "trigger_params",
]

PIPELINES_DIR_ENV = "SLUICE_PIPELINES_DIR"
SPARK_CONN_ENV = "SLUICE_SPARK_CONN_ID"
DEFAULT_SPARK_CONN = "sluice_spark"
EXECUTION_ENV = "SLUICE_EXECUTION"
SERVE_CONN_ENV = "SLUICE_SERVE_CONN_ID"
UNPAUSED_ENV = "SLUICE_UNPAUSED"
# Runs are never back-filled from dates: offsets, not intervals, decide what an epoch reads.
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def dag_id(pipeline: str) -> str:
    return f"sluice__{pipeline}"


def pool_name(pipeline: str) -> str:
    return f"sluice__{pipeline}"


def execution_mode(spec: PipelineSpec) -> str:
    """``cold`` (spark-submit per epoch) or ``warm`` (``sluice serve``): the spec's
    ``execution`` field, else ``$SLUICE_EXECUTION``, else ``cold``."""
    if spec.execution is not None:
        return spec.execution
    mode = os.environ.get(EXECUTION_ENV) or "cold"
    if mode not in EXECUTION_MODES:
        raise ValueError(
            f"{EXECUTION_ENV}={mode!r} is not an execution mode: use one of "
            f"{list(EXECUTION_MODES)} (docs/warm-execution.md)"
        )
    return mode


def paused_upon_creation(spec: PipelineSpec) -> bool | None:
    """Whether the DAG starts paused when Airflow first records it (``is_paused_upon_creation``;
    later the UI's pause toggle decides). ``$SLUICE_UNPAUSED`` lists the pipelines that start
    unpaused (comma-separated; ``make airflow`` and compose set it to the demo): with it set,
    every other pipeline starts paused; unset, Airflow's ``dags_are_paused_at_creation``."""
    names = os.environ.get(UNPAUSED_ENV)
    if names is None:
        return None
    return spec.name not in {name.strip() for name in names.split(",")}


def trigger_params() -> dict[str, Param]:
    """The trigger form, derived from :class:`~sluice.protocol.request.RunRequest` (the one
    declaration of the run-request fields). Defaults make a scheduled run: continue from the
    latest checkpoint."""
    return {
        name: Param(form.pop("default"), **form)
        for name, form in RunRequest.airflow_params().items()
    }


def sink_asset(spec: PipelineSpec, sink: SinkSpec) -> Asset:
    table, path = sink.table_ref(), sink.storage_path()
    if table is not None:  # the connection id, not its host: no secret, no lookup
        uri = "sluice-postgres://{}/{}/{}".format(*table)
    elif path is None:  # a user-written sink: no location Sluice knows of
        uri = f"sluice-plugin://{spec.name}/{sink.name}"
    elif "://" in path:
        uri = path
    else:
        uri = Path(path).resolve().as_uri()
    return Asset(name=f"sluice__{spec.name}__{sink.name}", uri=uri, group="sluice")


def build_dag(
    spec_path: str | Path, *, job_path: str | Path, spec: PipelineSpec | None = None
) -> DAG:
    """The DAG of the spec at ``spec_path`` (``spec``: that file, already loaded)."""
    spec_file = str(Path(spec_path).resolve())
    spec = spec if spec is not None else load_spec(spec_file)
    sinks = (*spec.sinks, spec.late_records, spec.dead_letters)
    assets = [sink_asset(spec, s) for s in sinks]
    with DAG(
        dag_id=dag_id(spec.name),
        description=f"Sluice pipeline {spec.name}: {spec.origin}",
        schedule=timedelta(microseconds=spec.checkpoint.interval_us),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=paused_upon_creation(spec),
        dagrun_timeout=timedelta(microseconds=spec.checkpoint.timeout_us),
        default_args=_task_defaults(spec),
        params=trigger_params(),
        tags=_tags(spec),
        doc_md=_doc(spec, spec_file),
    ) as dag:

        @task(task_id="plan")
        def plan(params: Any = None, run_id: str | None = None, ti: Any = None) -> dict[str, Any]:
            def in_flight(other: str) -> bool:
                return ti.get_dagrun_state(dag_id(spec.name), other) in ("queued", "running")

            return plan_task(spec_file, params or {}, run_id, in_flight if ti else None)

        @task(task_id="commit", outlets=assets)
        def commit(
            planned: dict[str, Any],
            outlet_events: Any = None,
            run_id: str | None = None,
            params: Any = None,
        ) -> dict[str, Any]:
            summary, checkpoint = commit_task(
                spec_file, int(planned["epoch"]), run_id, params or {}
            )
            for sink, asset in zip(sinks, assets, strict=True):
                outlet_events[asset].extra = asset_extra(checkpoint, sink.name)
            return summary

        process = _process_task(spec, spec_file, job_path)
        planned: Any = plan()  # an XComArg; its value is the plan summary
        planned >> process >> commit(planned)
    return dag


_EPOCH = "{{ ti.xcom_pull(task_ids='plan')['epoch'] }}"


def _process_task(spec: PipelineSpec, spec_file: str, job_path: str | Path) -> Any:
    """spark-submit of ``job_path`` (cold), or a request to ``sluice serve`` (warm)."""
    if execution_mode(spec) == "warm":
        return SluiceServedProcessOperator(
            task_id="process",
            spec_path=spec_file,
            epoch=_EPOCH,
            run_id="{{ run_id }}",
            serve_conn_id=os.environ.get(SERVE_CONN_ENV) or DEFAULT_SERVE_CONN,
        )
    return SluiceProcessOperator(
        task_id="process",
        application=str(Path(job_path).resolve()),
        application_args=["--spec", spec_file, "--epoch", _EPOCH, "--run-id", "{{ run_id }}"],
        conn_id=os.environ.get(SPARK_CONN_ENV, DEFAULT_SPARK_CONN),
        name=f"sluice-{spec.name}",
        spec_path=spec_file,
    )


def _tags(spec: PipelineSpec) -> list[str]:
    tags = ["sluice", f"qos{spec.qos}", f"source:{spec.source.type}"]
    if execution_mode(spec) == "warm":
        tags.append("execution:warm")
    return tags


def build_dags(pipelines_dir: str | Path, *, job_path: str | Path) -> dict[str, DAG]:
    """One DAG per ``*.yaml`` / ``*.yml`` spec in ``pipelines_dir`` (sorted by file name).

    An invalid spec raises its :class:`~sluice.spec.SpecError` (file, field, fix), and two
    specs that share an input, output or checkpoint location raise
    :class:`~sluice.airflow.locations.PipelineClash` (both specs, the URI): Airflow shows
    either as the DAG file's import error.
    """
    folder = Path(pipelines_dir)
    specs = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
    dags: dict[str, DAG] = {}
    loaded: list[tuple[PipelineSpec, str]] = []
    for path in specs:
        spec_file = str(path.resolve())
        loaded.append((load_spec(spec_file), spec_file))
    check_apart(loaded)
    for spec, spec_file in loaded:  # each spec file read once
        dag = build_dag(spec_file, job_path=job_path, spec=spec)
        if dag.dag_id in dags:
            raise ValueError(f"{spec_file}: pipeline name of {dag.dag_id} is used by another spec")
        dags[dag.dag_id] = dag
    return dags


def _task_defaults(spec: PipelineSpec) -> dict[str, Any]:
    restart = spec.restart
    return {
        "owner": "sluice",
        "pool": pool_name(spec.name),
        "pool_slots": 1,
        "retries": restart.attempts,
        "retry_delay": timedelta(microseconds=restart.delay_us),
        "retry_exponential_backoff": restart.multiplier if restart.multiplier > 1 else 0,
        "max_retry_delay": timedelta(microseconds=restart.max_delay_us),
        "execution_timeout": timedelta(microseconds=spec.checkpoint.timeout_us),
        # a run that already planned finishes before a newer run plans (commit > process > plan)
        "weight_rule": "upstream",
    }


def _operator(spec: PipelineSpec) -> str:
    """What the pipeline computes, in a few words."""
    keys = ", ".join(f"`{k}`" for k in spec.key_by) or "no key"
    if spec.stateless:
        return "stateless (select / filter, every accepted record appended; no state)"
    if spec.process is not None:
        return f"process function `{spec.process.function}` by {keys}"
    return f"{spec.windowing.describe()} windows by {keys}, emit {spec.emit}"


def _doc(spec: PipelineSpec, spec_file: str) -> str:
    sinks = ", ".join(f"`{s.name}` → {s.describe()}" for s in spec.sinks)
    return (
        f"### Sluice pipeline `{spec.name}`\n\n"
        f"Spec: `{spec_file}`. Source: {spec.source.describe()}; "
        f"{_operator(spec)}. Sinks: {sinks}. One run = one epoch "
        f"(every {format_duration(spec.checkpoint.interval_us)}), exactly-once (qos "
        f"{spec.qos}).\n\n"
        "Trigger with config to cap the epoch (`max_records`), to restore from a "
        "checkpoint, a savepoint or explicit source offsets, or to take a savepoint "
        "(`take_savepoint`). `sluice checkpoints <spec>` shows the history, "
        "`sluice savepoints <spec>` the savepoints." + _warm_note(spec)
    )


def _warm_note(spec: PipelineSpec) -> str:
    if execution_mode(spec) != "warm":
        return ""
    return (
        "\n\nWarm execution: `process` runs on the `sluice serve` server of connection "
        f"`{os.environ.get(SERVE_CONN_ENV) or DEFAULT_SERVE_CONN}` (docs/warm-execution.md)."
    )
