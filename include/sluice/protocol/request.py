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
latest one, when there is no new input). ``expect_latest`` refuses the request unless the
latest committed epoch is still the one given (the monitor's rewind confirmation sends it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.contracts.layout import SAVEPOINT_NAME
from sluice.contracts.records import Plan, Restore
from sluice.contracts.sources import Offset
from sluice.protocol.exceptions import InvalidRunRequest
from sluice.protocol.runtime import Runtime

__all__ = [
    "MISSING_CHOICES",
    "RESTORE_CHOICES",
    "InvalidRunRequest",
    "PlanOptions",
    "RequestField",
    "RunRequest",
    "epoch_ranges",
]

RestoreFrom = Literal["latest", "checkpoint", "savepoint", "offsets"]
OnMissing = Literal["fail", "earliest"]
RESTORE_CHOICES: tuple[str, ...] = get_args(RestoreFrom)
MISSING_CHOICES: tuple[str, ...] = get_args(OnMissing)
_NAME_RULE = "1-100 letters, digits, '_', '.', '-', starting with a letter or digit"


@dataclass(frozen=True)
class PlanOptions:
    """Keyword arguments for :func:`sluice.protocol.plan_epoch` derived from a request."""

    max_records: int | None = None
    start: Offset | None = None
    restored_from: Restore | None = None
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
class RequestField:
    """What the trigger form, the CLI and the monitor show of one run-request field.

    ``problem`` says what is wrong with a value of the wrong shape (the value's repr is
    put in for ``{value}``); ``cli`` is the ``sluice run`` option (None: not offered there:
    ``sluice run`` caps epochs with ``--max-files`` and takes savepoints with ``sluice
    savepoint``)."""

    title: str
    description: str
    problem: str
    cli: str | None = None
    cli_help: str = ""


def _field(default: Any, info: RequestField, **rules: Any) -> Any:
    return Field(default, title=info.title, description=info.description,
                 json_schema_extra={"sluice": dataclasses.asdict(info)}, **rules)  # fmt: skip


_WHOLE = "{value} is not a whole number >= 1"
_SAVEPOINT = "{value} is not a savepoint name (" + _NAME_RULE + ")"


class RunRequest(BaseModel):
    """What one trigger asks of the next epoch: the one declaration of the run-request
    fields. The Airflow trigger form (:meth:`airflow_params`), ``sluice run``'s options
    (:meth:`add_arguments`) and the monitor's forms are derived from it."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, regex_engine="python-re")

    max_records: int | None = _field(None, RequestField(
        "Max records",
        "Cap on the records this epoch reads (whole files; at least one). Empty: the "
        "spec's per-epoch limit.",
        _WHOLE,
    ), ge=1)  # fmt: skip
    restore_from: RestoreFrom = _field("latest", RequestField(
        "Restore from",
        "latest: continue. checkpoint: continue from the committed epoch below; savepoint: "
        "from the checkpoint the savepoint below points to. An older epoch rewinds: the next "
        "epoch replays from there and its commit retracts the output of the epochs after it "
        "from every sink. offsets: start the next epoch at the source offsets below, skipping "
        "input in between.",
        "{value} is not one of " + str(list(RESTORE_CHOICES)),
        "--restore-from",
        "where the first epoch starts; an older checkpoint or savepoint rewinds "
        "(docs/rewind.md)",
    ))  # fmt: skip
    epoch: int | None = _field(None, RequestField(
        "Checkpoint epoch",
        "With restore_from=checkpoint: the committed epoch to continue from.",
        _WHOLE,
        "--epoch",
        "with --restore-from checkpoint",
    ), ge=1)  # fmt: skip
    offsets: dict[str, Any] | None = _field(None, RequestField(
        "Source offsets (JSON)",
        'With restore_from=offsets, e.g. {"after_key": "part-0003.jsonl"} for a files '
        "source: start after that file.",
        'expected a JSON object such as {{"after_key": "part-0003.jsonl"}}, got {type} {value}',
        "--offsets",
        'with --restore-from offsets: JSON, {"after_key": K}',
    ))  # fmt: skip
    savepoint: str | None = _field(None, RequestField(
        "Savepoint to restore",
        "With restore_from=savepoint: its name (the monitor lists them, so does sluice "
        "savepoints SPEC).",
        _SAVEPOINT,
        "--savepoint",
        "with --restore-from savepoint",
    ), pattern=SAVEPOINT_NAME.pattern)  # fmt: skip
    take_savepoint: str | None = _field(None, RequestField(
        "Take a savepoint",
        "A new savepoint name: this run's checkpoint (or the latest one, when there is no new "
        "input) is kept under it and never expired by retention.",
        _SAVEPOINT,
    ), pattern=SAVEPOINT_NAME.pattern)  # fmt: skip
    allow_state_drop: bool = _field(False, RequestField(
        "Allow dropping state",
        "Continue although the spec changed in a way that drops stored state (a key, window "
        "or aggregate changed or removed, or the pipeline made stateless; plan's error lists "
        "each). Added aggregates and states, and any change of a stateless pipeline, never "
        "need it.",
        "expected true or false, got {value}",
        "--allow-state-drop",
        "continue under a spec change that drops stored state (the error lists it)",
    ))  # fmt: skip
    expect_latest: int | None = _field(None, RequestField(
        "Expected latest epoch",
        "Optional: refuse the request unless the latest committed epoch is still this one. "
        "The monitor's rewind confirmation sends it, so a rewind never retracts an epoch that "
        "committed after someone confirmed what it retracts.",
        _WHOLE,
    ), ge=1)  # fmt: skip
    on_missing_offsets: OnMissing = _field("fail", RequestField(
        "When input is gone",
        "fail: refuse a rewind, or a plan, whose input the source no longer has (e.g. Kafka "
        "retention; the error names it). earliest: go on with what is still there; the gap "
        "is recorded in the plan.",
        "{value} is not one of " + str(list(MISSING_CHOICES)),
        "--on-missing-offsets",
        "input gone from the source (a rewind's, or Kafka offsets past retention): fail "
        "(default) or go on with what is left",
    ))  # fmt: skip

    @classmethod
    def fields(cls) -> dict[str, RequestField]:
        """Each field's form/CLI description, in declaration order."""
        return {
            name: RequestField(**info.json_schema_extra["sluice"])  # type: ignore[arg-type,index]
            for name, info in cls.model_fields.items()
        }

    @classmethod
    def from_conf(cls, pipeline: str, conf: Mapping[str, Any] | None) -> RunRequest:
        """Check the shape of a trigger conf (unknown keys are ignored: Airflow adds its own;
        an empty string or null is "not given"). Every problem is reported at once."""
        given = {k: v for k, v in (conf or {}).items() if k in cls.model_fields}
        given = {k: v for k, v in given.items() if v is not None and v != ""}
        if given.get("allow_state_drop") is False:
            del given["allow_state_drop"]
        problems: list[str] = []
        try:
            request = cls.model_validate(given)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            problems += [
                _shape_problem(name, given[name]) for name in cls.model_fields if name in bad
            ]
            request = cls.model_construct(**{k: v for k, v in given.items() if k not in bad})
            if "restore_from" in bad:  # the rules below still say what goes with it
                request = request.model_copy(update={"restore_from": given["restore_from"]})
        said = {p.split(":", 1)[0] for p in problems}
        problems += [p for rule in _RULES if (p := rule(request, said)) is not None]
        if problems:
            raise InvalidRunRequest(pipeline, problems)
        return request

    # -- what is derived from the fields -------------------------------------------------

    @classmethod
    def airflow_params(cls) -> dict[str, dict[str, Any]]:
        """The trigger form: for each field, the keyword arguments of an Airflow ``Param``
        (JSON-schema ``type``, ``enum``, ``minimum``, ``title``, ``description``). Defaults
        make a scheduled run: continue from the latest checkpoint."""
        params: dict[str, dict[str, Any]] = {}
        properties = cls.model_json_schema()["properties"]
        for name, info in cls.model_fields.items():
            schema = properties[name]
            options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
            kind = options[0].get("type", "string")
            form: dict[str, Any] = {
                "default": info.default,
                "type": ["null", kind] if info.default is None else kind,
                "title": info.title,
                "description": info.description,
            }
            if "enum" in options[0]:
                form["enum"] = list(options[0]["enum"])
            if "minimum" in options[0]:
                form["minimum"] = options[0]["minimum"]
            params[name] = form
        return params

    @classmethod
    def html_inputs(cls) -> dict[str, dict[str, str]]:
        """The monitor's form inputs: each field's label, help text, and what a browser checks
        before sending: ``pattern`` (names; the model's own, unanchored: HTML anchors it) and
        ``min`` (whole numbers)."""
        inputs: dict[str, dict[str, str]] = {}
        for name, info in cls.model_fields.items():
            form = {"label": str(info.title), "help": str(info.description)}
            low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
            if low is not None:
                form["min"] = str(low)
            pattern = next((m.pattern for m in info.metadata if hasattr(m, "pattern")), None)
            if isinstance(pattern, str):
                form["pattern"] = (
                    pattern.removeprefix("^").removesuffix("\\Z").replace("-]", "\\-]")
                )
            inputs[name] = form
        return inputs

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """``sluice run``'s options for the fields it offers."""
        for name, field in cls.fields().items():
            if field.cli is None:
                continue
            if cls.model_fields[name].annotation is bool:
                parser.add_argument(field.cli, dest=name, action="store_true", help=field.cli_help)
                continue
            choices = _choices(cls.model_fields[name].annotation)
            kind: Callable[[str], Any] = int if name == "epoch" else str
            parser.add_argument(field.cli, dest=name, type=kind, choices=choices,
                                default=None, help=field.cli_help)  # fmt: skip

    @classmethod
    def conf_from_args(cls, pipeline: str, args: argparse.Namespace) -> dict[str, Any]:
        """The conf ``sluice run``'s options make (``--offsets`` is parsed as JSON)."""
        conf = {name: getattr(args, name, None) for name, f in cls.fields().items() if f.cli}
        if isinstance(text := conf.get("offsets"), str):
            try:
                conf["offsets"] = json.loads(text)
            except ValueError as exc:
                raise InvalidRunRequest(pipeline, [f"--offsets: not JSON ({exc})"]) from exc
        return conf

    @property
    def asks_anything(self) -> bool:
        """Anything but a plain "continue from the latest checkpoint" (``allow_state_drop``
        aside: it does not change where the next epoch starts)."""
        return self.model_copy(update={"allow_state_drop": False}) != RunRequest()

    def resolve(self, rt: Runtime) -> PlanOptions:
        """Check the request against the checkpoint store (read-only) and turn it into plan
        options. Raises :class:`InvalidRunRequest`."""
        options = self._resolve(rt)
        return dataclasses.replace(options, on_missing_offsets=self.on_missing_offsets)

    def _resolve(self, rt: Runtime) -> PlanOptions:
        if self.expect_latest is not None and rt.repo.latest_epoch() != self.expect_latest:
            raise InvalidRunRequest(
                rt.name,
                [
                    f"expect_latest: the latest committed epoch is now {rt.repo.latest_epoch()}, "
                    f"not {self.expect_latest}: epochs committed (or were retired) after this "
                    "request was made, so it would not do what was confirmed; look again and "
                    "confirm anew"
                ],
            )
        if self.take_savepoint is not None and rt.repo.savepoint(self.take_savepoint):
            taken = rt.repo.savepoint(self.take_savepoint)
            raise InvalidRunRequest(
                rt.name,
                [
                    f"take_savepoint: {self.take_savepoint!r} already exists (epoch "
                    f"{taken.epoch if taken else '?'}); choose another name or delete it first "
                    "(the monitor's delete button, or sluice savepoint SPEC NAME --delete)"
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
            if pending.retract_after == epoch:  # a retry
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
            f"{field}: restoring {what} retracts the output of epochs {epoch_ranges(live)}, but "
            f"{problem}"
            for role in rt.sinks
            if (problem := role.sink.retraction_problem(epoch)) is not None
        ]
        missing = self._missing_input(rt, live)
        if missing and self.on_missing_offsets == "fail":
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            shown = ", ".join(missing[:5]) + more
            problems.append(
                f"on_missing_offsets: the source no longer has input that epochs "
                f"{epoch_ranges(live)} read ({shown}); replaying without it would change "
                "the output silently. Put it back, or set on_missing_offsets=earliest to "
                "replay what is still there (the gap is recorded in the plan)"
            )
        if problems:
            raise InvalidRunRequest(rt.name, problems)
        restored = Restore(
            "savepoint" if savepoint else "checkpoint",
            epoch,
            retract_after=epoch,
            rewound=tuple(live),
            savepoint=savepoint,
            missing_input=tuple(missing),
        )
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
            raise InvalidRunRequest(
                rt.name,
                [f"{field}: no committed checkpoint {epoch}; " + _restorable(rt)],
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

    def _start_at_offsets(self, rt: Runtime) -> tuple[Offset, Restore]:
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
        skipped = committed.to_dict() if committed is not None else None
        return start, Restore("offsets", requested=dict(self.offsets), skipped_from=skipped)


def _restorable(rt: Runtime) -> str:
    """Which committed epochs a run can restore: the retained ones, less those a rewind
    retracted (named apart, so "1..6" never hides two that would be refused)."""
    kept = rt.repo.committed_epochs()
    if not kept:
        return "nothing is committed yet"
    dead = rt.repo.rewound()
    live = [e for e in kept if e not in dead]
    text = f"restorable committed epochs are {epoch_ranges(live)}"
    gone = [e for e in kept if e in dead]
    if gone:
        text += f" ({epoch_ranges(gone)} retracted by a rewind: not restorable)"
    return text


def epoch_ranges(epochs: list[int]) -> str:
    """[1, 2, 3, 7] -> '1..3, 7'."""
    parts: list[str] = []
    for e in epochs:
        if parts and parts[-1].split("..")[-1] == str(e - 1):
            parts[-1] = f"{parts[-1].split('..')[0]}..{e}"
        else:
            parts.append(str(e))
    return ", ".join(parts)


def _shape_problem(name: str, value: Any) -> str:
    info = RunRequest.fields()[name]
    return f"{name}: " + info.problem.format(value=repr(value), type=type(value).__name__)


def _choices(annotation: Any) -> tuple[str, ...] | None:
    args = get_args(annotation)
    return args if args and all(isinstance(a, str) for a in args) else None


# Which fields go together: each rule returns a problem or None. ``said``: the fields whose
# shape was already refused (no second problem about them).
def _needs(field: str, mode: str, what: str) -> Callable[[RunRequest, set[str]], str | None]:
    def rule(request: RunRequest, said: set[str]) -> str | None:
        if request.restore_from == mode and getattr(request, field) is None and field not in said:
            return f"{field}: required with restore_from={mode}{what}"
        return None

    return rule


def _only_with(field: str, mode: str) -> Callable[[RunRequest, set[str]], str | None]:
    def rule(request: RunRequest, said: set[str]) -> str | None:
        if request.restore_from != mode and getattr(request, field) is not None:
            return f"{field}: only used with restore_from={mode}, not {request.restore_from!r}"
        return None

    return rule


_RULES = (
    _needs("epoch", "checkpoint", " (a committed epoch)"),
    _needs("offsets", "offsets", ""),
    _only_with("epoch", "checkpoint"),
    _only_with("offsets", "offsets"),
    _needs("savepoint", "savepoint", " (a savepoint name)"),
    _only_with("savepoint", "savepoint"),
)
