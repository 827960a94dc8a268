"""Read a YAML pipeline spec into a :class:`PipelineSpec`, reporting every problem at once.

Every error names the file, the field and the fix. String values may use ``${VAR}`` or
``${VAR:-default}`` to read the environment (so one spec serves laptop, CI and cluster); a
default may itself read a variable: ``${SLUICE_DATA:-${SLUICE_DATA_ROOT:-data}/demo}``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml

from sluice.spec.durations import parse_duration_us
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.model import (
    AGGREGATE_FUNCTIONS,
    EMIT_MODES,
    EXECUTION_MODES,
    NUMERIC_TYPES,
    SCHEMA_TYPES,
    SINK_TYPES,
    WINDOW_TYPES,
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    PipelineSpec,
    RestartSpec,
    SinkSpec,
    SourceSpec,
    WindowSpec,
)
from sluice.spec.process import check_process
from sluice.storage import ACCEPTED_FORMS, normalized_uri, storage_uri_problem
from sluice.storage.s3options import S3Options

__all__ = ["load_spec", "parse_spec"]

NAME_RE = re.compile(r"^[a-z0-9_]+\Z")  # \Z: "$" would accept a trailing newline
# The innermost ``${VAR}`` / ``${VAR:-default}``: its default holds no "${" and no braces.
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^${}]|\$(?!\{))*))?\}")
_ENV_SLOT = re.compile("\0(\\d+)\0")
_AGG_RE = re.compile(r"^\s*([a-z_]+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")
_TOP = {
    "name",
    "source",
    "event_time",
    "key_by",
    "window",
    "aggregates",
    "emit",
    "sinks",
    "late_records",
    "dead_letters",
    "checkpoint",
    "qos",
    "s3",
    "restart",
    "description",
    "output",
    "select",
    "filter",
    "process",
    "execution",
}
_SOURCE = {"type", "path", "format", "schema", "max_files_per_epoch", "header", "partition_by"}
_NEXMARK_SOURCE = {
    "type",
    "events",
    "max_events",
    "events_per_epoch",
    "partitions",
    "first_event",
    "generator",
}
_EVENT_TIME = {"column", "max_out_of_orderness", "allowed_lateness", "idle_timeout"}
_WINDOW = {"type", "size", "slide", "gap", "count", "max_duration"}
_SINK = {"name", "type", "path", "format", "mode", "table", "connection", "partition_by", "options"}
_SINK_FIELDS = {  # which settings each sink type takes (besides name, type and mode)
    "files": {"path", "format", "partition_by"},
    "postgres": {"table", "connection"},
    "delta": {"path", "partition_by"},
}
# a user-defined source or sink: ``package.module:Class`` (docs/extending.md)
_CLASS_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*\Z")
_PLUGIN_SOURCE = {"type", "schema", "options"}
_KAFKA_SOURCE = {
    "type",
    "topics",
    "bootstrap_servers",
    "format",
    "schema",
    "metadata",
    "max_records_per_epoch",
    "on_missing_offsets",
    "kafka",
    "decode",
    "connection",
}
_KAFKA_METADATA = ("key", "timestamp", "topic", "partition", "offset")
_PLUGIN_SINK = {"name", "type", "mode", "options"}
_PLUGIN_HINT = "or a class of your own, module:Class (docs/extending.md)"
_TABLE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED_OUTPUT = ("window_start", "window_end", "window_index", "_op", "_epoch")
# Any of these makes a pipeline stateful; without them it is stateless (docs/stateless.md).
_STATEFUL = frozenset({"window", "aggregates", "emit", "process"})
_CHECKPOINT = {"storage", "interval", "timeout", "retained", "compact_every"}
_S3 = {"endpoint_url", "region"}
_RESTART = {"attempts", "delay", "max_delay", "multiplier"}


def load_spec(path: str | Path) -> PipelineSpec:
    """Parse and validate the spec file at ``path``."""
    origin = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(origin, [SpecProblem("(file)", f"cannot read: {exc.strerror}")]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = SpecProblem("(yaml)", f"not valid YAML: {exc}", "check indentation and quoting")
        raise SpecError(origin, [problem]) from exc
    return parse_spec(data, origin=origin)


def parse_spec(data: Any, *, origin: str = "<memory>") -> PipelineSpec:
    """Validate an already-parsed YAML document."""
    checker = _Checker(origin)
    spec = checker.pipeline(_interpolate(data, "", checker))
    checker.raise_if_any()
    assert spec is not None
    return spec


def _interpolate(value: Any, where: str, checker: _Checker) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{where}.{k}".lstrip("."), checker) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{where}[{i}]", checker) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    # Innermost references first, each replaced by a slot ("\0<n>\0") so that a value read
    # from the environment is never expanded again; a variable that is missing counts only if
    # its slot survives (``${A:-${B}}`` with A set does not need B).
    slots: list[str | None] = []
    missing: dict[int, str] = {}

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            slots.append(os.environ[name])
        elif default is not None:
            slots.append(default)
        else:
            missing[len(slots)] = name
            slots.append(None)
        return f"\0{len(slots) - 1}\0"

    text = value
    while True:
        expanded = _ENV_RE.sub(substitute, text)
        if expanded == text:
            break
        text = expanded

    def fill(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index in missing:
            name = missing[index]
            checker.add(
                where,
                f"environment variable {name} is not set",
                f"export {name}=... or write ${{{name}:-default}}",
            )
        return _ENV_SLOT.sub(fill, slots[index] or "")

    return _ENV_SLOT.sub(fill, text)


class _Checker:
    """Collects problems while building the spec objects."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.problems: list[SpecProblem] = []

    def add(self, field: str, problem: str, fix: str = "") -> None:
        self.problems.append(SpecProblem(field, problem, fix))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(self.origin, self.problems)

    # -- generic helpers -------------------------------------------------------------------

    def mapping(self, value: Any, field: str, allowed: set[str]) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.add(field, f"expected a mapping, got {_kind(value)}", "see README 'Spec'")
            return None
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"allowed: {sorted(allowed)}"
                self.add(f"{field}.{key}".lstrip("."), "unknown field", hint)
        return value

    def required(self, data: dict[str, Any], key: str, field: str) -> Any:
        if data.get(key) is None:
            self.add(f"{field}.{key}".lstrip("."), "is required", "add it (see README 'Spec')")
        return data.get(key)

    def string(
        self,
        data: dict[str, Any],
        key: str,
        field: str,
        choices: tuple[str, ...] = (),
        default: str | None = None,
        hint: str = "",
    ) -> str | None:
        value = data.get(key, default)
        where = f"{field}.{key}".lstrip(".")
        more = f" {hint}" if hint else ""
        if value is None:
            self.add(where, "is required", f"one of {list(choices)}{more}" if choices else "add it")
            return None
        if not isinstance(value, str) or (choices and value not in choices):
            self.add(where, f"{value!r} is not valid", f"use one of {list(choices)}{more}")
            return None
        if not value.strip():  # else "" would drop a sink or source without a word
            self.add(where, "is empty", "give it a value")
            return None
        return value

    def duration(
        self,
        data: dict[str, Any],
        key: str,
        field: str,
        default: Any = None,
        positive: bool = False,
    ) -> int:
        value = data.get(key, default)
        where = f"{field}.{key}".lstrip(".")
        if value is None:
            self.add(where, "is required", "write a duration like 5s or 1m")
            return 0
        try:
            us = parse_duration_us(value)
        except ValueError as exc:
            self.add(where, str(exc), "write a duration like 500ms, 5s, 1m, 2h or 1d")
            return 0
        if positive and us <= 0:
            self.add(where, "must be greater than zero", "write a duration like 1m")
        return us

    def positive_int(
        self, data: dict[str, Any], key: str, field: str, default: int | None
    ) -> int | None:
        value = data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.add(f"{field}.{key}", f"{value!r} is not a positive whole number", "e.g. 10")
            return default
        return value

    # -- sections --------------------------------------------------------------------------

    def pipeline(self, data: Any) -> PipelineSpec | None:
        top = self.mapping(data, "", _TOP) if data is not None else None
        if top is None:
            if data is None:
                self.add(
                    "(file)", "is empty", "start from include/pipelines/clicks_per_minute.yaml"
                )
            return None
        name = self.name(top.get("name"))
        source = self.source(top.get("source"))
        schema = dict(source.schema) if source else {}
        event_time = self.event_time(top.get("event_time"), schema)
        select = self.select(top.get("select"), schema)
        columns = {**schema, **{n: "derived" for n, _ in select}}
        filter_ = self.filter(top.get("filter"))
        key_by = self.key_by(top.get("key_by"), columns)
        process = None
        aggregates: tuple[AggregateSpec, ...] = ()
        window, emit = None, "on_close"
        stateless = not _STATEFUL & set(top)
        if "process" in top:
            process = check_process(self, top["process"], self.origin)
            self.not_with_process(top)
        elif stateless:
            self.no_keys_when_stateless(key_by)
        else:
            window = self.window(top.get("window"))
            aggregates = self.aggregates(top.get("aggregates"), columns)
            emit = self.string(top, "emit", "", EMIT_MODES, default="on_close") or "on_close"
        output = self.output(top.get("output"), list(columns) if schema else [], stateless)
        checkpoint = self.checkpoint(top.get("checkpoint"))
        sinks = self.sinks(top.get("sinks"))
        if emit == "on_update":
            for sink in sinks:
                if sink.mode != "upsert":
                    self.add(
                        f"sinks.{sink.name}.mode",
                        "emit: on_update rewrites windows, so every sink must be an upsert sink",
                        "add mode: upsert to the sink (or use emit: on_close)",
                    )
        if process is not None:
            self.append_sinks(sinks, [c for c, _ in process.output], "a process function's")
        if stateless and schema:
            self.append_sinks(sinks, list(output or columns), "a stateless pipeline's")
        sinks = self.sink_keys(sinks, key_by, window, aggregates)
        late = self.side_sink(top.get("late_records"), "late_records", name, checkpoint)
        dead = self.side_sink(top.get("dead_letters"), "dead_letters", name, checkpoint)
        for side in (late, dead):
            if side is not None and side.mode == "upsert":
                self.add(
                    f"{side.name}.mode",
                    "late records and dead letters are appended, never upserted",
                    "remove mode: upsert",
                )
        qos = self.qos(top.get("qos", 2))
        s3 = self.s3(top.get("s3"))
        restart = self.restart(top.get("restart"))
        execution = self.execution(top)
        self.paths_apart(source, sinks, late, dead, checkpoint, name)
        operator = stateless or (window if process is None else process)
        if self.problems or None in (name, source, event_time, operator, checkpoint, late, dead):
            return None
        assert name and source and event_time and checkpoint and late and dead
        return PipelineSpec(
            name=name,
            source=source,
            event_time=event_time,
            key_by=key_by,
            window=window,
            aggregates=aggregates,
            sinks=sinks,
            late_records=late,
            dead_letters=dead,
            checkpoint=checkpoint,
            qos=qos,
            s3=s3,
            restart=restart,
            emit=emit,  # type: ignore[arg-type]
            select=select,
            filter=filter_,
            output=output,
            process=process,
            execution=execution,  # type: ignore[arg-type]
            origin=self.origin,
        )

    def not_with_process(self, top: dict[str, Any]) -> None:
        for key in ("window", "aggregates", "emit"):
            if key in top:
                fix = "remove it: the function decides what to emit (docs/keyed-state.md)"
                self.add(key, "does not apply to a pipeline with a process function", fix)

    def no_keys_when_stateless(self, key_by: tuple[str, ...]) -> None:
        if key_by:
            self.add("key_by", "has no meaning in a stateless pipeline (no window, no process "
                     "function): every accepted record is one output row",
                     "remove key_by, or add a window and aggregates (or a process function) "
                     "to group by it")  # fmt: skip

    def output(self, value: Any, columns: list[str], stateless: bool) -> tuple[str, ...]:
        """A stateless pipeline's ``output:``: some of the source and ``select`` columns, in
        the order written (``columns``: those available; empty when the source is invalid)."""
        if value is None:
            return ()
        if not stateless:
            self.add("output", "only applies to a stateless pipeline (no window, no process)",
                     "remove it: windows emit keys, window bounds and aggregates; a process "
                     "function declares process.output")  # fmt: skip
            return ()
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            self.add("output", f"{value!r} is not a list of column names",
                     f"e.g. {columns[:2] or ['user', 'ts']}")  # fmt: skip
            return ()
        for i, name in enumerate(names):
            if columns and name not in columns:
                self.add(f"output[{i}]", f"{name!r} is not a source or select column",
                         f"use some of {columns}")  # fmt: skip
        for dup in sorted({n for n in names if names.count(n) > 1}):
            self.add("output", f"names {dup!r} twice", "list each column once")
        return tuple(names)

    def append_sinks(self, sinks: tuple[SinkSpec, ...], columns: list[str], whose: str) -> None:
        """Sinks of an operator whose rows are only ever appended (a process function, a
        stateless pipeline): no upsert, partition columns among the output columns."""
        for sink in sinks:
            if sink.mode == "upsert":
                self.add(f"sinks.{sink.name}.mode", f"{whose} output is appended",
                         "remove mode: upsert")  # fmt: skip
            for column in sink.partition_by:
                if column not in columns:
                    where = f"sinks.{sink.name}.partition_by"
                    self.add(where, f"{column!r} is not an output column", f"use {columns}")

    def name(self, value: Any) -> str | None:
        if not isinstance(value, str) or not NAME_RE.match(value):
            self.add(
                "name",
                f"{value!r} is not a valid pipeline name",
                "use lower-case letters, digits and '_' only, e.g. clicks_per_minute",
            )
            return None
        return value

    def source(self, value: Any) -> SourceSpec | None:
        if isinstance(value, dict) and value.get("type") == "nexmark":
            return self.nexmark_source(value)
        if isinstance(value, dict) and value.get("type") == "kafka":
            return self.kafka_source(value)
        if isinstance(value, dict) and _names_class(value.get("type")):
            return self.plugin_source(value)
        data = self.mapping(value, "source", _SOURCE) if value is not None else None
        if data is None:
            if value is None:
                self.add("source", "is required", "add a files source (see README 'Spec')")
            return None
        kind = self.string(data, "type", "source", ("files", "nexmark", "kafka"), hint=_PLUGIN_HINT)
        path = self.string(data, "path", "source")
        fmt = self.string(data, "format", "source", ("jsonl", "csv", "parquet"))
        schema = self.schema(data.get("schema"))
        limit = self.positive_int(data, "max_files_per_epoch", "source", None)
        header = data.get("header", True)
        if not isinstance(header, bool):
            self.add("source.header", f"{header!r} is not true/false", "write header: true")
        partition_by = self.string(
            data, "partition_by", "source", ("none", "directory"), default="none"
        )
        if not (kind and path and fmt and schema and partition_by):
            return None
        return SourceSpec(
            kind,
            path,
            fmt,  # type: ignore[arg-type]
            schema,
            limit,
            bool(header),
            partition_by,  # type: ignore[arg-type]
        )

    def plugin_source(self, value: dict[str, Any]) -> SourceSpec | None:
        """``type: module:Class``: a user-defined source; the engine needs its columns
        (``schema``) and hands it ``options`` (docs/extending.md)."""
        for key in sorted(set(value) - _PLUGIN_SOURCE):
            self.add(f"source.{key}", "is not a setting of a plugin source",
                     "put the source's own settings under source.options")  # fmt: skip
        reference = self.class_reference(value.get("type"), "source.type")
        if value.get("schema") is None:
            self.add("source.schema", "is required for a plugin source (the engine needs the "
                     "record columns)", "e.g. {user: string, ts: timestamp}")  # fmt: skip
            return None
        schema = self.schema(value["schema"])
        options = self.options(value.get("options"), "source.options")
        if reference is None or schema is None or options is None:
            return None
        return SourceSpec(reference, "", "parquet", schema, options=options)

    def class_reference(self, value: Any, where: str) -> str | None:
        if not isinstance(value, str) or not _CLASS_RE.match(value):
            fix = "write module:Class, e.g. mypkg.sources:MySource (docs/extending.md)"
            self.add(where, f"{value!r} is not a class reference", fix)
            return None
        return value

    def options(self, value: Any, where: str) -> tuple[tuple[str, Any], ...] | None:
        """A plugin's ``options``: a mapping of JSON values, kept as sorted (name, value)."""
        if value is None:
            return ()
        if not isinstance(value, dict):
            self.add(where, f"expected a mapping, got {_kind(value)}", "e.g. {table: clicks}")
            return None
        problems = [p for k, v in value.items() for p in _json_problems(v, f"{where}.{k}")]
        problems += [(f"{where}.{k}", "is not a text key") for k in value if not isinstance(k, str)]
        for field, problem in problems:
            self.add(field, problem, "use strings, numbers, booleans, null, lists and mappings "
                     "(quote dates and times)")  # fmt: skip
        return None if problems else tuple(sorted(value.items()))

    def nexmark_source(self, value: dict[str, Any]) -> SourceSpec | None:
        """``type: nexmark``: one event kind of the generated Nexmark stream (docs/nexmark.md)."""
        from sluice.nexmark import EventKind, InvalidEventRange, NexmarkConfig, check_range
        from sluice.sources.nexmark import DEFAULT_EVENTS_PER_EPOCH, nexmark_source_spec

        files_only = _SOURCE - _NEXMARK_SOURCE
        for key in sorted(set(value) & files_only):
            if key == "schema":
                fix = "remove it; the columns are those of source.events (docs/nexmark.md)"
                self.add("source.schema", "is set by the generator for a nexmark source", fix)
            else:
                fix = f"remove it; a nexmark source takes {sorted(_NEXMARK_SOURCE - {'type'})}"
                self.add(f"source.{key}", "does not apply to a nexmark source", fix)
        rest = {k: v for k, v in value.items() if k not in files_only}
        data = self.mapping(rest, "source", _NEXMARK_SOURCE) or {}
        events = self.string(data, "events", "source", tuple(k.value for k in EventKind))
        max_events = self.positive_int(data, "max_events", "source", None)
        per_epoch = self.positive_int(data, "events_per_epoch", "source", DEFAULT_EVENTS_PER_EPOCH)
        partitions = self.positive_int(data, "partitions", "source", 1)
        first = data.get("first_event", 0)
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            self.add("source.first_event", f"{first!r} is not a whole number >= 0",
                     "e.g. 0, the start of the stream")  # fmt: skip
            first = 0
        generator = self.nexmark_generator(data.get("generator"))
        if generator is not None:
            stop = first + (max_events or 0)
            try:
                check_range(first, stop, NexmarkConfig(**generator))
            except InvalidEventRange as exc:
                self.add("source.max_events" if max_events else "source.first_event",
                         f"the generator cannot produce events [{first}, {stop}): {exc.reason}",
                         "lower first_event / max_events")  # fmt: skip
        if not events or generator is None:
            return None
        return nexmark_source_spec(
            events,
            max_events=max_events,
            events_per_epoch=per_epoch or DEFAULT_EVENTS_PER_EPOCH,
            partitions=partitions or 1,
            first_event=first,
            generator=generator,
        )

    def kafka_source(self, value: dict[str, Any]) -> SourceSpec | None:
        """``type: kafka``: topics on a broker, JSON values (docs/kafka.md)."""
        data = self.mapping(value, "source", _KAFKA_SOURCE) or {}
        topics = data.get("topics")
        if isinstance(topics, str):
            topics = [topics]
        if (
            not isinstance(topics, list)
            or not topics
            or not all(isinstance(t, str) and t for t in topics)
        ):
            self.add("source.topics", f"{topics!r} is not a topic or a list of topics",
                     "e.g. topics: [clicks]")  # fmt: skip
            topics = None
        connection = data.get("connection")
        if connection is not None and not (
            isinstance(connection, str) and NAME_RE.match(connection.lower())
        ):
            self.add("source.connection", f"{connection!r} is not a connection id",
                     "the id of an Airflow connection of type kafka, "
                     "e.g. kafka_default")  # fmt: skip
            connection = None
        servers = data.get("bootstrap_servers")
        servers_bad = (servers is not None or not connection) and (
            not isinstance(servers, str) or not servers
        )
        if servers_bad:
            self.add("source.bootstrap_servers", f"{servers!r} is not host:port[,host:port]",
                     "e.g. bootstrap_servers: 127.0.0.1:9092, or name an Airflow connection "
                     "of type kafka with connection: kafka_default")  # fmt: skip
        value_format = self.string(data, "format", "source", ("jsonl", "raw"), default="jsonl")
        schema = self.schema(data.get("schema"))
        decode = data.get("decode") or {}
        if not isinstance(decode, dict) or not all(
            isinstance(v, str) and v.strip() for v in decode.values()
        ):
            example = "e.g. {user: 'cast(key as string)'}"
            self.add("source.decode", "expected a mapping of column: Spark SQL expression",
                     example)  # fmt: skip
            decode = {}
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            self.add("source.metadata", f"expected a mapping, got {_kind(metadata)}",
                     "e.g. {ts: timestamp, user: key}")  # fmt: skip
            metadata = {}
        for column, field in metadata.items():
            where = f"source.metadata.{column}"
            if schema is not None and column not in dict(schema):
                self.add(where, "is not a column of source.schema", "declare it in the schema")
            valid = isinstance(field, str) and (
                field in _KAFKA_METADATA or (field.startswith("header:") and len(field) > 7)
            )
            if not valid:
                self.add(where, f"{field!r} is not a Kafka record field",
                         f"one of {list(_KAFKA_METADATA)} or header:<name>")  # fmt: skip
        if value_format == "raw" and schema is not None:
            undecoded = [c for c, _ in schema if c not in decode and c not in metadata]
            if undecoded:
                self.add("source.decode", f"columns {undecoded} have no decode expression",
                         "with format: raw every schema column comes from decode or metadata, "
                         "e.g. decode: {user: 'cast(key as string)'}")  # fmt: skip
        for column in decode:
            if schema is not None and column not in dict(schema):
                self.add(f"source.decode.{column}", "is not a column of source.schema",
                         "declare it in the schema")  # fmt: skip
            if value_format != "raw":
                self.add(f"source.decode.{column}", "only applies to format: raw",
                         "remove it, or set format: raw")  # fmt: skip
        per_epoch = self.positive_int(data, "max_records_per_epoch", "source", None)
        missing = self.string(
            data, "on_missing_offsets", "source", ("fail", "earliest"), default="fail"
        )
        settings = data.get("kafka") or {}
        if not isinstance(settings, dict) or not all(
            isinstance(k, str) and isinstance(v, str | int | bool) for k, v in settings.items()
        ):
            self.add("source.kafka", "expected a mapping of Kafka client settings",
                     "e.g. {security.protocol: SASL_SSL}")  # fmt: skip
            settings = {}
        from sluice.sources.kafka_client import OWNED_SETTINGS, SECRET_SETTINGS

        for name in settings if isinstance(settings, dict) else ():
            if name in SECRET_SETTINGS:
                self.add(f"source.kafka.{name}", "is a credential: it does not belong in a spec",
                         "put it in the extra of an Airflow connection of type kafka and name "
                         "that with source.connection")  # fmt: skip
            elif name in OWNED_SETTINGS or name == "bootstrap.servers":
                self.add(f"source.kafka.{name}", "is set by Sluice",
                         "remove it (offsets live in Sluice's checkpoints; the servers are "
                         "source.bootstrap_servers)")  # fmt: skip
        if topics is None or servers_bad or schema is None or missing is None:
            return None
        from sluice.sources.kafka import kafka_source_spec

        text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()}
        return kafka_source_spec(
            topics,
            servers,
            schema,
            connection=connection.lower() if connection else None,
            metadata=metadata,
            max_records_per_epoch=per_epoch,
            on_missing_offsets=missing,
            kafka=text,
            value_format=value_format or "jsonl",
            decode=decode,
        )

    def nexmark_generator(self, value: Any) -> dict[str, Any] | None:
        """``source.generator``: NexmarkConfig overrides, validated (None if invalid)."""
        from sluice.nexmark import InvalidNexmarkConfig, NexmarkConfig

        if value is None:
            return {}
        known = set(NexmarkConfig().to_dict())
        data = self.mapping(value, "source.generator", known)
        if data is None:
            return None
        overrides = {k: v for k, v in data.items() if k in known}
        try:
            NexmarkConfig(**overrides)
        except InvalidNexmarkConfig as exc:
            for problem in exc.problems:
                name, _, reason = problem.partition(": ")
                self.add(f"source.generator.{name}", reason,
                         "see docs/nexmark.md 'Configuration' for the valid values")  # fmt: skip
            return None
        return overrides if len(overrides) == len(data) else None

    def schema(self, value: Any) -> tuple[tuple[str, str], ...] | None:
        if not isinstance(value, dict) or not value:
            self.add(
                "source.schema",
                "must map each column to a type",
                f"e.g. {{user: string, ts: timestamp}}; types: {list(SCHEMA_TYPES)}",
            )
            return None
        columns: list[tuple[str, str]] = []
        for column, kind in value.items():
            if not isinstance(column, str) or column.startswith("_"):
                self.add(
                    f"source.schema.{column}",
                    "column names must not start with '_'",
                    "rename the column; names starting with '_' are Sluice's",
                )
            if kind not in SCHEMA_TYPES:
                self.add(
                    f"source.schema.{column}",
                    f"unknown type {kind!r}",
                    f"use one of {list(SCHEMA_TYPES)}",
                )
            columns.append((str(column), str(kind)))
        return tuple(columns)

    def event_time(self, value: Any, schema: dict[str, str]) -> EventTimeSpec | None:
        data = self.mapping(value, "event_time", _EVENT_TIME) if value is not None else None
        if data is None:
            if value is None:
                self.add("event_time", "is required", "e.g. {column: ts, max_out_of_orderness: 5s}")
            return None
        column = self.string(data, "column", "event_time")
        if column and schema and schema.get(column) != "timestamp":
            self.add(
                "event_time.column",
                f"{column!r} is not a timestamp column of the schema",
                "name a schema column of type timestamp",
            )
        bound = self.duration(data, "max_out_of_orderness", "event_time", default="0s")
        lateness = self.duration(data, "allowed_lateness", "event_time", default="0s")
        idle = None
        if data.get("idle_timeout") is not None:
            idle = self.duration(data, "idle_timeout", "event_time", positive=True)
        return EventTimeSpec(column, bound, lateness, idle) if column else None

    def select(self, value: Any, schema: dict[str, str]) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, dict):
            self.add(
                "select",
                f"expected a mapping of new column names to SQL expressions, got {_kind(value)}",
                "e.g. {amount_eur: amount * 0.92, domain: parse_url(url, 'HOST')}",
            )
            return ()
        result = []
        for name, expression in value.items():
            where = f"select.{name}"
            if not isinstance(name, str) or not re.match(r"^[A-Za-z][A-Za-z0-9_]*\Z", name):
                self.add(where, "is not a valid column name", "use letters, digits and '_'")
                continue
            if name in schema:
                self.add(where, "clashes with a source column", "choose another name")
            if not isinstance(expression, str | int | float) or not str(expression).strip():
                self.add(where, "must be a Spark SQL expression", "e.g. amount * 0.92")
                continue
            result.append((name, str(expression)))
        return tuple(result)

    def filter(self, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            self.add("filter", "must be a Spark SQL predicate", "e.g. amount > 0 AND url > ''")
            return None
        return value

    def key_by(self, value: Any, schema: dict[str, str]) -> tuple[str, ...]:
        if value is None:
            return ()
        keys = [value] if isinstance(value, str) else value
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            self.add("key_by", f"{value!r} is not a list of column names", "e.g. [user]")
            return ()
        for key in keys:
            if schema and key not in schema:
                self.add("key_by", f"{key!r} is not a schema column", f"use one of {list(schema)}")
        if len(set(keys)) != len(keys):
            self.add("key_by", "names a column twice", "list each key column once")
        return tuple(keys)

    def window(self, value: Any) -> WindowSpec | None:
        data = self.mapping(value, "window", _WINDOW) if value is not None else None
        if data is None:
            if value is None:
                fix = "e.g. {type: tumbling, size: 1m}; or leave out aggregates and emit for a "
                self.add("window", "is required", fix + "stateless pipeline (docs/stateless.md)")
            return None
        kind = self.string(data, "type", "window", WINDOW_TYPES)
        fields = {
            "tumbling": {"type", "size"},
            "hopping": {"type", "size", "slide"},
            "session": {"type", "gap", "max_duration"},
            "count": {"type", "count", "slide"},
        }.get(kind or "", set(_WINDOW))
        for extra in sorted(set(data) - fields):
            if extra in _WINDOW:
                self.add(f"window.{extra}", f"does not apply to {kind} windows",
                         f"{kind} windows take {sorted(fields - {'type'})}")  # fmt: skip
        if kind == "tumbling":
            size = self.duration(data, "size", "window", positive=True)
            return WindowSpec("tumbling", size_us=size, slide_us=size)
        if kind == "hopping":
            size = self.duration(data, "size", "window", positive=True)
            slide = self.duration(data, "slide", "window", positive=True)
            if slide > size:
                self.add("window.slide", "is longer than window.size (records would be skipped)",
                         "make slide <= size; slide = size is a tumbling window")  # fmt: skip
            return WindowSpec("hopping", size_us=size, slide_us=slide)
        if kind == "session":
            gap = self.duration(data, "gap", "window", positive=True)
            cap = 0
            if data.get("max_duration") is not None:
                cap = self.duration(data, "max_duration", "window", positive=True)
            return WindowSpec("session", gap_us=gap, max_duration_us=cap)
        if kind == "count":
            count = self.positive_int(data, "count", "window", None)
            if count is None:
                self.add("window.count", "is required", "e.g. count: 100")
                return None
            slide = self.positive_int(data, "slide", "window", count) or count
            if slide > count:
                self.add("window.slide", "is larger than window.count (records would be skipped)",
                         "make slide <= count")  # fmt: skip
            return WindowSpec("count", count=count, count_slide=slide)
        return None

    def aggregates(self, value: Any, schema: dict[str, str]) -> tuple[AggregateSpec, ...]:
        if not isinstance(value, dict) or not value:
            self.add(
                "aggregates",
                "must map output names to expressions",
                "e.g. {clicks: count(*), total: sum(amount)}",
            )
            return ()
        result = []
        for name, expression in value.items():
            agg = self.aggregate(str(name), expression, schema)
            if agg:
                result.append(agg)
        return tuple(result)

    def aggregate(self, name: str, expression: Any, schema: dict[str, str]) -> AggregateSpec | None:
        where = f"aggregates.{name}"
        if not NAME_RE.match(name) and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*\Z", name):
            self.add(where, "is not a valid column name", "use letters, digits and '_'")
        match = _AGG_RE.match(str(expression))
        if not match or match.group(1) not in AGGREGATE_FUNCTIONS:
            self.add(
                where,
                f"{expression!r} is not a supported aggregate",
                f"write func(column) with func in {list(AGGREGATE_FUNCTIONS)}, or count(*)",
            )
            return None
        func, column = match.group(1), match.group(2)
        if column == "*":
            if func != "count":
                self.add(where, f"{func}(*) is not defined", "name a column, e.g. sum(amount)")
            return AggregateSpec(name, func, None)
        if schema and column not in schema:
            self.add(where, f"{column!r} is not a schema column", f"use one of {list(schema)}")
        elif func in ("sum", "avg") and schema.get(column, "derived") not in (
            *NUMERIC_TYPES,
            "derived",
        ):
            self.add(
                where,
                f"{func} needs a numeric column; {column!r} is {schema[column]}",
                f"use a column of type {list(NUMERIC_TYPES)}",
            )
        elif func in ("min", "max") and schema and schema[column] == "boolean":
            self.add(where, f"{func} of a boolean column is not supported", "use count")
        if name in schema or name in _RESERVED_OUTPUT:
            self.add(where, "clashes with an input or window column name", "choose another name")
        return AggregateSpec(name, func, column)

    def sink(self, value: Any, field: str, name: str | None) -> SinkSpec | None:
        data = self.mapping(value, field, _SINK)
        if data is None:
            return None
        sink_name = name or data.get("name")
        if not isinstance(sink_name, str) or not NAME_RE.match(sink_name):
            self.add(f"{field}.name", f"{sink_name!r} is not a valid sink name", "e.g. out")
            return None
        if _names_class(data.get("type")):
            return self.plugin_sink(data, field, sink_name)
        kind = self.string(data, "type", field, SINK_TYPES, hint=_PLUGIN_HINT)
        mode = self.string(data, "mode", field, ("append", "upsert"), default="append")
        if not (kind and mode):
            return None
        wrong = sorted(set(data) - {"name", "type", "mode"} - _SINK_FIELDS[kind])
        for key in wrong:
            self.add(
                f"{field}.{key}",
                f"is not a setting of a {kind} sink",
                f"{kind} sinks take {sorted(_SINK_FIELDS[kind] | {'mode'})}",
            )
        partition_by = self.partition_columns(data.get("partition_by"), field)
        if kind == "postgres":
            table = self.string(data, "table", field)
            connection = self.string(data, "connection", field)
            if table and not _TABLE_RE.match(table):
                self.add(f"{field}.table", f"{table!r} is not a table name", "e.g. public.clicks")
                return None
            if connection and not NAME_RE.match(connection.lower()):
                self.add(
                    f"{field}.connection",
                    f"{connection!r} is not a connection id",
                    "letters, digits and '_', e.g. sluice_postgres (see docs/sinks.md)",
                )
                return None
            if not (table and connection) or wrong:
                return None
            return SinkSpec(sink_name, "postgres", "", "parquet", mode, table, connection)  # type: ignore[arg-type]
        path = self.string(data, "path", field)
        fmt = "parquet"
        if kind == "files":
            fmt = self.string(data, "format", field, ("parquet", "jsonl"), default="parquet") or ""
        if not (path and fmt) or wrong:
            return None
        return SinkSpec(sink_name, kind, path, fmt, mode, partition_by=partition_by)  # type: ignore[arg-type]

    def plugin_sink(self, data: dict[str, Any], field: str, name: str) -> SinkSpec | None:
        """``type: module:Class``: a user-defined sink with ``options`` (docs/extending.md)."""
        for key in sorted(set(data) - _PLUGIN_SINK):
            self.add(f"{field}.{key}", "is not a setting of a plugin sink",
                     "put the sink's own settings under options")  # fmt: skip
        reference = self.class_reference(data.get("type"), f"{field}.type")
        mode = self.string(data, "mode", field, ("append", "upsert"), default="append")
        options = self.options(data.get("options"), f"{field}.options")
        if reference is None or mode is None or options is None or set(data) - _PLUGIN_SINK:
            return None
        return SinkSpec(name, reference, "", mode=mode, options=options)  # type: ignore[arg-type]

    def partition_columns(self, value: Any, field: str) -> tuple[str, ...]:
        if value is None:
            return ()
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            self.add(f"{field}.partition_by", f"{value!r} is not a column list", "e.g. [user]")
            return ()
        return tuple(names)

    def sink_keys(
        self,
        sinks: tuple[SinkSpec, ...],
        key_by: tuple[str, ...],
        window: WindowSpec | None,
        aggregates: tuple[AggregateSpec, ...],
    ) -> tuple[SinkSpec, ...]:
        """Upsert sinks identify a row by the pipeline's keys and its window; partition
        columns must be result columns."""
        if window is None:
            return sinks
        bounds = ("window_index",) if window.type == "count" else ("window_start", "window_end")
        keys = (*key_by, *bounds)
        columns = {*keys, *(a.name for a in aggregates)}
        if window.type == "count":
            columns |= {"window_start", "window_end"}
        for sink in sinks:
            for column in sink.partition_by:
                if column not in columns:
                    self.add(
                        f"sinks.{sink.name}.partition_by",
                        f"{column!r} is not a result column",
                        f"use one of {sorted(columns)}",
                    )
        return tuple(dataclasses.replace(s, keys=keys) if s.mode == "upsert" else s for s in sinks)

    def sinks(self, value: Any) -> tuple[SinkSpec, ...]:
        if not isinstance(value, list) or not value:
            self.add(
                "sinks",
                "must list at least one sink",
                "e.g. [{name: out, type: files, path: data/out, format: parquet}]",
            )
            return ()
        sinks = [self.sink(v, f"sinks[{i}]", None) for i, v in enumerate(value)]
        result = tuple(s for s in sinks if s)
        names = [s.name for s in result]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            self.add("sinks", f"sink name {dup!r} is used twice", "give every sink its own name")
        return result

    def side_sink(
        self, value: Any, field: str, name: str | None, checkpoint: CheckpointSpec | None
    ) -> SinkSpec | None:
        if value is not None:
            return self.sink(value, field, field)
        if checkpoint is None or name is None:
            return None
        # Nothing is ever dropped: without a configured sink they go next to the checkpoints.
        path = f"{checkpoint.storage.rstrip('/')}/{name}/{field}"
        return SinkSpec(field, "files", path, "jsonl")

    def checkpoint(self, value: Any) -> CheckpointSpec | None:
        data = self.mapping(value, "checkpoint", _CHECKPOINT) if value is not None else None
        if data is None:
            if value is None:
                self.add("checkpoint", "is required", "e.g. {storage: data/ckpt, interval: 1m}")
            return None
        storage = self.string(data, "storage", "checkpoint")
        interval = self.duration(data, "interval", "checkpoint", default="1m", positive=True)
        timeout = self.duration(data, "timeout", "checkpoint", default="10m", positive=True)
        retained = self.positive_int(data, "retained", "checkpoint", 10) or 10
        every = self.positive_int(data, "compact_every", "checkpoint", 10) or 10
        return CheckpointSpec(storage, interval, timeout, retained, every) if storage else None

    def qos(self, value: Any) -> int:
        if value not in (0, 1, 2) or isinstance(value, bool):
            self.add("qos", f"{value!r} is not a qos level", "use 0, 1 or 2")
            return 2
        return int(value)

    def restart(self, value: Any) -> RestartSpec:
        if value is None:
            return RestartSpec()
        data = self.mapping(value, "restart", _RESTART)
        if data is None:
            return RestartSpec()
        attempts = data.get("attempts", 3)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            self.add("restart.attempts", f"{attempts!r} is not a whole number >= 0", "e.g. 3")
            attempts = 3
        delay = self.duration(data, "delay", "restart", default="10s")
        max_delay = self.duration(data, "max_delay", "restart", default="5m")
        if max_delay < delay:
            self.add("restart.max_delay", "is shorter than restart.delay", "raise it, e.g. 5m")
        multiplier = data.get("multiplier", 2.0)
        numeric = isinstance(multiplier, int | float) and not isinstance(multiplier, bool)
        if not numeric or multiplier < 1:
            self.add("restart.multiplier", f"{multiplier!r} is not a number >= 1", "e.g. 2")
            multiplier = 2.0
        return RestartSpec(attempts, delay, max_delay, float(multiplier))

    def execution(self, top: dict[str, Any]) -> str | None:
        """Optional: ``cold`` (spark-submit) or ``warm`` (``sluice serve``); absent, the
        deployment's ``SLUICE_EXECUTION`` decides (docs/warm-execution.md)."""
        if top.get("execution") is None:
            return None
        hint = "(absent: the deployment's SLUICE_EXECUTION; docs/warm-execution.md)"
        return self.string(top, "execution", "", EXECUTION_MODES, hint=hint)

    def s3(self, value: Any) -> S3Options | None:
        if value is None:
            return None
        data = self.mapping(value, "s3", _S3)
        if data is None:
            return None
        return S3Options(endpoint_url=data.get("endpoint_url"), region=data.get("region"))

    def paths_apart(
        self,
        source: SourceSpec | None,
        sinks: tuple[SinkSpec, ...],
        late: SinkSpec | None,
        dead: SinkSpec | None,
        checkpoint: CheckpointSpec | None,
        name: str | None,
    ) -> None:
        """Every location is a storage URI Sluice can open, and no two overlap where one
        writer could read or delete another's objects (docs/storage.md, "Where things go"):

        * no output equal to, inside or around the source (a later epoch would read it back);
        * no output inside or around the checkpoint storage, except a side sink at its own
          default place ``<storage>/<name>/late_records`` or ``.../dead_letters``;
        * no two outputs at, inside or around the same path (or the same PostgreSQL table);
        * the checkpoint storage neither inside nor around the source.
        """
        outputs = [(f"sinks.{s.name}", s) for s in sinks]
        outputs += [(s.name, s) for s in (late, dead) if s is not None]
        located = [
            (f"{f}.path", s.path) for f, s in outputs if s.type != "postgres" and not s.plugin
        ]
        src = None
        if source is not None and not source.plugin and source.type == "files":
            src = self.location("source.path", source.path)
        ckpt = self.location("checkpoint.storage", checkpoint.storage) if checkpoint else None
        seen: list[tuple[str, str]] = []
        for field, path in located:
            where = self.location(field, path)
            if where is None:
                continue
            if src is not None and _overlap(where, src):
                what = "is inside" if _inside(where, src) else "overlaps"
                self.add(field, f"{path!r} {what} the source path",
                         "write outputs outside source.path")  # fmt: skip
            own = f"{ckpt}/{name}/{field.removesuffix('.path')}"
            if ckpt is not None and name and _overlap(where, ckpt) and where != own:
                self.add(field, f"{path!r} overlaps checkpoint.storage ({ckpt})",
                             "write outputs outside the checkpoint storage (or leave out "
                             "late_records / dead_letters to use their default place)")  # fmt: skip
            for other, there in seen:
                if _overlap(where, there):
                    self.add(field, f"{path!r} overlaps {other} ({there})",
                             "give every sink a path of its own")  # fmt: skip
            seen.append((field, where))
        self.same_tables(outputs)
        if src is not None and ckpt is not None and _overlap(ckpt, src):
            self.add("checkpoint.storage", "is inside the source path" if _inside(ckpt, src)
                     else "overlaps the source path", "move it elsewhere")  # fmt: skip

    def same_tables(self, outputs: list[tuple[str, SinkSpec]]) -> None:
        tables: dict[tuple[str, str], str] = {}
        for field, sink in outputs:
            if sink.type != "postgres" or not sink.table or not sink.connection:
                continue
            table = sink.table if "." in sink.table else f"public.{sink.table}"
            key = (sink.connection.lower(), table.lower())
            if key in tables:
                self.add(f"{field}.table", f"{sink.table!r} is also written by {tables[key]}",
                         "give every sink a table of its own")  # fmt: skip
            tables.setdefault(key, field)

    def location(self, field: str, path: str) -> str | None:
        """``path`` as a normalised URI (file:///abs or s3://bucket/prefix), or None with a
        problem recorded when Sluice cannot open it."""
        problem = storage_uri_problem(path)
        if problem is not None:
            self.add(field, f"{path!r}: {problem}", f"write one of {ACCEPTED_FORMS}")
            return None
        return normalized_uri(path)


def _names_class(value: Any) -> bool:
    """A ``type`` with a colon means a class reference (checked by ``class_reference``)."""
    return isinstance(value, str) and ":" in value


def _json_problems(value: Any, where: str) -> list[tuple[str, str]]:
    """(field, problem) for every part of ``value`` that is not a JSON value."""
    if value is None or isinstance(value, str | bool | int):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(where, f"{value!r} is not a JSON number")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _json_problems(v, f"{where}[{i}]")]
    if isinstance(value, dict):
        keys = [(f"{where}.{k}", "is not a text key") for k in value if not isinstance(k, str)]
        return keys + [p for k, v in value.items() for p in _json_problems(v, f"{where}.{k}")]
    return [(where, f"{value!r} ({type(value).__name__}) is not a JSON value")]


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer + "/")


def _overlap(a: str, b: str) -> bool:
    """One location holds the other (or they are the same)."""
    return _inside(a, b) or _inside(b, a)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
