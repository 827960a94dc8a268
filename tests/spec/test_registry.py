"""The component registry: one config class per ``type``, frozen and validated, invalid
combinations refused in a spec and in code, runtime objects built without importing PySpark
at spec load, and a new type added with one class and one registry line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import ValidationError
from sluice.spec import (
    CountWindow,
    FilesSinkConfig,
    FilesSourceConfig,
    KafkaSourceConfig,
    PostgresSinkConfig,
    SessionWindow,
    SourceConfig,
    TumblingWindow,
    parse_spec,
)
from sluice.spec.components.base import Text
from sluice.spec.registry import SINKS, SOURCES, WINDOWS, Registry

from tests.spec.test_loader import base, only_problem

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}


def kafka(**extra: Any) -> dict[str, Any]:
    return {"type": "kafka", "topics": ["clicks"], "bootstrap_servers": "b:9092",
            "schema": SCHEMA, **extra}  # fmt: skip


def test_every_type_is_registered_under_its_own_name() -> None:
    assert list(SOURCES.types) == ["files", "nexmark", "kafka", "sqlite"]
    assert list(SINKS.types) == ["files", "postgres", "delta", "iceberg", "kafka"]
    assert list(WINDOWS.types) == ["tumbling", "hopping", "session", "count"]
    for registry in (SOURCES, SINKS, WINDOWS):
        for name, cls in registry.types.items():
            assert cls.model_fields["type"].default == name
            assert cls.model_config["frozen"] and cls.model_config["extra"] == "forbid"


def test_a_kafka_source_with_files_settings_is_refused(tmp_path: Path) -> None:
    data = base(tmp_path)
    data["source"] = kafka(header=True)
    problem, fix = only_problem(data, "source.header")
    assert problem == "does not apply to a kafka source" and "topics" in fix
    with pytest.raises(ValidationError, match="header"):
        KafkaSourceConfig(topics=("clicks",), bootstrap_servers="b:9092", schema=SCHEMA,
                          header=True)  # type: ignore[call-arg]  # fmt: skip


def test_kafka_settings_are_typed_fields(tmp_path: Path) -> None:
    data = base(tmp_path)
    decode = {"user": "cast(key as string)", "url": "'-'", "amount": "1.0"}
    data["source"] = kafka(format="raw", decode=decode, metadata={"ts": "timestamp"},
                           connection="Kafka_Default")  # fmt: skip
    source = parse_spec(data).source
    assert isinstance(source, KafkaSourceConfig)
    assert (source.topics, source.format, source.connection) == (
        ("clicks",),
        "raw",
        "kafka_default",
    )
    assert source.connection_ids() == ("kafka_default",) and source.storage_path() is None
    assert dict(source.decode) == decode
    assert not hasattr(source, "path")


def test_configs_are_frozen_and_checked_when_built_in_code() -> None:
    source = FilesSourceConfig(path="in", format="jsonl", schema=SCHEMA)
    with pytest.raises(ValidationError):
        source.path = "elsewhere"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="not valid"):
        FilesSourceConfig(path="in", format="xml", schema=SCHEMA)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="records would be skipped"):
        CountWindow(count=2, count_slide=3)
    with pytest.raises(ValidationError, match="table"):
        PostgresSinkConfig(name="pg", table="a.b.c", connection="c")
    assert TumblingWindow(size_us=60_000_000).shape() == {"type": "tumbling", "size_us": 60_000_000}


def test_components_answer_instead_of_type_switches() -> None:
    assert CountWindow(count=5).counted and not TumblingWindow(size_us=1).counted
    assert SessionWindow(gap_us=1, max_duration_us=5).capped
    assert not SessionWindow(gap_us=1).capped
    assert FilesSourceConfig(path="in", format="parquet", schema=SCHEMA).rereads_cheaply
    assert FilesSinkConfig(name="out", path="out").storage_path() == "out"
    pg = PostgresSinkConfig(name="pg", table="clicks", connection="wh")
    assert (pg.storage_path(), pg.table_ref(), pg.connection_ids()) == (
        None, ("wh", "public", "clicks"), ("wh",),
    )  # fmt: skip


def test_loading_specs_imports_no_pyspark() -> None:
    code = (
        "import sys\n"
        "from sluice.spec import load_spec\n"
        "for name in ('clicks_per_minute', 'nexmark_q5', 'count_window_average'):\n"
        "    load_spec(f'include/pipelines/{name}.yaml')\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


class _LinesConfig(SourceConfig):
    """The smallest new source type: a config with its fields and a build()."""

    type: Literal["lines"] = "lines"
    path: Text
    columns: tuple[tuple[str, str], ...] = (("line", "string"),)

    def build(self, spec: Any, ctx: Any) -> Any:
        return ("built", self.path)


def test_a_new_type_is_one_class_and_one_registry_line() -> None:
    registry = Registry[SourceConfig]("source")
    registry.add(_LinesConfig)
    config, problems = registry.validate({"type": "lines", "path": "in"}, "source")
    assert problems == [] and isinstance(config, _LinesConfig)
    assert config.build(None, None) == ("built", "in")
    _, problems = registry.validate({"type": "lines", "pth": "in"}, "source")
    assert [(p.field, p.problem, p.fix) for p in problems] == [
        ("source.path", "is required", "add it (see README 'Spec')"),
        ("source.pth", "unknown field", "did you mean 'path'?"),
    ]
    _, problems = registry.validate({"type": "files"}, "source")
    assert problems[0].field == "source.type" and "['lines']" in problems[0].fix
