"""Kafka credentials come from an Airflow connection, reach both clients, and stay out of
everything Sluice writes (docs/kafka.md, "Security").

The broker of tests/fixtures/kafka.py has a SASL_PLAINTEXT listener with one PLAIN account; its
password is a planted secret. A pipeline names the Airflow connection ``kafka_sasl`` (defined
the way Airflow defines connections in the environment); the planner (librdkafka) and Spark's
reader (the Java client, whose ``sasl.jaas.config`` Sluice derives) both authenticate with it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sluice.connections import connections_from_env
from sluice.kafka_client import connection_settings, planner_settings, spark_settings
from sluice.protocol import run_until_drained
from sluice.sources.kafka import KafkaSourceError
from sluice.spec import SpecError, parse_spec

from tests.fixtures.kafka import SASL_PASSWORD, SASL_USER, KafkaServer
from tests.fixtures.pipelines import Workspace, click_reference, committed_rows, runtime
from tests.reference import compare_rows
from tests.sources.test_kafka_source import FILES, KEYS, _flush, _records, _spec_dict

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_an_airflow_kafka_connection_in_each_of_its_forms_gives_the_client_settings() -> None:
    extra = {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL",
             "sasl.mechanism": "PLAIN", "group.id": "airflow-consumers"}  # fmt: skip
    as_json = json.dumps({"conn_type": "kafka", "login": "ann", "password": "p@ss", "extra": extra})
    # Connection.get_uri() of the same connection: the extra as query parameters
    as_uri = "kafka://ann:p%40ss@/?bootstrap.servers=b1%3A9092%2Cb2%3A9092&security.protocol=" \
             "SASL_SSL&sasl.mechanism=PLAIN&group.id=airflow-consumers"  # fmt: skip
    from_env = connections_from_env({"AIRFLOW_CONN_K1": as_json, "AIRFLOW_CONN_K2": as_uri})
    want = {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": "ann", "sasl.password": "p@ss"}  # fmt: skip
    assert connection_settings(from_env["k1"]) == want  # group.id is Sluice's business
    assert connection_settings(from_env["k2"]) == want
    nested = "kafka://h:9092/?__extra__=" + json.dumps({"socket.timeout.ms": 500})
    want = {"socket.timeout.ms": "500", "bootstrap.servers": "h:9092"}
    assert connection_settings(nested) == want


def test_each_client_gets_its_own_names_for_the_same_settings() -> None:
    settings = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": 'a"b',
                "sasl.password": "pw", "ssl.ca.location": "/etc/ca.pem",
                "ssl.truststore.password": "x"}  # fmt: skip
    assert spark_settings(settings) == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="a\\"b" password="pw";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.truststore.password": "x",
    }
    assert planner_settings(settings) == {
        k: v for k, v in settings.items() if k != "ssl.truststore.password"
    }
    with pytest.raises(ValueError, match="GSSAPI"):
        spark_settings({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"})


def test_a_spec_with_a_credential_or_a_consumer_group_is_refused_by_field(tmp_path: Path) -> None:
    body = _spec_dict(Workspace("local", tmp_path.as_uri()), KafkaServer("127.0.0.1:9"), "t")
    body["source"]["kafka"] = {"sasl.password": SASL_PASSWORD, "group.id": "g",
                               "security.protocol": "SASL_SSL"}  # fmt: skip
    with pytest.raises(SpecError) as refused:
        parse_spec(body)
    problems = {p.field: p for p in refused.value.problems}
    assert set(problems) == {"source.kafka.sasl.password", "source.kafka.group.id"}
    assert "Airflow connection" in problems["source.kafka.sasl.password"].fix
    assert SASL_PASSWORD not in str(refused.value)
    del body["source"]["bootstrap_servers"]
    with pytest.raises(SpecError) as refused:
        parse_spec(body)
    assert "source.bootstrap_servers" in {p.field for p in refused.value.problems}


def test_a_pipeline_reads_through_sasl_with_the_connections_credentials(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer,
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    if kafka_server.sasl_bootstrap is None:
        pytest.skip("SLUICE_TEST_KAFKA_BOOTSTRAP names an external broker: no SASL listener")
    topic = kafka_server.create_topic(f"sasl-{uuid.uuid4().hex[:6]}", partitions=2)
    produced = kafka_server.produce(topic, _records(FILES[:1]))
    flush, flush_file = _flush(2)
    produced += kafka_server.produce(topic, flush)
    body = _spec_dict(local_workspace, kafka_server, topic)
    del body["source"]["bootstrap_servers"]
    body["source"]["connection"] = "kafka_sasl"
    body["source"]["kafka"] = {"security.protocol": "SASL_PLAINTEXT"}
    spec = parse_spec(body)

    missing = runtime(spec)
    with pytest.raises(KafkaSourceError, match="connection 'kafka_sasl' is not defined"):
        missing.source.plan_range(missing.source.initial_offset(), None)

    def connect(password: str) -> None:
        extra = {"bootstrap.servers": kafka_server.sasl_bootstrap, "sasl.mechanism": "PLAIN",
                 "socket.timeout.ms": "5000"}  # fmt: skip
        monkeypatch.setenv(
            "AIRFLOW_CONN_KAFKA_SASL",
            json.dumps(
                {"conn_type": "kafka", "login": SASL_USER, "password": password, "extra": extra}
            ),
        )

    connect("not-the-password")
    with pytest.raises(KafkaSourceError) as refused:
        wrong = runtime(spec)
        wrong.source.plan_range(wrong.source.initial_offset(), None)
    assert f"kafka source kafka://kafka_sasl/{topic}" in str(refused.value)
    assert "not-the-password" not in str(refused.value)

    connect(SASL_PASSWORD)
    rt = runtime(spec)
    run_until_drained(rt, spark)
    read = sum(rt.repo.checkpoint(e).result.stats.records_read  # type: ignore[union-attr]
               for e in rt.repo.committed_epochs())  # fmt: skip
    assert read == len(produced)
    want = click_reference([FILES[0], flush_file])
    assert want.emitted and compare_rows(committed_rows(spec, "out"), want.emitted, keys=KEYS) == []

    written = [p for p in Path(local_workspace.root.removeprefix("file://")).rglob("*")
               if p.is_file()]  # fmt: skip
    assert len(written) > 10
    leaks = [str(p) for p in written if SASL_PASSWORD.encode() in p.read_bytes()]
    assert leaks == []
    out, err = capfd.readouterr()
    assert SASL_PASSWORD not in out + err
