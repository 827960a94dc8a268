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


def test_a_lookup_tables_connection_reaches_the_engine_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()))
    table = {"type": "postgres", "connection": "App_DB", "table": "users"}
    body["lookup"] = [
        {"name": "users", "on": {"user": "user_id"}, "columns": {"tier": "int"}, "table": table}
    ]
    monkeypatch.setenv("SLUICE_CONN_APP_DB", "postgresql://u:secret@db:5432/app")
    assert spec_connections(parse_spec(body)) == {"app_db": "postgresql://u:secret@db:5432/app"}


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


def test_table_and_topic_sink_assets_are_named_by_connection_id_and_do_not_clash(
    tmp_path: Path,
) -> None:
    """One asset per Iceberg table / Kafka topic, by connection id (no secret); two
    pipelines writing one table are a clash the deployment check reports."""
    from sluice.airflow.locations import clashes

    def spec(name: str, table: str) -> Any:
        body = click_spec_dict(Workspace("local", (tmp_path / name).as_uri()), name=name)
        lake = {"name": "lake", "type": "iceberg", "table": table, "connection": "Lake_Cat"}
        body["sinks"].append({**lake, "warehouse": str(tmp_path / "wh")})
        return parse_spec(body)

    a, b = spec("one", "marts.clicks"), spec("two", "marts.clicks")
    assert sink_asset(a, a.sinks[1]).uri == "sluice-iceberg://lake_cat/marts/clicks"
    assert sink_asset(a, a.sinks[1]).name == "sluice__one__lake"
    assert sink_asset(b, b.sinks[1]).name == "sluice__two__lake"
    found = clashes([(a, tmp_path / "one.yaml"), (b, tmp_path / "two.yaml")])
    assert any("sluice-iceberg://lake_cat/marts/clicks" in line for line in found), found
    c = spec("three", "marts.other")
    assert not any("iceberg" in line for line in clashes([(a, "one.yaml"), (c, "three.yaml")]))


def test_a_kafka_sink_asset_is_its_topic(tmp_path: Path) -> None:
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()))
    body["sinks"] += [
        {"name": "bus", "type": "kafka", "topic": "clicks", "connection": "Kafka_Prod"},
        {"name": "dev", "type": "kafka", "topic": "clicks", "bootstrap_servers": "b1:9092,b2:9092"},
    ]
    spec = parse_spec(body)
    assert sink_asset(spec, spec.sinks[1]).uri == "sluice-kafka://kafka_prod/clicks"
    assert sink_asset(spec, spec.sinks[2]).uri == "kafka://b1:9092/clicks"
