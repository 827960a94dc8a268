"""``dag.test()`` drives real DAG runs in-process (plan, spark-submit process, commit).

Three runs = three epochs; the committed output equals the independent reference, every
checkpoint names the Airflow run that committed it, and each sink's asset got one event per
epoch carrying the epoch number and counts. A bad trigger conf fails before anything is
written.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamValidationError
from sluice.demo import render_click_files
from sluice.spec import parse_spec

from tests.fixtures.airflow import REPO, files_beside_the_db, provision
from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.fixtures.postgres import SUPERUSER
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=60, seed=21)
REFERENCE = click_reference(FILES)


# The PostgreSQL sink's connection carries this password (the tests' server trusts any): it
# must reach the sink and appear in no XCom, task log, checkpoint object or output.
PLANTED = "planted-dagtest-Pw-5d41402a"
CONN_ID = "dagtest_pg"


@pytest.fixture
def pipeline(
    airflow_db: Path,
    local_workspace: Any,
    pipelines_dir: Path,
    postgres_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> tuple[Any, Any]:
    # One pipeline (and DAG id) per test: runs of one test's DAG must not meet another's.
    name = f"dagtest_{request.node.name.split('_')[1]}"
    local_workspace.put_files(FILES)
    postgres_server.create_database(name)
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        f"postgresql://{SUPERUSER}:{PLANTED}@{postgres_server.host}:{postgres_server.port}/{name}",
    )
    body = click_spec_dict(local_workspace, name=name)
    body["source"]["max_files_per_epoch"] = 2
    # a table of its own: two active assets may not share a URI (sluice-postgres://conn/
    # schema/table), and Airflow deactivated the second test's pg asset, failing its runs
    pg = {"name": "pg", "type": "postgres", "table": f"clicks_{name}", "connection": CONN_ID}
    body["sinks"].append(pg)
    (pipelines_dir / f"{name}.yaml").write_text(yaml.safe_dump(body))
    provision(airflow_db, pipelines_dir)
    dag = DagBag(dag_folder=str(REPO / "dags")).dags[f"sluice__{name}"]
    return parse_spec(body), dag


def _assert_secret_nowhere(spec: Any, home: Path, postgres_server: Any) -> None:
    """The sink got its rows through the connection, and the password is in no XCom value, no
    file under AIRFLOW_HOME but the metadata DB (task and DAG-processor logs) and no file of
    the workspace (input, checkpoints, state, every sink's output)."""
    rows = postgres_server.psql(f"SELECT count(*) FROM clicks_{spec.name}", spec.name)
    assert int(rows) == len(REFERENCE.emitted)  # the connection reached the sink
    with sqlite3.connect(home / "airflow.db") as db:
        xcoms = [str(v) for (v,) in db.execute("SELECT value FROM xcom")]
    assert xcoms, "the DAG runs pushed no XCom: nothing was checked"
    assert [v for v in xcoms if PLANTED in v] == []
    planted = PLANTED.encode()
    files = files_beside_the_db(home)  # not the DB's own files: see the helper
    workspace = Path(spec.checkpoint.storage.removeprefix("file://")).parent
    files += [p for p in workspace.rglob("*") if p.is_file()]
    assert len(files) > 20
    assert [str(p) for p in files if planted in p.read_bytes()] == []


def _keys(store: Any) -> list[tuple[str, int]]:
    return sorted((i.key, i.size) for i in store.list())


def test_three_runs_commit_three_epochs_equal_to_reference(
    pipeline: tuple[Any, Any], airflow_db: Path, postgres_server: Any
) -> None:
    spec, dag = pipeline
    runs = [dag.test() for _ in range(3)]
    assert [r.state for r in runs] == ["success"] * 3

    rt = runtime(spec)
    assert rt.repo.latest_epoch() == 3
    for epoch, run in enumerate(runs, start=1):
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None
        assert checkpoint.run_id == run.run_id
        assert checkpoint.plan.run_id == run.run_id
        winner = rt.repo.attempt(epoch, checkpoint.attempt)
        assert winner is not None and winner.engine is not None
        assert winner.engine["spark_master"].startswith("local")
    results = committed_rows(spec, "out")
    assert compare_rows(results, REFERENCE.emitted, keys=["user", "window_start"]) == []
    late = [(r["source_file"], r["source_line"]) for r in committed_rows(spec, "late_records")]
    assert sorted(late) == sorted(REFERENCE.late)

    # Nothing new: plan skips, process and commit are skipped, nothing is written.
    before = _keys(rt.repo.store)
    idle = dag.test()
    assert idle.state == "success"
    states = {ti.task_id: ti.state for ti in idle.get_task_instances()}
    assert states == {"plan": "skipped", "process": "skipped", "commit": "skipped"}
    assert _keys(rt.repo.store) == before

    _assert_secret_nowhere(spec, airflow_db, postgres_server)

    events = _asset_events(f"sluice__{spec.name}__out")
    assert [e["epoch"] for e in events] == [1, 2, 3]
    assert sum(e["rows"] for e in events) == len(REFERENCE.emitted)
    assert all(e["records_read"] == e["accepted"] + e["late"] + e["dead"] for e in events)


def test_a_join_pipelines_dag_runs_its_epochs(
    airflow_db: Path, local_workspace: Any, pipelines_dir: Path
) -> None:
    """A stream-stream join (two files sources, a left interval join, three files of each
    side a run) from its DAG: two runs commit two epochs whose output, late records and
    dead letters are the in-process suite's; the output asset's events count its rows."""
    from tests.joins.pipelines import assert_committed_reference, capped_join_dict

    body = capped_join_dict(local_workspace, "dagtest_join", 3)
    (pipelines_dir / "dagtest_join.yaml").write_text(yaml.safe_dump(body))
    provision(airflow_db, pipelines_dir)
    dag = DagBag(dag_folder=str(REPO / "dags")).dags["sluice__dagtest_join"]

    runs = [dag.test() for _ in range(2)]
    assert [r.state for r in runs] == ["success"] * 2
    spec = parse_spec(body)
    rt = runtime(spec)
    assert rt.repo.latest_epoch() == 2
    for epoch, run in enumerate(runs, start=1):
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None and checkpoint.run_id == run.run_id
    rows = assert_committed_reference(spec, "interval", "left")
    events = _asset_events("sluice__dagtest_join__out")
    assert [e["epoch"] for e in events] == [1, 2]
    assert sum(e["rows"] for e in events) == len(rows)


# make chaos: tests/airflow/test_server.py checks the same refusals on a real Airflow in
# make test (a malformed conf refused at trigger time, an unknown checkpoint failing plan
# without retries and writing nothing); this is the dag.test() path of them (~60 s).
@pytest.mark.slow
def test_bad_trigger_conf_fails_and_writes_nothing(pipeline: tuple[Any, Any]) -> None:
    spec, dag = pipeline
    assert dag.test().state == "success"  # epoch 1
    rt = runtime(spec)
    before = _keys(rt.repo.store)

    unknown = dag.test(run_conf={"restore_from": "checkpoint", "epoch": 99})
    assert unknown.state == "failed"
    tis = {ti.task_id: ti for ti in unknown.get_task_instances()}
    assert tis["plan"].state == "failed" and tis["plan"].try_number == 1  # no retries
    assert tis["process"].state == "upstream_failed"
    with pytest.raises(ParamValidationError, match="offsets"):
        dag.test(run_conf={"restore_from": "offsets", "offsets": "{not json"})
    refusal = rt.repo.last_refusal()  # the one document written: the refusal, for operators
    assert refusal is not None and "no committed checkpoint 99" in refusal["message"]
    assert [k for k in _keys(rt.repo.store) if not k[0].startswith("refusals/")] == before
    assert rt.repo.latest_epoch() == 1


def _asset_events(name: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == name).order_by(AssetEvent.id)
        ).all()  # fmt: skip
        return [dict(e.extra) for e in rows]
