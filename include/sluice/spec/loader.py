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
from sluice.spec.join_sections import (
    JoinSection,
    join_output,
    join_sources,
    side_event_times,
    side_filters,
)
from sluice.spec.model import (
    EMIT_MODES,
    JOIN_TYPES,
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    JoinSide,
    JoinSpec,
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
    join_required,
    join_sides,
    no_keys_when_stateless,
    not_in_join,
    not_with_process,
    on_update_sinks,
    paths_apart,
    side_sink_appends,
    sink_keys,
    sources_without_join,
)
from sluice.spec.sections import (
    CheckpointSection,
    Execution,
    PipelineName,
    Qos,
    RestartSection,
    S3Section,
    Section,
    aggregates,
    checked_text,
    event_time,
    key_by,
    lookups,
    output,
    predicate,
    select,
)
from sluice.storage.s3options import S3Options

__all__ = ["NAME_RE", "Pipeline", "load_spec", "parse_spec"]

# Any of these makes a pipeline stateful; without them it is stateless (docs/stateless.md).
_STATEFUL = frozenset({"window", "aggregates", "emit", "process"})
Operator = Literal["windows", "process", "stateless", "join"]
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
    # a join pipeline's sources by name, each one's columns and their types (empty: that
    # source is not valid)
    sources: dict[str, dict[str, str]]


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
    if _FAST_LOADER is not None:
        try:
            return yaml.load(text, Loader=_FAST_LOADER)  # a safe loader (no Python objects)
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=_SAFE_LOADER)


def _keys_as_text(loader: type[Any]) -> type[Any]:
    """``loader``, reading every mapping key that YAML 1.1 would make a boolean as its text:
    ``on: {id: seller}`` (a join's or a lookup's ``on``) is ``{"on": ...}``, not ``{True: ...}``.
    No spec section has a boolean key; values are read as before (``header: yes`` is true)."""

    class KeysAsText(loader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
            self.flatten_mapping(node)  # merged keys (``<<: *base``) too
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag == "tag:yaml.org,2002:bool":
                    key.tag = "tag:yaml.org,2002:str"
            return super().construct_mapping(node, deep)

    return KeysAsText


_FAST_LOADER = _keys_as_text(yaml.CSafeLoader) if hasattr(yaml, "CSafeLoader") else None
_SAFE_LOADER = _keys_as_text(yaml.SafeLoader)


def parse_spec(data: Any, *, origin: str = "<memory>") -> PipelineSpec:
    """Validate an already-parsed YAML document."""
    if data is None:
        fix = "start from include/pipelines/clicks_per_minute.yaml"
        raise SpecError(origin, [SpecProblem("(file)", "is empty", fix)])
    found: list[SpecProblem] = []
    top = interpolate(data, "", found)
    keys = frozenset(top) if isinstance(top, dict) else frozenset()
    context = Context(
        operator=_operator_of(keys), keys=keys, origin=origin, partial={}, schema={}, sources={}
    )
    try:
        pipeline = Pipeline.model_validate(top, context=context)
    except ValidationError as exc:
        found += spec_problems(exc, "", Pipeline, unknown_first=True)
    if found:
        raise SpecError(origin, found)
    return pipeline.spec(origin)


def _operator_of(keys: frozenset[str]) -> Operator:
    """The operator the sections written choose: ``join:`` (or ``sources:`` without
    ``source:``) a join, ``process:`` a process function, a window's sections windows."""
    if "join" in keys or ("sources" in keys and "source" not in keys):
        return "join"
    if "process" in keys:
        return "process"
    return "windows" if _STATEFUL & keys else "stateless"


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
    # A join pipeline (docs/joins.md) reads ``sources`` instead of ``source``; its
    # ``event_time`` and ``filter`` are mappings by source, its ``output`` maps each result
    # column to an expression; the single-source operators' sections are refused.
    name: PipelineName = Field(None, validate_default=True)
    description: object = None  # free text, never read
    source: SourceConfig | None = None
    sources: dict[str, SourceConfig] = Field(None, validate_default=True)
    event_time: EventTimeSpec | dict[str, EventTimeSpec] | None = None
    select: tuple[tuple[str, str], ...] = Field(None, validate_default=True)
    lookup: tuple[LookupSpec, ...] = Field(None, validate_default=True)
    filter: str | dict[str, str] | None = None
    key_by: tuple[str, ...] = Field(None, validate_default=True)
    process: ProcessSpec | None = None
    window: WindowConfig | None = None
    aggregates: tuple[AggregateSpec, ...] = Field(None, validate_default=True)
    emit: Literal["on_close", "on_update"] = "on_close"
    join: JoinSection | None = None
    output: tuple[str, ...] | dict[str, str] = Field(None, validate_default=True)
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
    def _source(cls, value: Any, info: ValidationInfo) -> SourceConfig | None:
        if _join_refuses(info, "source"):
            return None
        if value is None:
            _required("source", "add a files source (see README 'Spec')")
        source, problems = SOURCES.validate(value, "source")
        if source is None:
            _fail(problems)
        _context(info)["schema"] = dict(source.schema)
        return source

    @field_validator("sources", mode="plain")
    @classmethod
    def _sources(cls, value: Any, info: ValidationInfo) -> dict[str, SourceConfig]:
        """A join's two sources, by name, each validated as ``source:`` is."""
        context = _context(info)
        if context["operator"] != "join":
            if value is not None:
                _fail([sources_without_join()])
            return {}
        if value is None:
            fix = "a join's two sources by name, e.g. {persons: {...}, auctions: {...}}"
            _required("sources", fix + " (docs/joins.md)")
        found: list[SpecProblem] = []
        sources = join_sources(value, found)
        context["sources"] = {n: dict(s.schema) if s else {} for n, s in sources.items()}
        valid = {n: s for n, s in sources.items() if s is not None}
        return _done(info, valid, found)

    @field_validator("event_time", mode="plain")
    @classmethod
    def _event_time(
        cls, value: Any, info: ValidationInfo
    ) -> EventTimeSpec | dict[str, EventTimeSpec]:
        """Its column is a timestamp column of the source; a join's: each source's, by name."""
        found: list[SpecProblem] = []
        context = _context(info)
        if context["operator"] == "join":
            return _done(info, side_event_times(value, context["sources"], found), found)
        if value is None:
            _required("event_time", "e.g. {column: ts, max_out_of_orderness: 5s}")
        spec = event_time(value, "event_time", _schema(info), found)
        if spec is None or found:
            _fail(found)
        return spec

    @field_validator("select", mode="plain")
    @classmethod
    def _select(cls, value: Any, info: ValidationInfo) -> tuple[tuple[str, str], ...]:
        """New columns, none named like a source column."""
        if _join_refuses(info, "select"):
            return ()
        found: list[SpecProblem] = []
        return _done(info, select(value, _schema(info), found), found)

    @field_validator("lookup", mode="plain")
    @classmethod
    def _lookup(cls, value: Any, info: ValidationInfo) -> tuple[LookupSpec, ...]:
        """Lookup joins keyed on record columns, adding new ones (docs/joins.md)."""
        if _join_refuses(info, "lookup"):
            return ()
        found: list[SpecProblem] = []
        columns = _columns(info) if _schema(info) else {}
        return _done(info, lookups(value, columns, found), found)

    @field_validator("filter", mode="plain")
    @classmethod
    def _filter(cls, value: Any, info: ValidationInfo) -> str | dict[str, str] | None:
        """A Spark SQL predicate; a join's: one per source, applied before the join."""
        context = _context(info)
        if context["operator"] != "join":
            return predicate(value)
        found: list[SpecProblem] = []
        return _done(info, side_filters(value, list(context["sources"]), found), found)

    @field_validator("key_by", mode="plain")
    @classmethod
    def _key_by(cls, value: Any, info: ValidationInfo) -> tuple[str, ...]:
        """Key columns, of the source or ``select``; none in a stateless pipeline."""
        if _join_refuses(info, "key_by"):
            return ()
        found: list[SpecProblem] = []
        keys = key_by(value, _columns(info), found)
        if _context(info)["operator"] == "stateless":
            found += no_keys_when_stateless(keys)
        return _done(info, keys, found)

    @field_validator("process", mode="plain")
    @classmethod
    def _process(cls, value: Any, info: ValidationInfo) -> ProcessSpec | None:
        context = _context(info)
        if _join_refuses(info, "process") or context["operator"] != "process":
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

    @field_validator("join", mode="plain")
    @classmethod
    def _join(cls, value: Any, info: ValidationInfo) -> JoinSection | None:
        """Two different sources of ``sources:``, on columns of comparable types."""
        context = _context(info)
        if context["operator"] != "join":
            return None
        if value is None:
            _fail([join_required(context["sources"])])
        found = join_sides(value, context["sources"])
        try:
            section = JoinSection.model_validate(value)
        except ValidationError as exc:
            # the join type, if that much is right, for the output (its window bounds)
            written = value.get("type") if isinstance(value, dict) else None
            context["partial"]["join"] = written if written in JOIN_TYPES else None
            _fail(spec_problems(exc, "join", JoinSection) + found)
        return _done(info, section, found)

    @field_validator("output", mode="plain")
    @classmethod
    def _output(cls, value: Any, info: ValidationInfo) -> tuple[str, ...] | dict[str, str]:
        """A stateless pipeline's columns written, among the source's and ``select``'s; a
        join's result columns, each an expression over the sources' columns."""
        found: list[SpecProblem] = []
        context = _context(info)
        if context["operator"] == "join":
            results = join_output(value, context["sources"], _join_type(info), found)
            return _done(info, results, found)
        columns = list(_columns(info)) if _schema(info) else []
        stateless = context["operator"] == "stateless"
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
        if operator == "join" and _read(info, "output"):
            found += append_sinks(sinks, list(_read(info, "output")), "a join's")
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
            sinks = _read(info, "sinks", ())
            found += paths_apart(_sources_read(info), sinks, sides, checkpoint, name)
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
        """The spec the rest of Sluice reads (frozen dataclasses: cheap to read). A join
        pipeline's ``source`` and ``event_time`` are its left side's."""
        assert self.checkpoint and self.late_records and self.dead_letters
        join = self._join_spec()
        if join is not None:
            source, event_time_, filter_ = join.left.source, join.left.event_time, None
        else:
            assert self.source and isinstance(self.event_time, EventTimeSpec)
            assert not isinstance(self.filter, dict)
            source, event_time_, filter_ = self.source, self.event_time, self.filter
        return PipelineSpec(
            name=self.name,
            source=source,
            event_time=event_time_,
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
            filter=filter_,
            output=() if isinstance(self.output, dict) else self.output,
            process=self.process,
            join=join,
            execution=self.execution,
            origin=origin,
        )

    def _join_spec(self) -> JoinSpec | None:
        """The join of a join pipeline: each source with its event time and filter, by name."""
        if self.join is None:
            return None
        assert isinstance(self.event_time, dict) and isinstance(self.output, dict)
        filters = self.filter if isinstance(self.filter, dict) else {}
        sides = {
            name: JoinSide(name, source, self.event_time[name], filters.get(name))
            for name, source in self.sources.items()
        }
        return self.join.spec(sides, tuple(self.output.items()))


def _operator(info: ValidationInfo, key: str) -> Operator:
    """The pipeline's operator, for a section of the window operator's (``key``): one
    written beside a process function is refused (:func:`~sluice.spec.rules.not_with_process`),
    and in a join pipeline."""
    context = _context(info)
    if context["operator"] == "process" and key in context["keys"]:
        _fail([not_with_process(key)])
    _join_refuses(info, key)
    return context["operator"]


def _join_refuses(info: ValidationInfo, key: str) -> bool:
    """Whether the pipeline is a join, where the section ``key`` (of single-source pipelines)
    is refused when written (:func:`~sluice.spec.rules.not_in_join`)."""
    context = _context(info)
    if context["operator"] != "join":
        return False
    if key in context["keys"]:
        _fail([not_in_join(key)])
    return True


def _join_type(info: ValidationInfo) -> str | None:
    """The join's type: of the valid ``join:``, else as written if that is a type (else None)."""
    join = _read(info, "join")
    return join.type if isinstance(join, JoinSection) else cast("str | None", join)


def _sources_read(info: ValidationInfo) -> dict[str, SourceConfig]:
    """The valid sources, by their field: ``source``, or a join's ``sources.<name>``."""
    source: SourceConfig | None = info.data.get("source")
    if source is not None:
        return {"source": source}
    sources: dict[str, SourceConfig] = _read(info, "sources", {})
    return {f"sources.{name}": s for name, s in sources.items()}


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
