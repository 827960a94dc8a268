"""Data-aware runs: the asset watcher that creates a pipeline's DAG run when there is work.

Each pipeline's DAG is scheduled on its input asset ``sluice__<name>__input``, watched by a
:class:`NewInputTrigger` on the triggerer. Every ``checkpoint.interval`` the trigger asks
:func:`work_waiting` (light: the checkpoint store and the source's listing, no Spark) and
fires one event when a run would have something to do; Airflow turns the event into an
asset-triggered run. So:

* no new input, no run (the interval stays the upper bound on latency: one look per interval);
* only input no run has PLANNED yet counts: while any run of the DAG is queued or running the
  trigger does not fire (that run plans or commits the next epoch); it looks again every
  :data:`BUSY_POLL_S` and, the moment the run ends, checks the source, so a backlog is caught
  up epoch after epoch without waiting an interval between them;
* after firing it waits until the run it asked for exists (:data:`RUN_APPEARS_S`), so one
  arrival makes one run;
* a plan whose run ended without committing (it failed) is work too: the next run replays it.

Manual runs (the trigger form, rewinds, savepoints, ``dag.test``) are unaffected.

The triggerer runs every trigger on one event loop, so nothing here may block it: each look
(the checkpoint store, the source's listing, building the runtime) and each DagRun count runs
in a worker thread (``asyncio.to_thread``), and this module imports nothing heavy, since
Airflow imports it on that loop (the engine is imported by the first look, in its thread).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from sluice.protocol import Runtime

__all__ = ["BUSY_POLL_S", "RUN_APPEARS_S", "NewInputTrigger", "work_waiting"]

log = logging.getLogger(__name__)

# How often a busy pipeline (a run queued or running) is looked at: one DagRun count through
# the API server, no source listing.
BUSY_POLL_S = 5.0
# How long, after firing, the trigger waits for the scheduler to create the run.
RUN_APPEARS_S = 120.0
_ACTIVE = ["queued", "running"]


def work_waiting(rt: Runtime) -> str | None:
    """Why a new run of the pipeline would have work, or None when it would find nothing.

    Called only while no run of the pipeline is in flight: a stored plan of the next epoch is
    then one whose run ended without committing (a new run replays it). Else the input after
    the latest checkpoint: any unit counts; a source that cannot count (unbounded, None)
    always has work, as on a time schedule.
    """
    latest = rt.repo.latest_checkpoint()
    epoch = (latest.epoch if latest else 0) + 1
    if rt.repo.plan(epoch) is not None:
        return f"epoch {epoch} is planned but not committed (its run ended); a new run replays it"
    if latest is not None:
        start = rt.source.decode_offset(latest.end_offset)
    else:
        start = rt.source.initial_offset()
    units = rt.source.pending_units(start)
    if units is None:
        return f"source {rt.source.location} cannot count its new input; a run looks"
    if units == 0:
        return None
    return f"{units} new input unit{'s' if units != 1 else ''} at {rt.source.location}"


class NewInputTrigger(BaseEventTrigger):
    """Fires when pipeline ``spec_path`` (DAG ``dag_id``) has work and no run is in flight;
    looks every ``poll_seconds`` (the spec's checkpoint interval). See the module doc."""

    def __init__(self, spec_path: str, dag_id: str, poll_seconds: float) -> None:
        super().__init__()
        self.spec_path, self.dag_id, self.poll_seconds = spec_path, dag_id, float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"spec_path": self.spec_path, "dag_id": self.dag_id, "poll_seconds": self.poll_seconds},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        busy_poll = min(BUSY_POLL_S, self.poll_seconds)
        while True:
            try:
                busy = await self._runs(_ACTIVE) > 0
                reason = None if busy else await asyncio.to_thread(self._look)
                before = await self._runs(None) if reason is not None else 0
            except Exception:  # the API server restarting, say: look again next interval
                log.exception("%s: could not count the DAG's runs", self.dag_id)
                await asyncio.sleep(self.poll_seconds)
                continue
            if busy or reason is None:
                await asyncio.sleep(busy_poll if busy else self.poll_seconds)
                continue
            log.info("%s: %s; asking for a run", self.dag_id, reason)
            yield TriggerEvent({"dag_id": self.dag_id, "reason": reason, "at": time.time()})
            await self._wait_for_run(before)

    def _look(self) -> str | None:
        """:func:`work_waiting` of the pipeline (in a worker thread: it reads storage); a
        failure to look is logged, not fatal (the trigger looks again next interval)."""
        try:
            return work_waiting(self._runtime())
        except Exception:
            log.exception("%s: could not look for new input in %s", self.dag_id, self.spec_path)
            return None

    def _runtime(self) -> Runtime:
        """The pipeline's runtime, as its tasks open it (connections from Airflow)."""
        from sluice.airflow.tasks import runtime_for  # the engine: in the thread, not on the loop

        return runtime_for(self.spec_path, None)

    async def _runs(self, states: list[str] | None) -> int:
        """How many runs of the DAG are in ``states`` (None: in any state), counted in a
        worker thread (a request to the API server)."""
        return await asyncio.to_thread(self._count_runs, states)

    def _count_runs(self, states: list[str] | None) -> int:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        return int(RuntimeTaskInstance.get_dr_count(self.dag_id, None, None, states))

    async def _wait_for_run(self, before: int) -> None:
        """Until the DAG has more runs than ``before`` (the one asked for), at most
        :data:`RUN_APPEARS_S`."""
        deadline = time.monotonic() + RUN_APPEARS_S
        while time.monotonic() < deadline:
            try:
                if await self._runs(None) > before:
                    return
            except Exception:
                log.exception("%s: could not count the DAG's runs", self.dag_id)
            await asyncio.sleep(min(BUSY_POLL_S, self.poll_seconds))
