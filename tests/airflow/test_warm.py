"""``dag.test()`` in warm mode: the spec says ``execution: warm``, so the DAG's ``process`` task
is a :class:`SluiceServedProcessOperator` that posts each epoch to a real ``sluice serve``
(connection ``sluice_serve``, created by ``python -m sluice.airflow.provision --serve-url``).

Two runs = two epochs, equal to the reference; the PostgreSQL sink's connection travels in
the request and its password appears nowhere: no XCom, no Airflow file, no server log.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from sluice.spec import parse_spec

from tests.fixtures.airflow import REPO, airflow_env, files_beside_the_db
from tests.fixtures.pipelines import assert_click_output_exact, click_spec_dict
from tests.fixtures.postgres import SUPERUSER
from tests.fixtures.serve import ServeProcess
from tests.serve.pipelines import CLICK_FILES, CLICK_REFERENCE

PLANTED = "planted-warm-Pw-9e107d9d372bb"
CONN_ID = "warm_pg"


def _fernet_key() -> str:
    """The Fernet key this process decrypts with: it set up its Airflow before airflow.cfg
    (and the key in it) existed, so it stores and reads passwords in clear. The provisioning
    subprocess must do the same (in production every component shares one key)."""
    from airflow.configuration import conf
    from airflow.models.crypto import get_fernet

    return conf.get("core", "fernet_key", fallback="") if get_fernet().is_encrypted else ""


def _provision(home: Path, pipelines: Path, server: ServeProcess, tmp_path: Path) -> str:
    """Pools, the Spark connection and the serve connection, as set-up does; its output."""
    token_file = tmp_path / "serve-token"
    token_file.write_text(server.token)
    token_file.chmod(0o600)
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.airflow.provision", "--pipelines", str(pipelines),
         "--serve-url", server.url, "--serve-token-file", str(token_file)],
        env=airflow_env(home, AIRFLOW__CORE__FERNET_KEY=_fernet_key()), capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_warm_runs_commit_epochs_equal_to_the_reference(
    airflow_db: Path,
    local_workspace: Any,
    pipelines_dir: Path,
    postgres_server: Any,
    serve_server: ServeProcess,
    monkeypatch: Any,
    tmp_path: Path,
) -> None:
    name = "warmtest"
    local_workspace.put_files(CLICK_FILES)
    postgres_server.create_database(name)
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        f"postgresql://{SUPERUSER}:{PLANTED}@{postgres_server.host}:{postgres_server.port}/{name}",
    )
    body = click_spec_dict(local_workspace, name=name, execution="warm")
    body["source"]["max_files_per_epoch"] = 3
    body["sinks"].append({"name": "pg", "type": "postgres", "table": "clicks",
                          "connection": CONN_ID})  # fmt: skip
    (pipelines_dir / f"{name}.yaml").write_text(yaml.safe_dump(body))
    files_only = parse_spec({**body, "sinks": body["sinks"][:1]})  # what assert_... reads
    printed = _provision(airflow_db, pipelines_dir, serve_server, tmp_path)
    assert "connection sluice_serve: " in printed and serve_server.token not in printed
    dag = DagBag(dag_folder=str(REPO / "dags")).dags[f"sluice__{name}"]
    assert type(dag.get_task("process")).__name__ == "SluiceServedProcessOperator"
    assert "execution:warm" in dag.tags
    served_before = serve_server.client().health()["epochs"]["succeeded"]

    runs = [dag.test() for _ in range(2)]

    assert [r.state for r in runs] == ["success"] * 2
    assert serve_server.client().health()["epochs"]["succeeded"] == served_before + 2
    assert_click_output_exact(files_only, CLICK_REFERENCE)
    rows = postgres_server.psql("SELECT count(*) FROM clicks", name)
    assert int(rows) == len(CLICK_REFERENCE.emitted)  # the connection reached the server
    with sqlite3.connect(airflow_db / "airflow.db") as db:
        xcoms = [str(v) for (t, v) in db.execute("SELECT task_id, value FROM xcom")
                 if t == "process"]  # fmt: skip
    assert len(xcoms) >= 2 and all(serve_server.url not in x for x in xcoms)
    assert all("spark_application_id" in x for x in xcoms)
    files = files_beside_the_db(airflow_db)  # not the DB's own files: see the helper
    files += [p for p in tmp_path.rglob("*") if p.is_file()]
    files.append(serve_server.log)
    assert [str(p) for p in files if PLANTED.encode() in p.read_bytes()] == []
    assert serve_server.token.encode() not in serve_server.log.read_bytes()


def test_provision_creates_then_updates_the_serve_connection(airflow_db: Path) -> None:
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sluice.airflow.provision import ensure_serve_connection

    first, second = "a" * 24, "b" * 24
    assert ensure_serve_connection("serve_t", "http://127.0.0.1:8790", first) == "created"
    assert ensure_serve_connection("serve_t", "http://127.0.0.1:8790", first) == "unchanged"
    assert ensure_serve_connection("serve_t", "https://serve.internal:9443", second) == "updated"
    with create_session() as session:
        conn = session.query(Connection).filter(Connection.conn_id == "serve_t").one()
        found = (conn.conn_type, conn.host, conn.port, conn.schema, conn.password)
    assert found == ("http", "serve.internal", 9443, "https", second)
    with pytest.raises(SystemExit, match="expected http"):
        ensure_serve_connection("serve_t", "ftp://x", first)


def _execute(op: Any) -> Any:
    try:
        return op.execute({})
    except Exception as exc:  # the outcome, for the test thread to look at
        return exc


def test_on_kill_cancels_the_served_attempt(
    serve_server: ServeProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry of the same task follows the attempt still running; another run's task is
    refused (409); ``on_kill`` cancels the attempt, both tasks fail, the record is FAILED."""
    from sluice.airflow.operators import SluiceServedProcessOperator
    from sluice.contracts.records import AttemptStatus
    from sluice.protocol import plan_epoch
    from sluice.serve import AttemptCancelled, PipelineBusy

    from tests.serve.pipelines import gated_pipeline
    from tests.serve.test_server import wait_until

    conn = {"conn_type": "http", "host": "127.0.0.1", "port": serve_server.port,
            "schema": "http", "password": serve_server.token}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SLUICE_SERVE", json.dumps(conn))
    gated, gate = gated_pipeline(tmp_path / "gated", name="gated_kill")
    gate.close()
    assert plan_epoch(gated.rt) is not None

    def task(run_id: str) -> SluiceServedProcessOperator:
        return SluiceServedProcessOperator(task_id="process", spec_path=str(gated.path),
                                           epoch="1", run_id=run_id)  # fmt: skip

    first, retry = task("run_1"), task("run_1")
    outcomes: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda o=o, k=k: outcomes.update({k: _execute(o)}))
               for k, o in (("first", first), ("retry", retry))]  # fmt: skip
    threads[0].start()
    wait_until("the attempt inside its Spark job", gate.entered.exists)
    threads[1].start()
    wait_until("the retry following the running attempt", lambda: retry._request_id)
    assert retry._request_id == first._request_id
    with pytest.raises(PipelineBusy, match="still running"):
        task("run_2").execute({})

    first.on_kill()
    for thread in threads:
        thread.join(timeout=300)
    gate.open()
    assert isinstance(outcomes["first"], AttemptCancelled), outcomes
    assert isinstance(outcomes["retry"], AttemptCancelled), outcomes
    [record] = gated.rt.repo.attempts(1)
    assert record.status == AttemptStatus.FAILED


def test_a_busy_server_makes_the_task_wait_not_fail(
    serve_server: ServeProcess,
    local_workspace: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a pipeline runs, one with other S3 settings is refused (one Spark context, one
    s3a configuration: 409); its task waits and runs once the first ends."""
    from sluice.airflow import operators
    from sluice.protocol import commit_epoch, plan_epoch

    from tests.serve.pipelines import gated_pipeline, write_spec
    from tests.serve.test_server import wait_until

    monkeypatch.setattr(operators, "BUSY_WAIT_S", 0.2)
    conn = {"conn_type": "http", "host": "127.0.0.1", "port": serve_server.port,
            "schema": "http", "password": serve_server.token}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SLUICE_SERVE", json.dumps(conn))
    client = serve_server.client()
    gated, gate = gated_pipeline(tmp_path / "gated", name="gated_busy")
    gate.close()
    assert plan_epoch(gated.rt) is not None
    held = client.start(gated.path, 1, "run_a")
    wait_until("the first pipeline inside its Spark job", gate.entered.exists)

    local_workspace.put_files(CLICK_FILES)
    s3 = {"endpoint_url": "http://127.0.0.1:9", "region": "eu-west-1"}  # never used: local
    other = write_spec(tmp_path / "other", click_spec_dict(local_workspace, "clicks_s3o", s3=s3))
    assert plan_epoch(other.rt) is not None
    task = operators.SluiceServedProcessOperator(task_id="process", spec_path=str(other.path),
                                                 epoch="1", run_id="run_b")  # fmt: skip
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(result=_execute(task)))
    thread.start()
    refusal = "pipeline 'clicks_s3o': its S3 settings differ from those of the running pipeline"
    wait_until("the server to refuse the second pipeline", lambda: refusal in serve_server.tail())
    assert thread.is_alive() and task._request_id is None
    assert "clicks_s3o" not in {a["pipeline"] for a in client.attempts()}

    gate.open()
    assert client.result(client.wait(held["id"]))["epoch"] == 1
    thread.join(timeout=600)
    assert isinstance(outcome["result"], dict), outcome
    assert outcome["result"]["pipeline"] == "clicks_s3o"
    commit_epoch(other.rt, 1)
    assert_click_output_exact(other.spec, CLICK_REFERENCE)
