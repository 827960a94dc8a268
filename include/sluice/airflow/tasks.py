"""The light ``plan`` and ``commit`` tasks; ``process`` is a spark-submit (see operators.py).

Each task rebuilds the runtime from the spec file, so any worker can run any step, and each
step is idempotent: a retried ``plan`` returns the stored plan, a retried ``commit`` finishes
the commit of the attempt ``process`` prepared without reprocessing anything.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Connection
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import (
    AirflowNotFoundException,
    AirflowRescheduleException,
    AirflowSkipException,
)

from sluice.airflow.exceptions import RunRefused
from sluice.connections import connection_uri, connections_from_env
from sluice.contracts.records import Checkpoint
from sluice.pipeline import open_pipeline
from sluice.protocol import InvalidRunRequest, RunRequest, Runtime, commit_epoch, take_savepoint
from sluice.spec import PipelineSpec, load_spec

__all__ = [
    "PLAN_RETRY_POLICY",
    "RunRefused",
    "asset_extra",
    "commit_task",
    "plan_task",
    "refusal_line",
    "runtime_for",
    "spec_connections",
]

log = logging.getLogger(__name__)


# The plan task's retry policy: a refused run request fails at once, anything else retries as
# the spec's restart block says.
PLAN_RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=RunRefused,
            action=RetryAction.FAIL,
            reason="a refused run request is not retried: the same request would be refused",
        )
    ]
)


def refusal_line(exc: InvalidRunRequest) -> str:
    """The refusal on one line: the pipeline, then every problem (field: message)."""
    return f"pipeline {exc.pipeline!r}: run request refused, nothing was run: " + "; ".join(
        exc.problems
    )


def runtime_for(spec_path: str, run_id: str | None) -> Runtime:
    """The runtime a task runs on; the connections the spec names come from Airflow too."""
    spec = load_spec(spec_path)
    return open_pipeline(spec, run_id=run_id, connections=spec_connections(spec))


def spec_connections(spec: PipelineSpec) -> dict[str, str]:
    """URIs of the connections the spec's sinks, source and lookup tables name: from
    ``SLUICE_CONN_<ID>`` / ``AIRFLOW_CONN_<ID>`` first, else from Airflow's connections
    (metadata DB or secrets backend). A missing one is left out; the sink, source or plan
    then fails with what to define."""
    env = connections_from_env(os.environ)
    found: dict[str, str] = {}
    sources = [named.source for named in spec.sources.values()]
    parts = (*sources, *spec.sinks, spec.late_records, spec.dead_letters)
    ids = [conn_id for part in parts for conn_id in part.connection_ids()]
    ids += [lookup.connection for lookup in spec.lookup if lookup.connection]
    for conn_id in ids:
        if conn_id is None or conn_id in found:
            continue
        if conn_id in env:
            found[conn_id] = env[conn_id]
            continue
        try:
            found[conn_id] = connection_uri(Connection.get(conn_id).get_uri())
        except AirflowNotFoundException:
            continue
    return found


# How long a run's plan waits before looking again while another run's epoch is in flight.
WAIT_FOR_RUN_S = 15


def plan_task(
    spec_path: str,
    params: Mapping[str, Any],
    run_id: str | None,
    run_in_flight: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Check the trigger conf, then plan the next epoch (or reuse its stored plan).

    A bad conf fails the task without retries, before anything of the run is written: one
    line in the task log (:class:`RunRefused`, no traceback), kept as the pipeline's last
    refusal (``Repository.record_refusal``) for the monitor. No new input skips ``process``
    and ``commit``. When the next epoch was planned by another run that is
    still queued or running (a backfill's runs, or a manual trigger next to a scheduled run),
    this task is rescheduled (``up_for_reschedule``, pool slot released) until that run ends:
    runs go one epoch each, in turn. A plan whose run has ended is taken over (replayed).
    """
    rt = runtime_for(spec_path, run_id)
    try:
        request = RunRequest.from_conf(rt.name, params)
        options = request.resolve(rt)
    except InvalidRunRequest as exc:
        line = refusal_line(exc)
        log.error("%s", line)
        rt.repo.record_refusal(run_id, line, int(rt.clock() * 1_000_000))
        raise RunRefused(line) from None
    plan = options.plan(rt)
    other = plan.run_id if plan is not None else None
    if other not in (None, run_id) and run_in_flight is not None and run_in_flight(other):
        raise AirflowRescheduleException(
            reschedule_date=datetime.now(UTC) + timedelta(seconds=WAIT_FOR_RUN_S)
        )
    if plan is None:
        taken = ""
        if request.take_savepoint is not None:
            saved = take_savepoint(rt, request.take_savepoint, note=f"taken by run {run_id}")
            taken = f"; savepoint {saved.name!r} taken of checkpoint {saved.epoch}"
        raise AirflowSkipException(f"pipeline {rt.name!r}: no new input; nothing to plan{taken}")
    rng = rt.source.decode_range(plan.source_range)
    return {
        "pipeline": rt.name,
        "epoch": plan.epoch,
        "input_units": rng.units,
        "start_offset": plan.start_offset,
        "end_offset": plan.end_offset,
        "planned_by_run": plan.run_id,
        "restored_from": plan.restored_from.to_dict() if plan.restored_from else None,
        "state_migration": plan.state_migration.to_dict() if plan.state_migration else None,
    }


def commit_task(
    spec_path: str, epoch: int, run_id: str | None, params: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], Checkpoint]:
    """Commit the epoch's prepared attempt (the winner if another process already did), then
    take the savepoint the trigger asked for (``take_savepoint``), if any."""
    rt = runtime_for(spec_path, run_id)
    checkpoint = commit_epoch(rt, epoch)
    name = (params or {}).get("take_savepoint")
    saved = rt.repo.savepoint(name) if name else None
    if name and saved is None:  # a retry after the savepoint was taken finds it
        saved = take_savepoint(rt, name, checkpoint.epoch, note=f"taken by run {run_id}")
    stats = checkpoint.result.stats
    summary = {
        "pipeline": rt.name,
        "epoch": checkpoint.epoch,
        "attempt": checkpoint.attempt,
        "committed_by_run": checkpoint.run_id,
        "stats": stats.to_dict(),
        "watermark_us": checkpoint.result.watermark_us,
    }
    if saved is not None:
        summary["savepoint"] = {"name": saved.name, "epoch": saved.epoch}
    return summary, checkpoint


def asset_extra(checkpoint: Checkpoint, sink: str) -> dict[str, Any]:
    """The metadata of one sink's asset event: epoch, rows written and the epoch's counts."""
    rows = next((p.rows for p in checkpoint.result.prepared if p.sink == sink), 0)
    stats = checkpoint.result.stats
    return {
        "pipeline": checkpoint.pipeline,
        "epoch": checkpoint.epoch,
        "sink": sink,
        "rows": rows,
        "records_read": stats.records_read,
        "accepted": stats.accepted,
        "late": stats.late,
        "dead": stats.dead,
        "windows_emitted": stats.windows_emitted,
    }
