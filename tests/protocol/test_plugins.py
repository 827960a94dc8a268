"""open_runtime imports plugin classes (``type: module:Class``) — from the spec's folder
first — and builds them with (spec, options, event time column / pipeline name); every failure
is a PluginError naming the pipeline, the field and the reference. No Spark needed."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.examples import SqliteSink, SqliteSource
from sluice.pipeline import open_runtime
from sluice.protocol import Runtime
from sluice.protocol.exceptions import PluginError
from sluice.spec import PipelineSpec, load_spec

PLUGINS = """
from sluice.examples import SqliteSink, SqliteSource
from sluice.sources import Source

calls = []


class MySource(SqliteSource):
    def __init__(self, spec, options, event_time):
        calls.append(("source", spec, options, event_time))
        options["path"] = options.pop("db")
        super().__init__(spec, options, event_time)


class MySink(SqliteSink):
    def __init__(self, spec, options, pipeline):
        calls.append(("sink", spec, options, pipeline))
        super().__init__(spec, options, pipeline)


class Renamed(SqliteSink):
    def __init__(self, spec, options, pipeline):
        super().__init__(spec, options, pipeline)
        self.name = "other"


class NotASource:
    pass


class Unfinished(Source):  # no abstract method implemented
    def __init__(self, spec, options, event_time):
        self.spec = spec
"""


@pytest.fixture
def plugins(tmp_path: Path) -> str:
    """A module next to the spec file (not importable from sys.path); its unique name."""
    name = f"my_plugins_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGINS)
    return name


def spec_file(tmp_path: Path, source: str, sink: str, **extra: Any) -> PipelineSpec:
    data: dict[str, Any] = {
        "name": "plugged",
        "source": {
            "type": source,
            "schema": {"user": "string", "ts": "timestamp"},
            "options": {"db": str(tmp_path / "in.db"), "table": "clicks"},
        },
        "event_time": {"column": "ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"n": "count(*)"},
        "sinks": [{"name": "out", "type": sink, "options": {"path": "out.db", "table": "t"}}],
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
        **extra,
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def build(spec: PipelineSpec) -> Runtime:
    return open_runtime(spec, clock=time.time, new_attempt_id=lambda: "a1")


def test_plugins_are_found_next_to_the_spec_and_built(tmp_path: Path, plugins: str) -> None:
    spec = spec_file(tmp_path, f"{plugins}:MySource", f"{plugins}:MySink")
    rt = build(spec)
    assert type(rt.source).__name__ == "MySource" and isinstance(rt.source, SqliteSource)
    sink = rt.sink("out")
    assert isinstance(sink, SqliteSink) and sink.table == "t"
    calls = __import__(plugins).calls
    assert calls[0] == ("source", spec.source, {"path": str(tmp_path / "in.db"), "table": "clicks"},
                        "ts")  # fmt: skip
    assert calls[1] == ("sink", spec.sinks[0], {"path": "out.db", "table": "t"}, "plugged")
    assert spec.source.option("db") == str(tmp_path / "in.db")  # the plugin got a copy


def test_the_examples_resolve_from_the_installed_package(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "sluice.examples:SqliteSource", "sluice.examples:SqliteSink")
    with pytest.raises(PluginError, match=r"options\.db: unknown setting"):
        build(spec)  # found and built: the example refuses the test module's option name


@pytest.mark.parametrize(
    ("source", "field", "reason"),
    [
        ("no_such_module_q7:Source", "source.type",
         "importing no_such_module_q7 failed: ModuleNotFoundError"),
        ("{m}:Missing", "source.type", "has no class 'Missing'"),
        ("{m}:calls", "source.type", "has no class 'calls'"),
        ("{m}:NotASource", "source.type",
         "NotASource is not a subclass of sluice.contracts.sources.Source"),
        ("{m}:Unfinished", "source.options",
         "Unfinished(...) raised TypeError: Can't instantiate abstract class Unfinished"),
        ("sluice.examples:SqliteSink", "source.type",
         "SqliteSink is not a subclass of sluice.contracts.sources.Source"),
    ],
)  # fmt: skip
def test_a_source_that_cannot_be_used_names_the_field(
    tmp_path: Path, plugins: str, source: str, field: str, reason: str
) -> None:
    reference = source.format(m=plugins)
    spec = spec_file(tmp_path, reference, f"{plugins}:MySink")
    with pytest.raises(PluginError) as info:
        build(spec)
    err = info.value
    assert (err.pipeline, err.field, err.reference) == ("plugged", field, reference)
    assert reason in err.reason
    assert str(err).startswith(f"pipeline plugged: {field}: cannot use {reference!r}: ")


def test_a_sink_that_cannot_be_used_names_the_field(tmp_path: Path, plugins: str) -> None:
    source = f"{plugins}:MySource"
    spec = spec_file(tmp_path, source, f"{plugins}:Renamed")
    with pytest.raises(PluginError, match=r"sinks\.out\.type: .*its name is 'other'; set self"):
        build(spec)
    spec = spec_file(tmp_path, source, f"{plugins}:MySink",
                     dead_letters={"type": f"{plugins}:MySource"})  # fmt: skip
    wrong = r"dead_letters\.type: .*not a subclass of sluice\.contracts\.sinks\.Sink"
    with pytest.raises(PluginError, match=wrong):
        build(spec)
    late = {"type": f"{plugins}:MySink", "options": {"path": "x.db"}}
    spec = spec_file(tmp_path, source, f"{plugins}:MySink", late_records=late)
    with pytest.raises(PluginError, match=r"late_records\.options: .*options\.table: None is not"):
        build(spec)
