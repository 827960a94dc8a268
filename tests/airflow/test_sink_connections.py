"""How the Airflow side hands sink connections to the engine, and names sink assets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.airflow.factory import sink_asset
from sluice.airflow.tasks import spec_connections
from sluice.connections import connection_uri, connections_from_env
from sluice.spec import parse_spec

from tests.fixtures.pipelines import Workspace, click_spec_dict


def _spec(tmp_path: Path) -> Any:
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()))
    body["sinks"].append(
        {"name": "pg", "type": "postgres", "table": "marts.clicks", "connection": "warehouse"}
    )
    return parse_spec(body)


def test_env_connections_in_uri_and_json_form() -> None:
    env = {
        "AIRFLOW_CONN_WAREHOUSE": '{"conn_type": "postgres", "login": "u", "password": "p@ss",'
        ' "host": "db", "port": 5433, "schema": "dw"}',
        "SLUICE_CONN_OTHER": "postgres://a:b@h:1/x",
        "AIRFLOW_CONN_OTHER": "postgresql://ignored@h/x",
        "UNRELATED": "postgresql://nope",
    }
    assert connections_from_env(env) == {
        "warehouse": "postgresql://u:p%40ss@db:5433/dw",
        "other": "postgresql://a:b@h:1/x",  # SLUICE_CONN_ wins; postgres:// normalised
    }
    assert connection_uri("postgresql+psycopg2://u@h/db") == "postgresql://u@h/db"


def test_a_sink_connection_from_the_environment_reaches_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_CONN_WAREHOUSE", "postgresql://u:secret@db:5432/dw")
    monkeypatch.setenv("AIRFLOW_CONN_SOMETHING_ELSE", "postgresql://x@y/z")
    assert spec_connections(_spec(tmp_path)) == {"warehouse": "postgresql://u:secret@db:5432/dw"}


def test_a_postgres_sink_asset_names_the_connection_id_not_its_secret(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    asset = sink_asset(spec, spec.sinks[1])
    assert asset.uri == "sluice-postgres://warehouse/marts/clicks"
    assert sink_asset(spec, spec.sinks[0]).uri == (tmp_path / "out").as_uri()


def test_a_plugin_sink_asset_is_named_by_pipeline_and_sink(tmp_path: Path) -> None:
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()))
    body["sinks"].append({"name": "mine", "type": "my_sinks:MySink", "options": {"db": "x"}})
    spec = parse_spec(body)
    assert sink_asset(spec, spec.sinks[1]).uri == "sluice-plugin://clicks/mine"
