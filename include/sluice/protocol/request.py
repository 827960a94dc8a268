"""Run requests: what a trigger (Airflow's form, the REST API, the CLI) asks of the next epoch.

A request is checked in two stages, both before anything is written:

1. :meth:`RunRequest.from_conf` — shape only (types, allowed values, which fields go together);
2. :meth:`RunRequest.resolve` — against the checkpoint store (does that checkpoint exist, do
   those offsets decode, would they re-read committed input).

Every problem is collected and reported at once in an :class:`InvalidRunRequest` that names
the pipeline and the field. ``restore_from`` is ``latest`` (the default: continue), ``checkpoint``
(continue from a given committed epoch) or ``offsets`` (start the next epoch at explicit source
offsets). Going back to an older checkpoint or offset re-emits committed output, so it needs the
retraction of issue #7 and is refused with that explanation until then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.protocol.exceptions import ProtocolError
from sluice.protocol.runtime import Runtime
from sluice.sources.base import Offset

__all__ = ["RESTORE_CHOICES", "InvalidRunRequest", "PlanOptions", "RunRequest"]

RESTORE_CHOICES = ("latest", "checkpoint", "offsets")
_FIELDS = {"max_records", "restore_from", "epoch", "offsets"}


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


@dataclass(frozen=True)
class RunRequest:
    max_records: int | None = None
    restore_from: str = "latest"
    epoch: int | None = None
    offsets: dict[str, Any] | None = None

    @classmethod
    def from_conf(cls, pipeline: str, conf: Mapping[str, Any] | None) -> RunRequest:
        """Check the shape of a trigger conf (unknown keys are ignored: Airflow adds its own)."""
        conf = {k: v for k, v in (conf or {}).items() if k in _FIELDS}
        problems: list[str] = []
        max_records = _positive_or_none(conf.get("max_records"), "max_records", problems)
        epoch = _positive_or_none(conf.get("epoch"), "epoch", problems)
        restore = conf.get("restore_from") or "latest"
        offsets = conf.get("offsets")
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
        if problems:
            raise InvalidRunRequest(pipeline, problems)
        return cls(max_records, restore, epoch, offsets)

    def resolve(self, rt: Runtime) -> PlanOptions:
        """Check the request against the checkpoint store (read-only) and turn it into plan
        options. Raises :class:`InvalidRunRequest`."""
        if self.restore_from == "checkpoint":
            self._check_checkpoint(rt)
        if self.restore_from == "offsets":
            start, restored = self._start_at_offsets(rt)
            return PlanOptions(self.max_records, start, restored)
        return PlanOptions(self.max_records)

    def _check_checkpoint(self, rt: Runtime) -> None:
        assert self.epoch is not None
        latest = rt.repo.latest_epoch()
        if rt.repo.checkpoint(self.epoch) is None:
            have = f"committed epochs are 1..{latest}" if latest else "nothing is committed yet"
            raise InvalidRunRequest(
                rt.name,
                [f"epoch: no committed checkpoint {self.epoch} in {rt.repo.store.uri()}; {have}"],
            )
        if self.epoch < latest:
            raise InvalidRunRequest(
                rt.name,
                [
                    f"epoch: restoring checkpoint {self.epoch} would replay epochs "
                    f"{self.epoch + 1}..{latest}, whose output is already committed; rewinding "
                    "with retraction of that output is not available yet (issue #7). Use "
                    f"restore_from=latest (= checkpoint {latest}) to continue."
                ],
            )

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
            problems.append(
                f"offsets: {start.describe()} is behind the committed offsets "
                f"{committed.describe()}; re-reading committed input would duplicate output, and "
                "rewinding is not available yet (issue #7)"
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


def _said(problems: list[str]) -> set[str]:
    return {p.split(":", 1)[0] for p in problems}
