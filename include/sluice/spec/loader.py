"""Read a YAML pipeline spec into a :class:`PipelineSpec`, reporting every problem at once.

Every error names the file, the field and the fix. One pydantic model validates a spec,
:class:`Pipeline`: the source, the sinks and the window are components, whose ``type``
chooses a config class in :mod:`sluice.spec.registry`; the other sections are the models and
checks of :mod:`sluice.spec.sections` and :mod:`sluice.spec.process`; the rules that span
several sections (:mod:`sluice.spec.rules`) are validators of the pipeline model. String
values may read the environment, ``${VAR}`` or ``${VAR:-default}`` (:mod:`sluice.spec.env`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, NoReturn, TypedDict, TypeVar, cast

import yaml
from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sluice.spec.components.base import NAME_RE, SinkConfig, SourceConfig, WindowConfig
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.spec.env import interpolate
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.model import (
    EMIT_MODES,
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    LookupSpec,
    PipelineSpec,
    ProcessSpec,
    RestartSpec,
)
from sluice.spec.problems import at, spec_problems
from sluice.spec.process import ProcessSection
from sluice.spec.registry import SINKS, SOURCES, WINDOWS
from sluice.spec.rules import (
    append_sinks,
    no_keys_when_stateless,
    not_with_process,
    on_update_sinks,
    paths_apart,
    side_sink_appends,
    sink_keys,
)
from sluice.spec.sections import (
    CheckpointSection,
    EventTimeSection,
    Execution,
    PipelineName,
    Predicate,
    Qos,
    RestartSection,
    S3Section,
    Section,
    aggregates,
    checked_text,
    key_by,
    lookups,
    output,
    select,
)
from sluice.storage.s3options import S3Options

__all__ = ["NAME_RE", "Pipeline", "load_spec", "parse_spec"]

# Any of these makes a pipeline stateful; without them it is stateless (docs/stateless.md).
_STATEFUL = frozenset({"window", "aggregates", "emit", "process"})
Operator = Literal["windows", "process", "stateless"]
_EMIT = checked_text(EMIT_MODES)
_STORAGE = checked_text()
_T = TypeVar("_T")
_S = TypeVar("_S", bound=Section)


class Context(TypedDict):
    """What validating a :class:`Pipeline` needs besides the document."""

    operator: Operator  # which operator the sections present choose
    keys: frozenset[str]  # the sections present
    origin: str  # where the spec was read (a process function is looked up next to it)
    # what a section with problems could still read, for the rules after it (the valid
    # aggregates, the keys named, a checkpoint storage): as many problems found as before
    partial: dict[str, object]
    schema: dict[str, str]  # the source's columns and their types (empty: no valid source)


def load_spec(path: str | Path) -> PipelineSpec:
    """Parse and validate the spec file at ``path``."""
    origin = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(origin, [SpecProblem("(file)", f"cannot read: {exc.strerror}")]) from exc
    try:
        data = _yaml(text)
    except yaml.YAMLError as exc:
        problem = SpecProblem("(yaml)", f"not valid YAML: {exc}", "check indentation and quoting")
        raise SpecError(origin, [problem]) from exc
    return parse_spec(data, origin=origin)


def _yaml(text: str) -> Any:
    """The YAML document: libyaml's parser when PyYAML has it (~15x faster: every DAG-file
    parse reads every spec), the pure-Python one for the error of a broken file (it names the
    offending character and points at it)."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.load(text, Loader=fast)  # a safe loader (no Python objects)
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def parse_spec(data: Any, *, origin: str = "<memory>") -> PipelineSpec:
    """Validate an already-parsed YAML document."""
    if data is None:
        fix = "start from include/pipelines/clicks_per_minute.yaml"
        raise SpecError(origin, [SpecProblem("(file)", "is empty", fix)])
    found: list[SpecProblem] = []
    top = interpolate(data, "", found)
    keys = frozenset(top) if isinstance(top, dict) else frozenset()
    operator: Operator = "stateless" if not _STATEFUL & keys else "windows"
    if "process" in keys:
        operator = "process"
    context = Context(operator=operator, keys=keys, origin=origin, partial={}, schema={})
    try:
        pipeline = Pipeline.model_validate(top, context=context)
    except ValidationError as exc:
        found += spec_problems(exc, "", Pipeline, unknown_first=True)
    if found:
        raise SpecError(origin, found)
    return pipeline.spec(origin)


def _context(info: ValidationInfo) -> Context:
    return cast(Context, info.context)  # what parse_spec passes


def _schema(info: ValidationInfo) -> dict[str, str]:
    """The source's columns and their types (empty: the source is invalid)."""
    return _context(info)["schema"]


def _columns(info: ValidationInfo) -> dict[str, str]:
    """The source's, the ``select`` (type ``derived``) and the lookups' columns, with their
    types."""
    derived: tuple[tuple[str, str], ...] = _read(info, "select", ())
    columns = {**_schema(info), **{n: "derived" for n, _ in derived}}
    for lookup in _read(info, "lookup", ()):
        columns.update(lookup.columns)
    return columns


def _read(info: ValidationInfo, field: str, default: Any = None) -> Any:
    """An earlier field's value: valid, else what could be read of it (else ``default``)."""
    if field in info.data:
        return info.data[field]
    return _context(info)["partial"].get(field, default)


def _done(info: ValidationInfo, value: _T, found: list[SpecProblem]) -> _T:
    """``value`` if nothing was ``found``, else the problems (the value kept for
    :func:`_read`)."""
    if not found:
        return value
    _context(info)["partial"][str(info.field_name)] = value
    raise at(found)


def _fail(found: list[SpecProblem]) -> NoReturn:
    raise at(found)


def _required(field: str, fix: str) -> NoReturn:
    _fail([SpecProblem(field, "is required", fix)])


def _section(model: type[_S], value: Any, field: str) -> _S:
    """``value`` validated as the section ``model``, else every problem."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        _fail(spec_problems(exc, field, model))


class Pipeline(Section):
    """A whole spec, validated: each field one section, in an order where what a section is
    checked against (the source schema, the operator's window or function, the name and
    checkpoint storage of the default side sinks) comes first.

    Pydantic runs a model's ``mode="after"`` validators only once every field is valid, and a
    spec with several problems reports them all: so each rule across sections is a field
    validator here, of the field it reports on, and sees the earlier sections that are valid
    (``info.data``), and of those with problems what could still be read (:func:`_read`), as
    the hand checker this replaces did. Validated with a :class:`Context` (:func:`parse_spec`)."""

    model_config = ConfigDict(validate_default=True, arbitrary_types_allowed=True)

    # Each field's default is what its validator reads as "not written" (validate_default):
    # a section that is required says so, one that is not gives its default value.
    name: PipelineName = Field(None, validate_default=True)
    description: object = None  # free text, never read
    source: SourceConfig | None = None
    event_time: EventTimeSpec | None = None
    select: tuple[tuple[str, str], ...] = Field(None, validate_default=True)
    lookup: tuple[LookupSpec, ...] = Field(None, validate_default=True)
    filter: Predicate = None
    key_by: tuple[str, ...] = Field(None, validate_default=True)
    process: ProcessSpec | None = None
    window: WindowConfig | None = None
    aggregates: tuple[AggregateSpec, ...] = Field(None, validate_default=True)
    emit: Literal["on_close", "on_update"] = "on_close"
    output: tuple[str, ...] = Field(None, validate_default=True)
    checkpoint: CheckpointSpec | None = None
    sinks: tuple[SinkConfig, ...] = Field(None, validate_default=True)
    late_records: SinkConfig | None = None
    dead_letters: SinkConfig | None = None  # the last location: where they are checked
    qos: Qos = 2
    s3: S3Options | None = None
    restart: RestartSpec = Field(None, validate_default=True)
    execution: Execution = None

    @field_validator("source", mode="plain")
    @classmethod
    def _source(cls, value: Any, info: ValidationInfo) -> SourceConfig:
        if value is None:
            _required("source", "add a files source (see README 'Spec')")
        source, problems = SOURCES.validate(value, "source")
        if source is None:
            _fail(problems)
        _context(info)["schema"] = dict(source.schema)
        return source

    @field_validator("event_time", mode="plain")
    @classmethod
    def _event_time(cls, value: Any, info: ValidationInfo) -> EventTimeSpec:
        """Its column is a timestamp column of the source."""
        if value is None:
            _required("event_time", "e.g. {column: ts, max_out_of_orderness: 5s}")
        found: list[SpecProblem] = []
        try:
            event_time = EventTimeSection.model_validate(value)
        except ValidationError as exc:
            found += spec_problems(exc, "event_time", EventTimeSection)
        column = value.get("column") if isinstance(value, dict) else None
        schema = _schema(info)
        named = isinstance(column, str) and column.strip() != ""  # else a problem of its own
        if named and schema and schema.get(str(column)) != "timestamp":
            found.append(
                SpecProblem(
                    "event_time.column",
                    f"{column!r} is not a timestamp column of the schema",
                    "name a schema column of type timestamp",
                )
            )
        if found:
            _fail(found)
        return event_time.spec()

    @field_validator("select", mode="plain")
    @classmethod
    def _select(cls, value: Any, info: ValidationInfo) -> tuple[tuple[str, str], ...]:
        """New columns, none named like a source column."""
        found: list[SpecProblem] = []
        return _done(info, select(value, _schema(info), found), found)

    @field_validator("lookup", mode="plain")
    @classmethod
    def _lookup(cls, value: Any, info: ValidationInfo) -> tuple[LookupSpec, ...]:
        """Lookup joins keyed on record columns, adding new ones (docs/joins.md)."""
        found: list[SpecProblem] = []
        columns = _columns(info) if _schema(info) else {}
        return _done(info, lookups(value, columns, found), found)

    @field_validator("key_by", mode="plain")
    @classmethod
    def _key_by(cls, value: Any, info: ValidationInfo) -> tuple[str, ...]:
        """Key columns, of the source or ``select``; none in a stateless pipeline."""
        found: list[SpecProblem] = []
        keys = key_by(value, _columns(info), found)
        if _context(info)["operator"] == "stateless":
            found += no_keys_when_stateless(keys)
        return _done(info, keys, found)

    @field_validator("process", mode="plain")
    @classmethod
    def _process(cls, value: Any, info: ValidationInfo) -> ProcessSpec | None:
        context = _context(info)
        if context["operator"] != "process":
            return None
        return _section(ProcessSection, value, "process").spec(context["origin"])

    @field_validator("window", mode="plain")
    @classmethod
    def _window(cls, value: Any, info: ValidationInfo) -> WindowConfig | None:
        """Required with aggregates or ``emit``; refused beside a process function."""
        operator = _operator(info, "window")
        if operator != "windows":
            return None
        if value is None:
            fix = "e.g. {type: tumbling, size: 1m}; or leave out aggregates and emit for a "
            _required("window", fix + "stateless pipeline (docs/stateless.md)")
        window, problems = WINDOWS.validate(value, "window")
        if window is None:
            _fail(problems)
        return window

    @field_validator("aggregates", mode="plain")
    @classmethod
    def _aggregates(cls, value: Any, info: ValidationInfo) -> tuple[AggregateSpec, ...]:
        """Of source or ``select`` columns (of fitting types)."""
        if _operator(info, "aggregates") != "windows":
            return ()
        found: list[SpecProblem] = []
        return _done(info, aggregates(value, _columns(info), found), found)

    @field_validator("emit", mode="plain")
    @classmethod
    def _emit(cls, value: Any, info: ValidationInfo) -> Literal["on_close", "on_update"]:
        if _operator(info, "emit") != "windows":
            return "on_close"
        emit: Literal["on_close", "on_update"] = _EMIT(value)
        return emit

    @field_validator("output", mode="plain")
    @classmethod
    def _output(cls, value: Any, info: ValidationInfo) -> tuple[str, ...]:
        """A stateless pipeline's columns written, among the source's and ``select``'s."""
        found: list[SpecProblem] = []
        columns = list(_columns(info)) if _schema(info) else []
        stateless = _context(info)["operator"] == "stateless"
        return _done(info, output(value, columns, stateless, found), found)

    @field_validator("checkpoint", mode="plain")
    @classmethod
    def _checkpoint(cls, value: Any, info: ValidationInfo) -> CheckpointSpec:
        if value is None:
            _required("checkpoint", "e.g. {storage: data/ckpt, interval: 1m}")
        try:
            return CheckpointSection.model_validate(value).spec()
        except ValidationError as exc:
            found = spec_problems(exc, "checkpoint", CheckpointSection)
        try:  # where the checkpoints go, if that much is right
            partial = CheckpointSpec(_STORAGE(value.get("storage")))
        except (AttributeError, PydanticCustomError):
            partial = None
        _context(info)["partial"]["checkpoint"] = partial
        _fail(found)

    @field_validator("sinks", mode="plain")
    @classmethod
    def _sinks(cls, value: Any, info: ValidationInfo) -> tuple[SinkConfig, ...]:
        """At least one, named apart; upserting only where rows are rewritten, keyed by the
        pipeline's keys and window, partitioned by result columns."""
        found: list[SpecProblem] = []
        sinks = _valid_sinks(value, found)
        data = info.data
        operator = _context(info)["operator"]
        if data.get("emit") == "on_update":
            found += on_update_sinks(sinks)
        window: WindowConfig | None = data.get("window")
        if window is not None:
            keys, computed = _read(info, "key_by", ()), _read(info, "aggregates", ())
            sinks, problems = sink_keys(sinks, keys, window, computed)
            found += problems
        process: ProcessSpec | None = data.get("process")
        if process is not None:
            columns = [c for c, _ in process.output]
            found += append_sinks(sinks, columns, "a process function's")
        if operator == "stateless" and _schema(info):
            columns = list(_read(info, "output") or _columns(info))
            found += append_sinks(sinks, columns, "a stateless pipeline's")
        return _done(info, sinks, found)

    @field_validator("late_records", "dead_letters", mode="plain")
    @classmethod
    def _side_sink(cls, value: Any, info: ValidationInfo) -> SinkConfig | None:
        """Late records and dead letters are appended; without a sink of their own they go
        next to the checkpoints (nothing is ever dropped). With the dead letters, every
        location is known: none may be in another's way
        (:func:`~sluice.spec.rules.paths_apart`)."""
        field = str(info.field_name)
        checkpoint: CheckpointSpec | None = _read(info, "checkpoint")
        name: str | None = info.data.get("name")
        sink: SinkConfig | None = None
        found: list[SpecProblem] = []
        if value is not None:  # its name is its role, whatever it says
            sink, found = SINKS.validate(value, field, extra={"name": field})
            found += side_sink_appends(sink) if sink is not None else []
        elif checkpoint is not None and name is not None:
            path = f"{checkpoint.storage.rstrip('/')}/{name}/{field}"
            sink = FilesSinkConfig(name=field, path=path, format="jsonl")
        if field == "dead_letters":
            sides = [s for s in (_read(info, "late_records"), sink) if s is not None]
            source, sinks = info.data.get("source"), _read(info, "sinks", ())
            found += paths_apart(source, sinks, sides, checkpoint, name)
        return _done(info, sink, found)

    @field_validator("s3", mode="plain")
    @classmethod
    def _s3(cls, value: Any) -> S3Options | None:
        if value is None:
            return None
        return _section(S3Section, value, "s3").spec()

    @field_validator("restart", mode="plain")
    @classmethod
    def _restart(cls, value: Any) -> RestartSpec:
        if value is None:
            return RestartSpec()
        return _section(RestartSection, value, "restart").spec()

    def spec(self, origin: str) -> PipelineSpec:
        """The spec the rest of Sluice reads (frozen dataclasses: cheap to read)."""
        assert self.source and self.event_time and self.checkpoint
        assert self.late_records and self.dead_letters
        return PipelineSpec(
            name=self.name,
            source=self.source,
            event_time=self.event_time,
            key_by=self.key_by,
            window=self.window,
            aggregates=self.aggregates,
            sinks=self.sinks,
            late_records=self.late_records,
            dead_letters=self.dead_letters,
            checkpoint=self.checkpoint,
            qos=self.qos,
            s3=self.s3,
            restart=self.restart,
            emit=self.emit,
            select=self.select,
            lookup=self.lookup,
            filter=self.filter,
            output=self.output,
            process=self.process,
            execution=self.execution,
            origin=origin,
        )


def _operator(info: ValidationInfo, key: str) -> Operator:
    """The pipeline's operator, for a section of the window operator's (``key``): one
    written beside a process function is refused (:func:`~sluice.spec.rules.not_with_process`)."""
    context = _context(info)
    if context["operator"] == "process" and key in context["keys"]:
        _fail([not_with_process(key)])
    return context["operator"]


def _valid_sinks(value: Any, found: list[SpecProblem]) -> tuple[SinkConfig, ...]:
    """The valid sinks of ``sinks:`` (what is wrong with the others appended to ``found``)."""
    if not isinstance(value, list) or not value:
        found.append(
            SpecProblem(
                "sinks",
                "must list at least one sink",
                "e.g. [{name: out, type: files, path: data/out, format: parquet}]",
            )
        )
        return ()
    valid = []
    for i, item in enumerate(value):
        sink, problems = SINKS.validate(item, f"sinks[{i}]")
        found += problems
        valid += [sink] if sink is not None else []
    names = [s.name for s in valid]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        found.append(
            SpecProblem("sinks", f"sink name {dup!r} is used twice", "give every sink its own name")
        )
    return tuple(valid)
