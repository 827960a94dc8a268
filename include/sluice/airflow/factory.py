"""The DAG factory: one DAG per pipeline spec, ``sluice__<name>``, ``plan >> process >> commit``.

* data-aware runs: the DAG is scheduled on its input asset ``sluice__<name>__input``, whose
  watcher (:class:`~sluice.airflow.triggers.NewInputTrigger`, on the triggerer) looks every
  few seconds (``$SLUICE_INPUT_LOOK_SECONDS``, default 2; never more than the
  ``checkpoint.interval``, the upper bound on latency) and asks for a run only when there is
  work (no new input: no run), or by time once a day (:data:`SAFETY_NET`, the date grid of
  backfills);
  ``dagrun_timeout`` = ``checkpoint.timeout``;
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
* the trigger form's params are :data:`TRIGGER_PARAMS`;
* a spec that cannot run (invalid, clashing locations, a duplicate name) becomes a
  placeholder DAG saying why (:func:`broken_dag`); the others are not affected, and
  :func:`broken_specs` lists them for the monitor.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from itertools import combinations
from pathlib import Path
from typing import Any

import yaml
from airflow.sdk import DAG, Asset, AssetAny, AssetOrTimeSchedule, AssetWatcher, Param, task
from airflow.sdk import DeltaDataIntervalTimetable as EveryInterval
from airflow.sdk.exceptions import AirflowFailException

from sluice.airflow.exceptions import PipelineClash
from sluice.airflow.hooks import DEFAULT_SERVE_CONN
from sluice.airflow.locations import check_apart
from sluice.airflow.operators import SluiceProcessOperator, SluiceServedProcessOperator
from sluice.airflow.params import airflow_params
from sluice.airflow.tasks import PLAN_RETRY_POLICY, asset_extra, commit_task, plan_task
from sluice.airflow.triggers import LOOK_S, NewInputTrigger
from sluice.exceptions import SluiceError
from sluice.spec import PipelineSpec, SinkSpec, format_duration, load_spec
from sluice.spec.model import EXECUTION_MODES

__all__ = [
    "EXECUTION_ENV",
    "LOOK_ENV",
    "PIPELINES_DIR_ENV",
    "SERVE_CONN_ENV",
    "SPARK_CONN_ENV",
    "broken_dag",
    "broken_specs",
    "build_dag",
    "build_dags",
    "check_specs",
    "dag_id",
    "execution_mode",
    "input_asset",
    "input_assets",
    "look_seconds",
    "paused_upon_creation",
    "pool_name",
    "schedule",
    "sink_asset",
    "spec_files",
    "trigger_params",
]

PIPELINES_DIR_ENV = "SLUICE_PIPELINES_DIR"
SPARK_CONN_ENV = "SLUICE_SPARK_CONN_ID"
DEFAULT_SPARK_CONN = "sluice_spark"
EXECUTION_ENV = "SLUICE_EXECUTION"
SERVE_CONN_ENV = "SLUICE_SERVE_CONN_ID"
UNPAUSED_ENV = "SLUICE_UNPAUSED"
LOOK_ENV = "SLUICE_INPUT_LOOK_SECONDS"
# Runs are never back-filled from dates: offsets, not intervals, decide what an epoch reads.
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
# The time part of the schedule, beside the input watcher: one run a day (or per interval, if
# longer) even if the watcher never fires (no triggerer running), and the date grid a
# backfill needs (Airflow backfills only time-scheduled DAGs). It is skipped when idle.
SAFETY_NET = timedelta(days=1)


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
    return {name: Param(form.pop("default"), **form) for name, form in airflow_params().items()}


def sink_asset(spec: PipelineSpec, sink: SinkSpec) -> Asset:
    ref, path = sink.output_ref(), sink.storage_path()
    if ref is not None:  # a table or topic by connection id, not its host: no secret, no lookup
        uri = ref
    elif path is None:  # a user-written sink: no location Sluice knows of
        uri = f"sluice-plugin://{spec.name}/{sink.name}"
    elif "://" in path:
        uri = path
    else:
        uri = Path(path).resolve().as_uri()
    return Asset(name=f"sluice__{spec.name}__{sink.name}", uri=uri, group="sluice")


def input_asset(spec: PipelineSpec, spec_file: str, source: str | None = None) -> Asset:
    """The pipeline's input, watched on the triggerer: an event means a run has work.
    ``source``: one source of a join pipeline (each has its own asset)."""
    interval = spec.checkpoint.interval_us / 1e6
    trigger = NewInputTrigger(
        spec_path=spec_file,
        dag_id=dag_id(spec.name),
        poll_seconds=interval,
        look_seconds=look_seconds(),
        source=source,
    )
    suffix, path = (f"__{source}", f"/{source}") if source is not None else ("", "")
    return Asset(
        name=f"sluice__{spec.name}__input{suffix}",
        uri=f"sluice-input://{spec.name}{path}",
        group="sluice",
        watchers=[AssetWatcher(name=f"sluice__{spec.name}__new_input{suffix}", trigger=trigger)],
    )


def input_assets(spec: PipelineSpec, spec_file: str) -> list[Asset]:
    """The pipeline's input assets: one per source (a pipeline's one ``source:`` by the
    pipeline's name alone)."""
    return [
        input_asset(spec, spec_file, s.name if s.declared else None) for s in spec.sources.values()
    ]


def look_seconds() -> float:
    """How often input watchers look for new input: ``$SLUICE_INPUT_LOOK_SECONDS`` (a number
    > 0), else :data:`~sluice.airflow.triggers.LOOK_S`; each watcher caps it at its
    pipeline's checkpoint interval."""
    text = os.environ.get(LOOK_ENV)
    if not text:
        return LOOK_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{LOOK_ENV}={text!r} is not a number of seconds > 0 (docs/airflow.md)")
    return value


def schedule(spec: PipelineSpec, spec_file: str) -> AssetOrTimeSchedule:
    """A run when the input watcher finds work, and by time every :data:`SAFETY_NET`."""
    every = max(SAFETY_NET, timedelta(microseconds=spec.checkpoint.interval_us))
    inputs = input_assets(spec, spec_file)
    # any source with input makes a run (a list would wait for all of them)
    assets = inputs if len(inputs) == 1 else AssetAny(*inputs)
    return AssetOrTimeSchedule(timetable=EveryInterval(every), assets=assets)


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
        schedule=schedule(spec, spec_file),
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

        @task(task_id="plan", retry_policy=PLAN_RETRY_POLICY)
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

    A spec that cannot run hides nothing but itself: an invalid spec (its
    :class:`~sluice.spec.SpecError` names file, field and fix), two specs that share an input,
    output or checkpoint location (:class:`~sluice.airflow.locations.PipelineClash`: both of
    them), or a pipeline name used twice (the later file) becomes a placeholder DAG that shows
    the error (:func:`broken_dag`); every other spec gets its DAG. Only a deployment setting
    every DAG depends on (``$SLUICE_EXECUTION``) fails the whole DAG file.
    """
    _check_execution_env()
    look_seconds()  # a deployment setting too: a bad value fails the DAG file
    good, broken = check_specs(pipelines_dir)
    dags: dict[str, DAG] = {}
    for spec, spec_file in good:  # each spec file read once
        try:
            dag = build_dag(spec_file, job_path=job_path, spec=spec)
        except Exception as exc:  # one spec's failure must not hide the others
            broken.append((spec_file, _describe(exc)))
            continue
        dags[dag.dag_id] = dag
    for spec_file, message in broken:
        placeholder = broken_dag(spec_file, message, taken=set(dags))
        dags[placeholder.dag_id] = placeholder
    return dags


def check_specs(
    pipelines_dir: str | Path,
) -> tuple[list[tuple[PipelineSpec, str]], list[tuple[str, str]]]:
    """The specs of ``pipelines_dir`` that can run, with their files, and the broken ones:
    ``(spec file, error message)``, both sorted by file name. Reads the spec files only (no
    Airflow metadata DB, no source or checkpoint store)."""
    loaded: list[tuple[PipelineSpec, str]] = []
    broken: dict[str, list[str]] = {}
    for path in spec_files(pipelines_dir):
        spec_file = str(path.resolve())
        try:
            loaded.append((load_spec(spec_file), spec_file))
        except Exception as exc:  # reported as this spec's error
            broken[spec_file] = [_describe(exc)]
    for a, b in combinations(loaded, 2):
        try:
            check_apart([a, b])
        except PipelineClash as exc:
            for _, spec_file in (a, b):
                broken.setdefault(spec_file, []).append(str(exc))
    names: dict[str, str] = {}
    for spec, spec_file in loaded:
        first = names.setdefault(spec.name, spec_file)
        if first != spec_file:
            broken.setdefault(spec_file, []).append(
                f"pipeline name {spec.name!r} is already used by {first}; "
                "Fix: give this spec another `name`."
            )
    good = [(spec, f) for spec, f in loaded if f not in broken]
    return good, sorted((f, "\n".join(messages)) for f, messages in broken.items())


def broken_specs(pipelines_dir: str | Path) -> list[tuple[str, str]]:
    """``(spec file, error message)`` of every spec in ``pipelines_dir`` that has no working
    DAG (invalid, clashing with another spec's locations, or a duplicate pipeline name), by
    file name; the monitor lists them. Light: reads the spec files only."""
    return check_specs(pipelines_dir)[1]


def spec_files(pipelines_dir: str | Path) -> list[Path]:
    folder = Path(pipelines_dir)
    return sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])


def broken_dag(spec_file: str, message: str, *, taken: Collection[str] = ()) -> DAG:
    """The placeholder DAG of a spec that cannot run: ``sluice__<name>`` (the ``name`` the
    file declares, else its file stem), never scheduled, tagged ``spec-error``, its doc and
    its one task ``spec_error`` (which fails with the message if triggered) saying what to
    fix. It keeps the pipeline's DAG id, so its run history and links stay in place."""
    ident = _placeholder_id(spec_file, taken)
    name = Path(spec_file).name
    lines = [line.strip().removeprefix("- ") for line in message.splitlines() if line.strip()]
    short = lines[1] if len(lines) > 1 and lines[0].endswith(":") else lines[0] if lines else ""
    short = short.replace(f"{spec_file}: ", "")
    short = short if len(short) <= _SHORT_MAX else short[: _SHORT_MAX - 1] + "…"
    with DAG(
        dag_id=ident,
        dag_display_name=f"{ident} (spec error: {short})",
        description=f"Spec error in {name}: {' '.join(lines)}"[:_DESCRIPTION_MAX],
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        tags=["sluice", "spec-error"],
        doc_md=(
            f"### Spec error: `{name}`\n\n"
            f"`{spec_file}` cannot run, so this pipeline has no `plan`, `process` and "
            "`commit` tasks until the file is fixed (the other pipelines are not affected). "
            "The DAG returns on the next parse of the DAG file after the fix.\n\n"
            + "\n".join(f"- {_md_text(line)}" for line in lines)
        ),
    ) as dag:

        @task(task_id="spec_error", retries=0)
        def spec_error() -> None:
            raise AirflowFailException(f"{spec_file}: {message}")

        spec_error()
    return dag


_DESCRIPTION_MAX = 500
_SHORT_MAX = 80


def _md_text(text: str) -> str:
    """``text`` shown as written in Markdown (the DAG docs): its special characters escaped."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


def _placeholder_id(spec_file: str, taken: Collection[str]) -> str:
    """``sluice__<name>`` from the file's ``name`` field when it reads as one, else from the
    file stem; a suffix when that DAG id is taken by a working pipeline."""
    name = _declared_name(spec_file) or Path(spec_file).stem
    ident = dag_id(re.sub(r"[^A-Za-z0-9_.-]", "_", name))
    return ident if ident not in taken else f"{ident}__spec_error"


def _declared_name(spec_file: str) -> str | None:
    try:
        data = yaml.safe_load(Path(spec_file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_]+", name) else None


def _describe(exc: Exception) -> str:
    """A spec error's own message (file, field, fix); anything else with its type."""
    return str(exc) if isinstance(exc, SluiceError) else f"{type(exc).__name__}: {exc}"


def _check_execution_env() -> None:
    """``$SLUICE_EXECUTION``, when set, must name an execution mode: a deployment setting,
    so a bad value fails the DAG file (an import error), not one spec."""
    mode = os.environ.get(EXECUTION_ENV)
    if mode and mode not in EXECUTION_MODES:
        raise ValueError(
            f"{EXECUTION_ENV}={mode!r} is not an execution mode: use one of "
            f"{list(EXECUTION_MODES)} (docs/warm-execution.md)"
        )


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


def _sources(spec: PipelineSpec) -> str:
    described = [
        f"`{s.name}` {s.source.describe()}" if s.declared else s.source.describe()
        for s in spec.sources.values()
    ]
    return ("Sources: " if len(described) > 1 else "Source: ") + ", ".join(described)


def _doc(spec: PipelineSpec, spec_file: str) -> str:
    sinks = ", ".join(f"`{s.name}` → {s.describe()}" for s in spec.sinks)
    return (
        f"### Sluice pipeline `{spec.name}`\n\n"
        f"Spec: `{spec_file}`. {_sources(spec)}; "
        f"{spec.describe_operator()}. Sinks: {sinks}. One run = one epoch "
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
