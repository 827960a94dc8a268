"""What a pipeline's page shows, read once per request: its history, savepoints, lag and
health (docs/monitor.md, "Health"), with no markup.

:func:`pipeline_view` reads a pipeline's checkpoint store into a :class:`PipelineView`; the
pages (:mod:`sluice.monitor.pages`) and the action forms (:mod:`sluice.monitor.actions`) are
made from it. A committed epoch whose sinks committed never changes, so its row is kept in a
:class:`HistoryCache`; a page load then reads only the epochs that are new or still moving.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.monitor.charts import age as _age
from sluice.monitor.text import public_text, server_places
from sluice.report import checkpoint_rows, pending_by_source, pending_units, released_line

if TYPE_CHECKING:
    from sluice.protocol import Runtime

__all__ = [
    "BEHIND_INTERVALS",
    "FAILED",
    "FINAL_STATUS",
    "IN_FLIGHT",
    "Health",
    "HistoryCache",
    "PipelineView",
    "RequestedRun",
    "pipeline_view",
]

FINAL_STATUS = "sinks committed"
FAILED = ("failed", "aborted")  # an uncommitted epoch whose latest attempt ended so
IN_FLIGHT = ("planned", "processing", "prepared", "committed")  # a run is still on it
# A pipeline is "behind" when its last commit is older than this many intervals.
BEHIND_INTERVALS = 2.0


class HistoryCache:
    """Rows of finished epochs by (checkpoint store, epoch): they never change."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._rows: dict[tuple[str, int], dict[str, Any]] = {}
        self._lock = threading.Lock()  # requests read pipelines concurrently

    def get(self, store: str, epoch: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._rows.get((store, epoch))
        return dict(row) if row is not None else None

    def put(self, store: str, row: dict[str, Any]) -> None:
        if row.get("status") != FINAL_STATUS:
            return
        with self._lock:
            if len(self._rows) >= self.limit:
                self._rows.clear()
            self._rows[(store, row["epoch"])] = dict(row)


@dataclass(frozen=True)
class Health:
    """``state``: caught up | ok | behind | failing | idle (docs/monitor.md, "Health")."""

    state: str
    text: str
    last_commit_age_s: float | None
    failed_epochs: int
    late: int  # over the committed epochs no rewind retracted
    dead: int
    error: str | None = None  # the failing epoch's last stored error


@dataclass(frozen=True)
class RequestedRun:
    """A run the monitor's actions triggered (the ``run`` and ``at`` of the page they lead
    to): in flight from the trigger until the checkpoint store shows something of it."""

    run_id: str
    at: float  # when it was triggered (seconds since the epoch)


@dataclass
class PipelineView:
    """Everything a pipeline's page shows, read once per request."""

    name: str
    dag_id: str
    interval_s: float
    unit_name: str
    rows: list[dict[str, Any]]
    savepoints: list[dict[str, Any]]
    lag: int | None
    now: float
    retained: int | None = None
    spec_file: str = ""
    load_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    refusal: dict[str, Any] | None = None  # Repository.last_refusal(), without server paths
    timeout_s: float = 0.0  # checkpoint.timeout: no run lasts longer (0: unknown)
    requested: RequestedRun | None = None
    lag_by_source: dict[str, int | None] = field(default_factory=dict)  # a join's sources

    @property
    def committed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("committed_at") is not None]

    @property
    def latest(self) -> dict[str, Any] | None:
        committed = self.committed
        return committed[-1] if committed else None

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The epochs after the latest committed one (a run plans one at a time)."""
        last = self.latest
        return [r for r in self.rows if r["epoch"] > (last["epoch"] if last else 0)]

    @property
    def in_flight(self) -> dict[str, Any] | None:
        """The epoch a run is on now (planned, processing, or committing its sinks), unless
        nothing happened to it for longer than a run may last (its run was killed); else the
        run the monitor just triggered, before it planned (``epoch`` None, ``requested``)."""
        moving = [r for r in self.rows if r["status"] in IN_FLIGHT and not self.stalled(r)]
        if moving:
            return moving[-1]
        asked = self.requested
        if asked is None or self.shows(asked.run_id) or self._overdue(asked):
            return None
        return {"epoch": None, "status": "requested", "run_id": asked.run_id,
                "requested_at": asked.at}  # fmt: skip

    @property
    def lost_request(self) -> RequestedRun | None:
        """The run the monitor triggered, when a run's time has passed and the store shows
        nothing of it (Airflow did not run it, or it failed before planning)."""
        asked = self.requested
        if asked is None or self.shows(asked.run_id) or not self._overdue(asked):
            return None
        return asked

    def shows(self, run_id: str) -> bool:
        """Whether the store holds something of run ``run_id``: an epoch it planned or
        committed, a savepoint it took, or its refusal."""
        return (any(r.get("run_id") == run_id for r in self.rows)
                or any(s.get("run_id") == run_id for s in self.savepoints)
                or (self.refusal or {}).get("run_id") == run_id)  # fmt: skip

    def _overdue(self, asked: RequestedRun) -> bool:
        return bool(self.timeout_s) and self.now - asked.at > self.timeout_s

    def stalled(self, row: dict[str, Any]) -> bool:
        """``row`` is in flight but its last step is older than the run timeout."""
        at = row.get("attempt_at") or row.get("committed_at") or row.get("planned_at")
        return (row["status"] in IN_FLIGHT and bool(self.timeout_s) and at is not None
                and self.now - float(at) > self.timeout_s)  # fmt: skip

    def health(self) -> Health:
        committed = self.committed
        live = [r for r in committed if r.get("rewound_by") is None]  # retracted: not output
        failed = sum(1 for r in self.rows if r["status"] in FAILED)
        counts = (failed, sum(int(r.get("late") or 0) for r in live),
                  sum(int(r.get("dead") or 0) for r in live))  # fmt: skip
        age = max(0.0, self.now - float(committed[-1]["committed_at"])) if committed else None
        since = f"last commit {_age(age)} ago" if committed else "nothing committed yet"
        pending = self.pending
        if pending and pending[0]["status"] in FAILED:  # what happened last to the next epoch
            row = pending[0]
            tries = int(row.get("failed_attempts") or 0)
            text = f"epoch {row['epoch']} {row['status']}" + (
                f" ({tries} failed attempt{'s' if tries != 1 else ''})" if tries else ""
            )
            return Health("failing", f"{text}; {since}", age, *counts, error=row.get("error"))
        moving = self.in_flight
        doing = f"; {_doing(moving)}" if moving else ""
        if age is None:
            return Health("idle", f"no epoch committed yet{doing}", None, *counts)
        if self.lag == 0 and moving is None:  # nothing waiting: an old commit is not late
            return Health("caught up", f"no input waiting; {since}", age, *counts)
        if self.interval_s and age > BEHIND_INTERVALS * self.interval_s:
            text = f"{since} (interval {_age(self.interval_s)}){doing}"
            return Health("behind", text, age, *counts)
        return Health("ok", f"{since}{doing}", age, *counts)


def _doing(moving: dict[str, Any]) -> str:
    """What is in flight, in a few words: ``epoch 6 planned``, ``run manual__x requested``."""
    if moving["epoch"] is None:
        return f"run {moving['run_id']} requested"
    return f"epoch {moving['epoch']} {moving['status']}"


def pipeline_view(
    rt: Runtime,
    dag_id: str,
    *,
    now: float | None = None,
    cache: HistoryCache | None = None,
    spec_file: str = "",
    requested: RequestedRun | None = None,
) -> PipelineView:
    """Read a pipeline's history, savepoints and lag from its checkpoint store;
    ``requested``: a run the monitor triggered just now, in flight until the store shows it."""
    started = time.perf_counter()
    store = rt.repo.store.uri()
    rows = checkpoint_rows(
        rt,
        cached=(lambda e: cache.get(store, e)) if cache else None,
        keep=(lambda r: cache.put(store, r)) if cache else None,
    )
    by_source: dict[str, int | None] = {}
    try:
        lag = pending_units(rt)
        by_source = pending_by_source(rt)
    except Exception as exc:  # the source may be unreachable: the page still shows history
        lag = None
        extra = {"lag_error": f"{type(exc).__name__}: {exc}"}
    else:
        extra = {}
    released = released_line(rt)  # clean_source: what went to the archive (or was deleted)
    if released:
        extra["released"] = public_text(released, server_places(rt.spec))
    checkpoint = rt.spec.checkpoint
    refusal = rt.repo.last_refusal()
    if refusal is not None:  # written by plan, perhaps by a version that named the storage
        refusal = {**refusal, "message": public_text(refusal.get("message") or "",
                                                     server_places(rt.spec))}  # fmt: skip
    return PipelineView(
        name=rt.name,
        dag_id=dag_id,
        interval_s=(checkpoint.interval_us / 1e6) if checkpoint else 0.0,
        unit_name=rt.source.unit_name,
        rows=rows,
        savepoints=[s.to_dict() for s in rt.repo.savepoints()],
        lag=lag,
        now=time.time() if now is None else now,
        retained=checkpoint.retained if checkpoint else None,
        spec_file=spec_file,
        refusal=refusal,
        timeout_s=(checkpoint.timeout_us / 1e6) if checkpoint else 0.0,
        load_seconds=time.perf_counter() - started,
        extra=extra,
        lag_by_source=by_source,
        requested=requested,
    )
