"""What the monitor's actions offer, check and confirm before anything is triggered
(docs/monitor.md, "Actions").

Every check is the run request's own, run dry: :meth:`RunRequest.from_conf` (shape) and
:meth:`RunRequest.resolve` (against the checkpoint store; it reads and writes nothing), so the
monitor refuses exactly what the DAG's ``plan`` task would refuse, before a run exists.

* :func:`action_forms`: what the forms offer, from a page's :class:`PipelineView`: the
  restorable epochs and their range, the savepoints (a retracted one is listed, never
  offered) and the epoch a savepoint taken now would capture;
* :func:`check_savepoint`: a savepoint request, refused when the name is taken or there is
  nothing to capture;
* :func:`preview_restore`: what a restore retracts (epochs with their rows per sink, and the
  savepoints whose epoch goes), with a token of it: the restore is triggered only with the
  token of what the store says now, and with ``expect_latest`` so that ``plan`` refuses it if
  an epoch commits in between;
* :func:`preview_delete`: the savepoint a delete removes, with a token likewise.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.monitor.view import PipelineView
from sluice.protocol.exceptions import InvalidRunRequest
from sluice.protocol.request import RunRequest
from sluice.protocol.resolve import epoch_ranges
from sluice.words import noun

if TYPE_CHECKING:
    from sluice.contracts.records import Savepoint
    from sluice.protocol import Runtime

__all__ = [
    "ActionForms",
    "Capture",
    "Deletion",
    "Retraction",
    "SavepointChoice",
    "action_forms",
    "capture",
    "check_savepoint",
    "preview_delete",
    "preview_restore",
    "restore_conf",
]


@dataclass(frozen=True)
class Capture:
    """The epoch a savepoint taken now would point to: a run processes new input first."""

    epoch: int | None  # None: not known (the source could not be asked) or nothing to capture
    text: str
    possible: bool = True  # False: nothing is committed and there is no input


def capture(latest: int, next_planned: bool, lag: int | None, unit: str) -> Capture:
    """``latest``: the latest committed epoch (0: none); ``next_planned``: epoch latest+1 is
    planned and not committed (the next run finishes it); ``lag``: input waiting (None:
    unknown, the source could not be asked)."""
    after = latest + 1
    if next_planned:
        return Capture(after, f"epoch {after} (planned, not yet committed: the run finishes it)")
    if lag is None:
        text = f"epoch {after} if the source has new input" + (
            f", else epoch {latest}" if latest else ""
        )
        return Capture(None, text + " (the source could not be asked)")
    if lag > 0:
        return Capture(
            after, f"epoch {after} (the run first processes the {lag:,} new {noun(lag, unit)})"
        )
    if latest:
        return Capture(latest, f"epoch {latest}, the latest (no new input)")
    return Capture(None, "nothing: no epoch is committed and there is no input", possible=False)


@dataclass(frozen=True)
class SavepointChoice:
    name: str
    epoch: int
    created_at: float
    note: str = ""
    retracted_by: int | None = None  # the rewind that retracted its epoch's output


@dataclass(frozen=True)
class ActionForms:
    """What the action forms offer (see the module docstring)."""

    restorable: tuple[int, ...]  # newest first
    savepoints: tuple[SavepointChoice, ...]
    capture: Capture

    @property
    def epoch_min(self) -> int | None:
        return min(self.restorable, default=None)

    @property
    def epoch_max(self) -> int | None:
        return max(self.restorable, default=None)

    @property
    def restorable_text(self) -> str:
        """The restorable epochs as ranges, oldest first: ``1..2, 5..6``."""
        return epoch_ranges(sorted(self.restorable))

    @property
    def offered(self) -> tuple[SavepointChoice, ...]:
        """The savepoints a restore may name: not retracted, newest epoch first."""
        live = [s for s in self.savepoints if s.retracted_by is None]
        return tuple(sorted(live, key=lambda s: (-s.epoch, s.name)))


def action_forms(view: PipelineView) -> ActionForms:
    """The forms of ``view``'s page, from what the page read (no further reads)."""
    committed = view.committed
    retracted = {r["epoch"]: r["rewound_by"] for r in view.rows if r.get("rewound_by") is not None}
    restorable = tuple(r["epoch"] for r in reversed(committed) if r["epoch"] not in retracted)
    latest = committed[-1]["epoch"] if committed else 0
    planned = any(r["epoch"] > latest and r.get("committed_at") is None for r in view.rows)
    savepoints = tuple(
        SavepointChoice(
            s["name"], s["epoch"], s["created_at"], s.get("note") or "", retracted.get(s["epoch"])
        )
        for s in view.savepoints
    )
    return ActionForms(restorable, savepoints, capture(latest, planned, view.lag, view.unit_name))


# -- checks against the checkpoint store (read-only) -------------------------------------------


def check_savepoint(rt: Runtime, name: str) -> tuple[dict[str, Any], Capture]:
    """The conf that takes savepoint ``name``, and what it will capture. Raises
    :class:`InvalidRunRequest` (a bad or taken name; nothing to capture)."""
    from sluice.report import pending_units

    conf = {"take_savepoint": name}
    if not name:  # a conf says "not given" with an empty value; this form asks for a name
        problem = RunRequest.fields()["take_savepoint"].problem.format(value=repr(name))
        raise InvalidRunRequest(rt.name, [f"take_savepoint: {problem}"])
    RunRequest.from_conf(rt.name, conf).resolve(rt)
    latest = rt.repo.latest_epoch()
    try:
        lag: int | None = pending_units(rt)
    except Exception:  # an unreachable source: the run itself will say
        lag = None
    taken = capture(latest, rt.repo.plan(latest + 1) is not None, lag, rt.source.unit_name)
    if not taken.possible:
        raise InvalidRunRequest(rt.name, [f"take_savepoint: nothing to capture: {taken.text}"])
    return conf, taken


@dataclass(frozen=True)
class RetractedEpoch:
    epoch: int
    rows: tuple[int | None, ...]  # per sink, in Retraction.sinks order (None: wrote nothing)
    committed_at: float


@dataclass(frozen=True)
class Retraction:
    """What a restore does: from which epoch it continues and what its commit retracts."""

    pipeline: str
    what: str  # "checkpoint 2", "savepoint 'v1' (epoch 2)"
    target: int
    latest: int
    first: int  # the epoch that continues from ``target`` (a rewind's replay)
    sinks: tuple[str, ...]
    epochs: tuple[RetractedEpoch, ...]
    savepoints: tuple[str, ...]  # savepoints whose epoch is retracted: no longer restorable
    conf: dict[str, Any] = field(default_factory=dict)  # what the trigger sends

    @property
    def totals(self) -> tuple[int, ...]:
        return tuple(sum(e.rows[i] or 0 for e in self.epochs) for i in range(len(self.sinks)))

    @property
    def outcome(self) -> str:
        """One line: what the triggered run does."""
        if not self.epochs:
            return f"the next epoch continues from {self.what}, the latest; nothing is retracted"
        epochs = epoch_ranges([e.epoch for e in self.epochs])
        return f"epoch {self.first} continues from {self.what} and retracts epochs {epochs}"

    @property
    def token(self) -> str:
        """A digest of everything the confirmation page shows (and the conf)."""
        body = {
            "pipeline": self.pipeline, "target": self.target, "latest": self.latest,
            "first": self.first, "sinks": self.sinks, "savepoints": self.savepoints,
            "epochs": [(e.epoch, e.rows) for e in self.epochs], "conf": self.conf,
        }  # fmt: skip
        return _digest(body)


def restore_conf(kind: str, epoch: Any, savepoint: str | None) -> dict[str, Any]:
    """The trigger conf of the monitor's restore forms (``epoch`` as the form gave it: a
    value of the wrong shape is the run request's to refuse)."""
    if kind == "savepoint":
        return {"restore_from": "savepoint", "savepoint": savepoint}
    return {"restore_from": "checkpoint", "epoch": epoch}


def preview_restore(rt: Runtime, conf: dict[str, Any]) -> Retraction:
    """What restoring per ``conf`` retracts, checked as ``plan`` checks it (nothing written).
    Raises :class:`InvalidRunRequest`."""
    latest = rt.repo.latest_epoch()  # read first: a commit after it fails expect_latest
    request = RunRequest.from_conf(rt.name, conf)
    options = request.resolve(rt)
    if request.restore_from == "savepoint":
        found = rt.repo.savepoint(str(request.savepoint))
        assert found is not None  # resolve checked it
        target, what = found.epoch, f"savepoint {found.name!r} (epoch {found.epoch})"
    else:
        target, what = int(request.epoch or 0), f"checkpoint {request.epoch}"
    restored = options.restored_from
    rewound = restored.rewound if restored is not None else ()
    sinks = tuple(role.sink.name for role in rt.sinks)
    epochs = tuple(_retracted(rt, e, sinks) for e in rewound)
    lost = tuple(s.name for s in rt.repo.savepoints() if s.epoch in rewound)
    sent = {**conf, "expect_latest": latest} if latest else dict(conf)
    return Retraction(rt.name, what, target, latest, latest + 1, sinks, epochs, lost, sent)


def _retracted(rt: Runtime, epoch: int, sinks: tuple[str, ...]) -> RetractedEpoch:
    checkpoint = rt.repo.checkpoint(epoch)
    assert checkpoint is not None  # resolve lists committed epochs only
    rows: dict[str, int] = {}
    for prepared in checkpoint.result.prepared:
        rows[prepared.sink] = rows.get(prepared.sink, 0) + prepared.rows
    return RetractedEpoch(epoch, tuple(rows.get(s) for s in sinks), checkpoint.committed_at)


@dataclass(frozen=True)
class Deletion:
    savepoint: Savepoint
    retracted_by: int | None

    @property
    def token(self) -> str:
        return _digest(self.savepoint.to_dict())


def preview_delete(rt: Runtime, name: str) -> Deletion:
    """The savepoint ``name`` as stored now. Raises :class:`InvalidRunRequest`."""
    from sluice.contracts.layout import SAVEPOINT_NAME

    found = rt.repo.savepoint(name) if SAVEPOINT_NAME.match(name) else None
    if found is None:
        names = ", ".join(s.name for s in rt.repo.savepoints()) or "none"
        raise InvalidRunRequest(
            rt.name, [f"savepoint: no savepoint {name!r} (savepoints: {names})"]
        )
    return Deletion(found, rt.repo.rewound(since=found.epoch).get(found.epoch))


def _digest(body: Any) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
