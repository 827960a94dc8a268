"""open_pipeline: the one way a spec becomes a runtime (CLI, jobs, serve, Airflow, monitor).

No Spark and no database: a Postgres sink is built (not connected) from the URI its
connection id resolves to, so which connections reached the runtime shows in the sink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.pipeline import open_pipeline
from sluice.protocol.exceptions import MissingConnection

from tests.fixtures.pipelines import Workspace, click_spec_dict


def _spec_file(tmp_path: Path) -> Path:
    ws = Workspace("local", tmp_path.as_uri())
    body: dict[str, Any] = click_spec_dict(ws, name="opened")
    body["sinks"] = [{"name": "wh", "type": "postgres", "connection": "warehouse",
                      "table": "public.clicks"}]  # fmt: skip
    path = tmp_path / "opened.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_spec_file_opens_with_the_environments_connections_and_faults(tmp_path: Path) -> None:
    path = _spec_file(tmp_path)
    env = {"SLUICE_CONN_WAREHOUSE": "postgres://u@envdb/dw", "SLUICE_FAULT": "plan.after_write"}
    rt = open_pipeline(path, env=env, run_id="manual__1", attempt_ids=lambda: "fixed")
    assert (rt.name, rt.run_id, rt.new_attempt_id()) == ("opened", "manual__1", "fixed")
    assert rt.faults.point == "plan.after_write"
    assert _uri(rt.sink("wh")).startswith("postgresql://envdb:5432/dw")  # postgres:// accepted


def test_given_connections_win_over_the_environment_and_a_missing_one_is_named(
    tmp_path: Path,
) -> None:
    path = _spec_file(tmp_path)
    env = {"SLUICE_CONN_WAREHOUSE": "postgresql://u@envdb/dw"}
    rt = open_pipeline(path, env=env, connections={"warehouse": "postgresql://u@airflowdb/dw"})
    assert _uri(rt.sink("wh")).startswith("postgresql://airflowdb:5432/dw")
    assert rt.faults.point is None  # none asked for
    with pytest.raises(MissingConnection, match="warehouse"):
        open_pipeline(path, env={})


def _uri(sink: Any) -> str:
    """The sink's location as it shows it (password redacted)."""
    return str(sink.uri)


@pytest.mark.parametrize(
    ("sink", "example"),
    [
        ({"type": "postgres", "table": "public.clicks"}, "e.g. postgresql://user:password@"),
        ({"type": "iceberg", "table": "lake.clicks", "warehouse": "wh"}, "http://catalog:8181"),
        ({"type": "kafka", "topic": "clicks"}, "e.g. kafka://user:password@broker:9092"),
    ],
)
def test_a_missing_connection_says_how_to_define_one_of_its_kind(
    tmp_path: Path, sink: dict[str, Any], example: str
) -> None:
    body = yaml.safe_load(_spec_file(tmp_path).read_text())
    body["sinks"] = [{"name": "wh", "connection": "warehouse", **sink}]
    (tmp_path / "opened.yaml").write_text(yaml.safe_dump(body))
    with pytest.raises(MissingConnection, match="SLUICE_CONN_WAREHOUSE") as missing:
        open_pipeline(tmp_path / "opened.yaml", env={})
    assert example in str(missing.value)


def test_reading_the_checkpoints_needs_no_sink_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sluice checkpoints` and `sluice savepoints` open no sink: an operator can list the
    history of a pipeline whose database connection is not defined where they are."""
    from sluice.cli import main

    path = _spec_file(tmp_path)  # its postgres sink's connection "warehouse" is not defined
    monkeypatch.delenv("SLUICE_CONN_WAREHOUSE", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_WAREHOUSE", raising=False)
    assert open_pipeline(path, env={}, sinks=False).sinks == ()
    assert main(["checkpoints", str(path)]) == 0
    assert main(["savepoints", str(path), "--json"]) == 0
    assert "MissingConnection" not in capsys.readouterr().err
