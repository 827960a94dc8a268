"""Data-aware runs: the asset watcher that creates a pipeline's DAG run when there is work.

Each pipeline's DAG is scheduled on its input asset ``sluice__<name>__input``, watched by a
:class:`NewInputTrigger` on the triggerer. Every few seconds (``look_seconds``,
:data:`LOOK_S` by default, never more than the checkpoint interval) the trigger asks whether a
run would have something to do (light: no Spark) and fires one event when it would; Airflow
turns the event into an asset-triggered run. So:

* no new input, no run; input is noticed within ``look_seconds``, and the checkpoint interval
  stays an upper bound on latency, not a polling period;
* a look lists the source only (:func:`pending_work`: one listing, e.g. one S3 LIST per 1,000
  keys) from the start offset the last full look found; the checkpoint store is read again
  (:func:`next_start`: the latest checkpoint and the next epoch's plan) when a run of the DAG
  was created since, and at least once per ``poll_seconds`` (the checkpoint interval), which
  also catches a ``sluice run`` made outside Airflow;
* only input no run has PLANNED yet counts: while any run of the DAG is queued or running the
  trigger does not fire (that run plans or commits the next epoch) and lists nothing; it counts
  the DAG's runs every ``look_seconds`` (at most :data:`BUSY_POLL_S`) and, the moment the run
  ends, reads the store and the source, so a backlog is caught up epoch after epoch without
  waiting between them;
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

if TYPE_CHECKING:
    from sluice.protocol import Runtime

__all__ = [
    "BUSY_POLL_S",
    "LOOK_S",
    "RUN_APPEARS_S",
    "NewInputTrigger",
    "next_start",
    "pending_work",
    "work_waiting",
]

log = logging.getLogger(__name__)

# How often the trigger looks for new input (the source's listing) unless the DAG says
# otherwise; never more than the checkpoint interval.
LOOK_S = 2.0
# How often, at most, a busy pipeline (a run queued or running) is looked at: one DagRun count
# through the API server, no listing; so a backlog is caught up run after run whatever the look.
BUSY_POLL_S = 5.0
# How long, after firing, the trigger waits for the scheduler to create the run.
RUN_APPEARS_S = 120.0
_ACTIVE = ["queued", "running"]


def work_waiting(rt: Runtime, source: str | None = None) -> str | None:
    """Why a new run of the pipeline would have work, or None when it would find nothing:
    :func:`next_start` and :func:`pending_work` in one go.

    Called only while no run of the pipeline is in flight.
    """
    reason, start = next_start(rt)
    return reason if reason is not None else pending_work(rt, start, source)


def next_start(rt: Runtime) -> tuple[str | None, Any]:
    """What the checkpoint store says: why a new run has work whatever the input (a stored plan
    of the next epoch: while no run is in flight, one whose run ended without committing, which
    a new run replays), else None; and the source offset new input starts after."""
    latest = rt.repo.latest_checkpoint()
    epoch = (latest.epoch if latest else 0) + 1
    if latest is not None:
        start = rt.source.decode_offset(latest.end_offset)
    else:
        start = rt.source.initial_offset()
    if rt.repo.plan(epoch) is not None:
        return (
            f"epoch {epoch} is planned but not committed (its run ended); a new run replays it",
            start,
        )
    return None, start


def pending_work(rt: Runtime, start: Any, source: str | None = None) -> str | None:
    """Why a run has work at source offset ``start`` (one listing of the source): any input
    unit after it counts; a source that cannot count (unbounded, None) always has work, as on
    a time schedule. None when there is nothing. ``source``: one source of a join pipeline
    (its input asset's watcher), at its part of ``start``."""
    part: Any = rt.source
    if source is not None:
        part, start = rt.source.offset_parts(start)[source]
    units = part.pending_units(start)
    if units is None:
        return f"source {part.location} cannot count its new input; a run looks"
    if units == 0:
        return None
    return f"{units} new input unit{'s' if units != 1 else ''} at {part.location}"


@dataclass(frozen=True)
class _Known:
    """What the last read of the checkpoint store found, and when."""

    rt: Runtime
    start: Any  # the source offset new input starts after
    runs: int  # the DAG's runs (any state) at that read
    at: float  # time.monotonic() of that read


class NewInputTrigger(BaseEventTrigger):
    """Fires when pipeline ``spec_path`` (DAG ``dag_id``) has work and no run is in flight;
    looks every ``look_seconds`` (default :data:`LOOK_S`, at most ``poll_seconds``) and reads
    the checkpoint store at least every ``poll_seconds`` (the spec's checkpoint interval).
    See the module doc."""

    def __init__(
        self,
        spec_path: str,
        dag_id: str,
        poll_seconds: float,
        look_seconds: float | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source  # a join pipeline: the one source this watcher looks at
        self.spec_path, self.dag_id, self.poll_seconds = spec_path, dag_id, float(poll_seconds)
        look = LOOK_S if look_seconds is None else float(look_seconds)
        self.look_seconds = min(look, self.poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "spec_path": self.spec_path,
                "dag_id": self.dag_id,
                "poll_seconds": self.poll_seconds,
                "look_seconds": self.look_seconds,
                **({"source": self.source} if self.source is not None else {}),
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        known: _Known | None = None
        while True:
            try:
                busy = await self._runs(_ACTIVE) > 0
                runs = 0 if busy else await self._runs(None)
            except Exception:  # the API server restarting, say: look again next interval
                log.exception("%s: could not count the DAG's runs", self.dag_id)
                await asyncio.sleep(self.poll_seconds)
                continue
            if busy:
                await asyncio.sleep(min(BUSY_POLL_S, self.look_seconds))
                continue
            reason, known = await asyncio.to_thread(self._look, known, runs)
            if reason is None:
                await asyncio.sleep(self.look_seconds)
                continue
            log.info("%s: %s; asking for a run", self.dag_id, reason)
            yield TriggerEvent({"dag_id": self.dag_id, "reason": reason, "at": time.time()})
            await self._wait_for_run(runs)

    def _look(self, known: _Known | None, runs: int) -> tuple[str | None, _Known | None]:
        """Why a run has work, if it has (in a worker thread: it reads storage), and what the
        checkpoint store said: read again when ``known`` is from before a run of the DAG was
        created, or older than ``poll_seconds``; else only the source is listed. A failure to
        look is logged, not fatal (the trigger looks again, reading the store)."""
        try:
            now = time.monotonic()
            if known is None or known.runs != runs or now - known.at >= self.poll_seconds:
                rt = self._runtime()
                reason, start = next_start(rt)
                known = _Known(rt, start, runs, now)
                if reason is not None:
                    return reason, known
            return pending_work(known.rt, known.start, self.source), known
        except Exception:
            log.exception("%s: could not look for new input in %s", self.dag_id, self.spec_path)
            return None, None

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
            await asyncio.sleep(min(BUSY_POLL_S, self.look_seconds))
