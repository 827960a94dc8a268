"""Read a YAML pipeline spec into a :class:`PipelineSpec`, reporting every problem at once.

Every error names the file, the field and the fix. The source, the sinks and the window are
components: their ``type`` chooses a config class in :mod:`sluice.spec.registry`, which
validates them; :mod:`sluice.spec.sections` checks the other sections and
:mod:`sluice.spec.rules` what spans several. String values may read the environment,
``${VAR}`` or ``${VAR:-default}`` (:mod:`sluice.spec.env`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sluice.spec import rules, sections
from sluice.spec.checker import Checker
from sluice.spec.components.base import NAME_RE, SinkConfig, SourceConfig, WindowConfig
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.spec.env import interpolate
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.model import EMIT_MODES, AggregateSpec, CheckpointSpec, PipelineSpec
from sluice.spec.process import check_process
from sluice.spec.registry import SINKS, SOURCES, WINDOWS

__all__ = ["NAME_RE", "load_spec", "parse_spec"]

_TOP = {
    "name", "source", "event_time", "key_by", "window", "aggregates", "emit", "sinks",
    "late_records", "dead_letters", "checkpoint", "qos", "s3", "restart", "description",
    "output", "select", "filter", "process", "execution",
}  # fmt: skip
# Any of these makes a pipeline stateful; without them it is stateless (docs/stateless.md).
_STATEFUL = frozenset({"window", "aggregates", "emit", "process"})


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
    checker = Checker(origin)
    if data is None:
        checker.add("(file)", "is empty", "start from include/pipelines/clicks_per_minute.yaml")
    top = checker.mapping(interpolate(data, "", checker), "", _TOP) if data is not None else None
    spec = _pipeline(checker, top) if top is not None else None
    checker.raise_if_any()
    assert spec is not None
    return spec


def _pipeline(checker: Checker, top: dict[str, Any]) -> PipelineSpec | None:
    name = sections.name(checker, top.get("name"))
    source = _source(checker, top.get("source"))
    schema = dict(source.schema) if source else {}
    event_time = sections.event_time(checker, top.get("event_time"), schema)
    select = sections.select(checker, top.get("select"), schema)
    columns = {**schema, **{n: "derived" for n, _ in select}}
    filter_ = sections.filter(checker, top.get("filter"))
    key_by = sections.key_by(checker, top.get("key_by"), columns)
    stateless = not _STATEFUL & set(top)
    process, window, emit = None, None, "on_close"
    aggregates: tuple[AggregateSpec, ...] = ()
    if "process" in top:
        process = check_process(checker, top["process"], checker.origin)
        rules.not_with_process(checker, top)
    elif stateless:
        rules.no_keys_when_stateless(checker, key_by)
    else:
        window = _window(checker, top.get("window"))
        aggregates = sections.aggregates(checker, top.get("aggregates"), columns)
        emit = checker.string(top, "emit", "", EMIT_MODES, default="on_close") or "on_close"
    output = sections.output(checker, top.get("output"), list(columns) if schema else [], stateless)
    checkpoint = sections.checkpoint(checker, top.get("checkpoint"))
    sinks = _sinks(checker, top, emit, key_by, window, aggregates)
    if process is not None:
        rules.append_sinks(checker, sinks, [c for c, _ in process.output], "a process function's")
    if stateless and schema:
        rules.append_sinks(checker, sinks, list(output or columns), "a stateless pipeline's")
    late = _side_sink(checker, top.get("late_records"), "late_records", name, checkpoint)
    dead = _side_sink(checker, top.get("dead_letters"), "dead_letters", name, checkpoint)
    rules.side_sinks_append(checker, late, dead)
    qos = sections.qos(checker, top.get("qos", 2))
    s3 = sections.s3(checker, top.get("s3"))
    restart = sections.restart(checker, top.get("restart"))
    execution = sections.execution(checker, top)
    rules.paths_apart(checker, source, sinks, late, dead, checkpoint, name)
    operator = stateless or (window if process is None else process)
    if checker.problems or None in (name, source, event_time, operator, checkpoint, late, dead):
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
        origin=checker.origin,
    )


def _source(checker: Checker, value: Any) -> SourceConfig | None:
    if value is None:
        checker.add("source", "is required", "add a files source (see README 'Spec')")
        return None
    source, problems = SOURCES.validate(value, "source")
    checker.extend(problems)
    return source


def _window(checker: Checker, value: Any) -> WindowConfig | None:
    if value is None:
        fix = "e.g. {type: tumbling, size: 1m}; or leave out aggregates and emit for a "
        checker.add("window", "is required", fix + "stateless pipeline (docs/stateless.md)")
        return None
    window, problems = WINDOWS.validate(value, "window")
    checker.extend(problems)
    return window


def _sinks(
    checker: Checker,
    top: dict[str, Any],
    emit: str,
    key_by: tuple[str, ...],
    window: WindowConfig | None,
    aggregates: tuple[AggregateSpec, ...],
) -> tuple[SinkConfig, ...]:
    value = top.get("sinks")
    if not isinstance(value, list) or not value:
        checker.add("sinks", "must list at least one sink",
                    "e.g. [{name: out, type: files, path: data/out, format: parquet}]")  # fmt: skip
        return ()
    found = []
    for i, item in enumerate(value):
        sink, problems = SINKS.validate(item, f"sinks[{i}]")
        checker.extend(problems)
        found += [sink] if sink is not None else []
    names = [s.name for s in found]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        checker.add("sinks", f"sink name {dup!r} is used twice", "give every sink its own name")
    if emit == "on_update":
        rules.on_update_sinks(checker, tuple(found))
    return rules.sink_keys(checker, tuple(found), key_by, window, aggregates)


def _side_sink(
    checker: Checker, value: Any, field: str, name: str | None, checkpoint: CheckpointSpec | None
) -> SinkConfig | None:
    if value is not None:  # its name is its role, whatever it says
        sink, problems = SINKS.validate(value, field, extra={"name": field})
        checker.extend(problems)
        return sink
    if checkpoint is None or name is None:
        return None
    # Nothing is ever dropped: without a configured sink they go next to the checkpoints.
    path = f"{checkpoint.storage.rstrip('/')}/{name}/{field}"
    return FilesSinkConfig(name=field, path=path, format="jsonl")
