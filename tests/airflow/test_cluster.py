"""The DAG's ``process`` task submits to a real Spark standalone cluster (by connection).

The epoch runs on the cluster's master (the attempt record and the job's result line carry
the master URL and application id), executors import ``sluice`` from the zip the job ships,
and the committed output equals the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from sluice.demo import render_click_files
from sluice.spec import parse_spec

from tests.fixtures.airflow import REPO, provision
from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=3, events_per_file=60, seed=41)
REFERENCE = click_reference(FILES)
CONN_ID = "sluice_spark_cluster"


def test_process_runs_on_the_standalone_cluster(
    airflow_db: Path,
    spark_cluster: Any,
    local_workspace: Any,
    pipelines_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace, name="cluster_clicks")
    (pipelines_dir / "cluster_clicks.yaml").write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    monkeypatch.setenv("SLUICE_SPARK_CONN_ID", CONN_ID)
    provision(airflow_db, pipelines_dir, master=spark_cluster.master_url, conn_id=CONN_ID)
    dag = DagBag(dag_folder=str(REPO / "dags")).dags["sluice__cluster_clicks"]
    assert dag.get_task("process")._conn_id == CONN_ID

    run = dag.test()
    assert run.state == "success"

    rt = runtime(spec)
    checkpoint = rt.repo.checkpoint(1)
    assert checkpoint is not None and checkpoint.run_id == run.run_id
    winner = rt.repo.attempt(1, checkpoint.attempt)
    assert winner is not None and winner.engine is not None
    print("epoch 1 ran on", winner.engine)
    assert winner.engine["spark_master"] == spark_cluster.master_url
    app_id = winner.engine["spark_application_id"]
    assert app_id.startswith("app-")  # a standalone application, not local-...
    assert app_id in {a["id"] for a in spark_cluster.applications()}
    # Executors import sluice from the zip the job shipped (SparkContext.addPyFile).
    assert ".zip" in winner.engine["executor_sluice"], winner.engine
    assert compare_rows(committed_rows(spec, "out"), REFERENCE.emitted,
                        keys=["user", "window_start"]) == []  # fmt: skip
