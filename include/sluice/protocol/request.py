"""Run requests: what a trigger (Airflow's form, the REST API, the CLI) asks of the next epoch.

A request is checked in two stages, both before anything is written:

1. :meth:`RunRequest.from_conf` — shape only (types, allowed values, which fields go together);
2. :meth:`RunRequest.resolve` — against the checkpoint store (does that checkpoint exist, do
   those offsets decode, would they re-read committed input): :mod:`sluice.protocol.resolve`.

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

This module is the one declaration of the fields; each surface derives its form from it where
it is used: Airflow's trigger form (:mod:`sluice.airflow.params`), ``sluice run``'s options
(:mod:`sluice.cli`) and the monitor's form inputs (:mod:`sluice.monitor.inputs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sluice.contracts.layout import SAVEPOINT_NAME
from sluice.protocol.exceptions import InvalidRunRequest
from sluice.protocol.resolve import PlanOptions, resolve_request

if TYPE_CHECKING:
    from sluice.protocol.runtime import Runtime

__all__ = [
    "LOOKUP_CHOICES",
    "MISSING_CHOICES",
    "RESTORE_CHOICES",
    "InvalidRunRequest",
    "PlanOptions",
    "RequestField",
    "RunRequest",
]

RestoreFrom = Literal["latest", "checkpoint", "savepoint", "offsets"]
OnMissing = Literal["fail", "earliest"]
LookupVersions = Literal["pinned", "current"]
RESTORE_CHOICES: tuple[str, ...] = get_args(RestoreFrom)
MISSING_CHOICES: tuple[str, ...] = get_args(OnMissing)
LOOKUP_CHOICES: tuple[str, ...] = get_args(LookupVersions)
_NAME_RULE = "1-100 letters, digits, '_', '.', '-', starting with a letter or digit"


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
    fields. The Airflow trigger form (:func:`sluice.airflow.params.airflow_params`), ``sluice
    run``'s options (:func:`sluice.cli.add_request_options`) and the monitor's form inputs
    (:func:`sluice.monitor.inputs.html_inputs`) are derived from it."""

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

    lookup_versions: LookupVersions = _field("pinned", RequestField(
        "Lookup table versions",
        "For a rewind of a pipeline with lookup joins (docs/joins.md): pinned: each replayed "
        "epoch joins the table versions the epoch it replays joined; current: the tables as "
        "they are now.",
        "{value} is not one of " + str(list(LOOKUP_CHOICES)),
        "--lookup-versions",
        "a rewind's lookup tables: pinned (default: the versions the replayed epochs "
        "joined) or current",
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

    @property
    def asks_anything(self) -> bool:
        """Anything but a plain "continue from the latest checkpoint" (``allow_state_drop``
        aside: it does not change where the next epoch starts)."""
        return self.model_copy(update={"allow_state_drop": False}) != RunRequest()

    def resolve(self, rt: Runtime) -> PlanOptions:
        """Check the request against the checkpoint store (read-only) and turn it into plan
        options (:mod:`sluice.protocol.resolve`). Raises :class:`InvalidRunRequest`."""
        return resolve_request(self, rt)


def _shape_problem(name: str, value: Any) -> str:
    info = RunRequest.fields()[name]
    return f"{name}: " + info.problem.format(value=repr(value), type=type(value).__name__)


# Which fields go together: each rule returns a problem or None. ``said``: the fields whose
# shape was already refused (no second problem about them).
Value = Callable[["RunRequest"], object]  # reads one field of a request


def _needs(
    field: str, value: Value, mode: str, what: str
) -> Callable[[RunRequest, set[str]], str | None]:
    def rule(request: RunRequest, said: set[str]) -> str | None:
        if request.restore_from == mode and value(request) is None and field not in said:
            return f"{field}: required with restore_from={mode}{what}"
        return None

    return rule


def _only_with(field: str, value: Value, mode: str) -> Callable[[RunRequest, set[str]], str | None]:
    def rule(request: RunRequest, said: set[str]) -> str | None:
        if request.restore_from != mode and value(request) is not None:
            return f"{field}: only used with restore_from={mode}, not {request.restore_from!r}"
        return None

    return rule


_RULES = (
    _needs("epoch", lambda r: r.epoch, "checkpoint", " (a committed epoch)"),
    _needs("offsets", lambda r: r.offsets, "offsets", ""),
    _only_with("epoch", lambda r: r.epoch, "checkpoint"),
    _only_with("offsets", lambda r: r.offsets, "offsets"),
    _needs("savepoint", lambda r: r.savepoint, "savepoint", " (a savepoint name)"),
    _only_with("savepoint", lambda r: r.savepoint, "savepoint"),
)
