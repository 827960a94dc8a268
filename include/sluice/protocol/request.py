"""Run requests: what a trigger (Airflow's form, the REST API, the CLI) asks of the next epoch.

A request is checked in two stages, both before anything is written:

1. :meth:`RunRequest.from_conf` — shape only (types, allowed values, which fields go together);
2. :meth:`RunRequest.resolve` — against the checkpoint store (does that checkpoint exist, do
   those offsets decode, would they re-read committed input).

Every problem is collected and reported at once in an :class:`InvalidRunRequest` that names
the pipeline and the field. ``restore_from`` is ``latest`` (the default: continue), ``checkpoint``
(continue from a given committed epoch), ``savepoint`` (continue from the checkpoint a named
savepoint points to) or ``offsets`` (start the next epoch at explicit source offsets, ahead of
the committed ones). A checkpoint or savepoint older than the latest makes the next epoch a
**rewind** (docs/rewind.md): it starts from that checkpoint's offsets, watermark and state,
and its commit retracts the output of the epochs after it from every sink. A rewind is
refused, before anything is written, when a sink cannot retract, when that epoch's output was
itself retracted by an earlier rewind, or when the source no longer has input the rewound
epochs read (``on_missing_offsets: earliest`` replays what is left and records the gap).
``take_savepoint`` names a savepoint to take of the checkpoint this run commits (or of the
latest one, when there is no new input).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.protocol.exceptions import ProtocolError
from sluice.protocol.layout import SAVEPOINT_NAME
from sluice.protocol.model import Plan
from sluice.protocol.runtime import Runtime
from sluice.sources.base import Offset

__all__ = ["MISSING_CHOICES", "RESTORE_CHOICES", "InvalidRunRequest", "PlanOptions", "RunRequest"]

RESTORE_CHOICES = ("latest", "checkpoint", "savepoint", "offsets")
_FIELDS = {
    "max_records",
    "restore_from",
    "epoch",
    "offsets",
    "savepoint",
    "take_savepoint",
    "allow_state_drop",
    "on_missing_offsets",
}
MISSING_CHOICES = ("fail", "earliest")


class InvalidRunRequest(ProtocolError):
    """A trigger's conf cannot be honoured; nothing was written."""

    def __init__(self, pipeline: str, problems: list[str]) -> None:
        self.pipeline = pipeline
        self.problems = problems
        listed = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"pipeline {pipeline!r}: the run request was rejected, nothing was written:\n{listed}"
        )


@dataclass(frozen=True)
class PlanOptions:
    """Keyword arguments for :func:`sluice.protocol.plan_epoch` derived from a request."""

    max_records: int | None = None
    start: Offset | None = None
    restored_from: dict[str, Any] | None = None
    allow_state_drop: bool = False
    rewind_to: int | None = None  # the next epoch starts from this older checkpoint
    on_missing_offsets: str = "fail"  # earliest: plan past input the source no longer has

    def plan(self, rt: Runtime, *, max_units: int | None = None) -> Plan | None:
        """:func:`sluice.protocol.plan_epoch` with these options."""
        from sluice.protocol.plan import plan_epoch

        return plan_epoch(
            rt,
            max_units=max_units,
            max_records=self.max_records,
            start=self.start,
            restored_from=self.restored_from,
            allow_state_drop=self.allow_state_drop,
            rewind_to=self.rewind_to,
            on_missing_offsets=self.on_missing_offsets,
        )


@dataclass(frozen=True)
class RunRequest:
    max_records: int | None = None
    restore_from: str = "latest"
    epoch: int | None = None
    offsets: dict[str, Any] | None = None
    savepoint: str | None = None
    take_savepoint: str | None = None
    allow_state_drop: bool = False
    on_missing_offsets: str = "fail"

    @classmethod
    def from_conf(cls, pipeline: str, conf: Mapping[str, Any] | None) -> RunRequest:
        """Check the shape of a trigger conf (unknown keys are ignored: Airflow adds its own)."""
        conf = {k: v for k, v in (conf or {}).items() if k in _FIELDS}
        problems: list[str] = []
        max_records = _positive_or_none(conf.get("max_records"), "max_records", problems)
        epoch = _positive_or_none(conf.get("epoch"), "epoch", problems)
        restore = conf.get("restore_from") or "latest"
        offsets = conf.get("offsets")
        savepoint = _name_or_none(conf.get("savepoint"), "savepoint", problems)
        take = _name_or_none(conf.get("take_savepoint"), "take_savepoint", problems)
        allow = conf.get("allow_state_drop")
        if allow not in (None, True, False):
            problems.append(f"allow_state_drop: expected true or false, got {allow!r}")
        missing = conf.get("on_missing_offsets") or "fail"
        if missing not in MISSING_CHOICES:
            problems.append(
                f"on_missing_offsets: {missing!r} is not one of {list(MISSING_CHOICES)}"
            )
        if restore not in RESTORE_CHOICES:
            problems.append(f"restore_from: {restore!r} is not one of {list(RESTORE_CHOICES)}")
        if offsets is not None and not isinstance(offsets, dict):
            problems.append(
                f'offsets: expected a JSON object such as {{"after_key": "part-0003.jsonl"}}, '
                f"got {type(offsets).__name__} {offsets!r}"
            )
            offsets = None
        if restore == "checkpoint" and epoch is None and "epoch" not in _said(problems):
            problems.append("epoch: required with restore_from=checkpoint (a committed epoch)")
        if restore == "offsets" and offsets is None and "offsets" not in _said(problems):
            problems.append("offsets: required with restore_from=offsets")
        if restore != "checkpoint" and epoch is not None:
            problems.append(f"epoch: only used with restore_from=checkpoint, not {restore!r}")
        if restore != "offsets" and offsets is not None:
            problems.append(f"offsets: only used with restore_from=offsets, not {restore!r}")
        if restore == "savepoint" and savepoint is None and "savepoint" not in _said(problems):
            problems.append("savepoint: required with restore_from=savepoint (a savepoint name)")
        if restore != "savepoint" and savepoint is not None:
            problems.append(f"savepoint: only used with restore_from=savepoint, not {restore!r}")
        if problems:
            raise InvalidRunRequest(pipeline, problems)
        return cls(max_records, restore, epoch, offsets, savepoint, take, allow is True, missing)

    def resolve(self, rt: Runtime) -> PlanOptions:
        """Check the request against the checkpoint store (read-only) and turn it into plan
        options. Raises :class:`InvalidRunRequest`."""
        options = self._resolve(rt)
        return dataclasses.replace(options, on_missing_offsets=self.on_missing_offsets)

    def _resolve(self, rt: Runtime) -> PlanOptions:
        if self.take_savepoint is not None and rt.repo.savepoint(self.take_savepoint):
            taken = rt.repo.savepoint(self.take_savepoint)
            raise InvalidRunRequest(
                rt.name,
                [
                    f"take_savepoint: {self.take_savepoint!r} already exists (epoch "
                    f"{taken.epoch if taken else '?'}); choose another name or delete it first "
                    "(sluice savepoint SPEC NAME --delete)"
                ],
            )
        if self.restore_from == "checkpoint":
            assert self.epoch is not None
            return self._restore(rt, self.epoch, f"checkpoint {self.epoch}")
        if self.restore_from == "savepoint":
            return self._restore_savepoint(rt)
        if self.restore_from == "offsets":
            start, restored = self._start_at_offsets(rt)
            return PlanOptions(self.max_records, start, restored, self.allow_state_drop)
        return PlanOptions(self.max_records, allow_state_drop=self.allow_state_drop)

    def _restore(
        self,
        rt: Runtime,
        epoch: int,
        what: str,
        field: str = "epoch",
        savepoint: str | None = None,
    ) -> PlanOptions:
        """Continue from committed ``epoch``: plainly when it is the latest, else a rewind."""
        latest = self._check_checkpoint(rt, epoch, field)
        plain = PlanOptions(self.max_records, allow_state_drop=self.allow_state_drop)
        if epoch == latest:
            return plain
        pending = rt.repo.plan(latest + 1)
        if pending is not None:
            if (pending.restored_from or {}).get("retract_after") == epoch:  # a retry
                return PlanOptions(
                    self.max_records, None, pending.restored_from, self.allow_state_drop, epoch
                )
            raise InvalidRunRequest(
                rt.name,
                [
                    f"{field}: epoch {latest + 1} is already planned and not committed; let it "
                    "commit (trigger with restore_from=latest) before rewinding"
                ],
            )
        dead = rt.repo.rewound(since=epoch)
        if epoch in dead:
            raise InvalidRunRequest(
                rt.name,
                [
                    f"{field}: the output of epoch {epoch} was retracted by the rewind that "
                    f"epoch {dead[epoch]} started; it is no longer part of the pipeline's "
                    "history (rewind to an epoch before it, or after it)"
                ],
            )
        live = [e for e in rt.repo.committed_epochs() if epoch < e <= latest and e not in dead]
        problems = [
            f"{field}: restoring {what} retracts the output of epochs {_ranges(live)}, but "
            f"{problem}"
            for role in rt.sinks
            if (problem := role.sink.retraction_problem(epoch)) is not None
        ]
        missing = self._missing_input(rt, live)
        if missing and self.on_missing_offsets == "fail":
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            shown = ", ".join(missing[:5]) + more
            problems.append(
                f"on_missing_offsets: source {rt.source.location} no longer has input that "
                f"epochs {_ranges(live)} read ({shown}); replaying without it would change "
                "the output silently. Put it back, or set on_missing_offsets=earliest to "
                "replay what is still there (the gap is recorded in the plan)"
            )
        if problems:
            raise InvalidRunRequest(rt.name, problems)
        restored: dict[str, Any] = {
            "kind": "savepoint" if savepoint else "checkpoint",
            "epoch": epoch,
            "retract_after": epoch,
            "rewound": live,
        }
        if savepoint:
            restored["savepoint"] = savepoint
        if missing:
            restored["missing_input"] = missing
        return PlanOptions(self.max_records, None, restored, self.allow_state_drop, epoch)

    @staticmethod
    def _missing_input(rt: Runtime, epochs: list[int]) -> list[str]:
        missing: list[str] = []
        for epoch in epochs:
            plan = rt.repo.plan(epoch)
            if plan is not None:
                missing += rt.source.missing_units(rt.source.decode_range(plan.source_range))
        return missing

    def _check_checkpoint(self, rt: Runtime, epoch: int, field: str = "epoch") -> int:
        """The latest epoch; raises unless ``epoch`` is a retained committed checkpoint."""
        latest = rt.repo.latest_epoch()
        if rt.repo.is_retired(epoch) or rt.repo.checkpoint(epoch) is None:
            kept = rt.repo.committed_epochs()
            have = (
                f"retained committed epochs are {_ranges(kept)}"
                if kept
                else "nothing is committed yet"
            )
            raise InvalidRunRequest(
                rt.name,
                [f"{field}: no committed checkpoint {epoch} in {rt.repo.store.uri()}; {have}"],
            )
        return latest

    def _restore_savepoint(self, rt: Runtime) -> PlanOptions:
        assert self.savepoint is not None
        found = rt.repo.savepoint(self.savepoint)
        if found is None:
            names = ", ".join(s.name for s in rt.repo.savepoints()) or "none"
            raise InvalidRunRequest(
                rt.name, [f"savepoint: no savepoint {self.savepoint!r} (savepoints: {names})"]
            )
        what = f"savepoint {found.name!r} (epoch {found.epoch})"
        return self._restore(rt, found.epoch, what, "savepoint", found.name)

    def _start_at_offsets(self, rt: Runtime) -> tuple[Offset, dict[str, Any]]:
        assert self.offsets is not None
        try:
            start = rt.source.offset_from_user(self.offsets)
        except (ValueError, TypeError) as exc:
            raise InvalidRunRequest(rt.name, [f"offsets: {exc}"]) from exc
        latest = rt.repo.latest_checkpoint()
        committed = rt.source.decode_offset(latest.end_offset) if latest else None
        pending = rt.repo.plan((latest.epoch if latest else 0) + 1)
        problems = []
        if pending is not None:
            problems.append(
                f"offsets: epoch {pending.epoch} is already planned and not committed; let it "
                "commit (trigger with restore_from=latest) before moving the start"
            )
        if committed is not None and rt.source.is_before(start, committed):
            at = [
                e
                for e in rt.repo.committed_epochs()
                if (c := rt.repo.checkpoint(e)) is not None
                and not rt.source.is_before(start, rt.source.decode_offset(c.end_offset))
                and not rt.source.is_before(rt.source.decode_offset(c.end_offset), start)
            ]
            hint = (
                f"restore_from=checkpoint with epoch={at[-1]}, which ends at these offsets"
                if at
                else "restore_from=checkpoint with the epoch to go back to"
            )
            problems.append(
                f"offsets: {start.describe()} is behind the committed offsets "
                f"{committed.describe()}; re-reading committed input on top of the committed "
                f"state and output would count it twice. To replay it, rewind instead ({hint}): "
                "that restores the state of that point and retracts the output after it"
            )
        if problems:
            raise InvalidRunRequest(rt.name, problems)
        restored = {"kind": "offsets", "requested": dict(self.offsets)}
        if committed is not None:
            restored["skipped_from"] = committed.to_dict()
        return start, restored


def _positive_or_none(value: Any, field: str, problems: list[str]) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{field}: {value!r} is not a whole number >= 1")
        return None
    return value


def _name_or_none(value: Any, field: str, problems: list[str]) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not SAVEPOINT_NAME.match(value):
        problems.append(
            f"{field}: {value!r} is not a savepoint name (1-100 letters, digits, '_', '.', "
            "'-', starting with a letter or digit)"
        )
        return None
    return value


def _ranges(epochs: list[int]) -> str:
    """[1, 2, 3, 7] -> '1..3, 7'."""
    parts: list[str] = []
    for e in epochs:
        if parts and parts[-1].split("..")[-1] == str(e - 1):
            parts[-1] = f"{parts[-1].split('..')[0]}..{e}"
        else:
            parts.append(str(e))
    return ", ".join(parts)


def _said(problems: list[str]) -> set[str]:
    return {p.split(":", 1)[0] for p in problems}
