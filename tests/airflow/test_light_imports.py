"""Light imports: parsing the DAG file and running the ``plan`` and ``commit`` tasks load no
PySpark (nor py4j), so a DAG-processor parse and the light tasks pay for none of it.

The check runs in a fresh interpreter: other tests' imports would hide a leak. That interpreter
parses the DAG file with the shipped specs, plans epoch 1 of the demo pipeline, has it processed
by ``jobs/run_epoch.py`` in another process (with Spark, as the ``process`` task does), commits
it, and reports which modules it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sluice
from sluice.demo import write_click_files

from tests.fixtures.airflow import REPO

# The modules the light path must never load.
SPARK_MODULES = ("pyspark", "py4j")

CHILD = """
import json, runpy, subprocess, sys

repo, spec_path = sys.argv[1], sys.argv[2]
runpy.run_path(f"{repo}/dags/sluice_pipelines.py")

from sluice.airflow.tasks import commit_task, plan_task

plan = plan_task(spec_path, {}, run_id="light-run")
job = [sys.executable, f"{repo}/jobs/run_epoch.py", "--spec", spec_path,
       "--epoch", str(plan["epoch"]), "--run-id", "light-run"]
subprocess.run(job, check=True, stdout=subprocess.DEVNULL)
summary, checkpoint = commit_task(spec_path, plan["epoch"], run_id="light-run")
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"plan": plan, "commit": summary, "loaded": loaded}))
"""


def test_dag_parse_plan_and_commit_load_no_pyspark(tmp_path: Path) -> None:
    write_click_files(tmp_path / "demo" / "in", files=3, events_per_file=20)
    code = str(Path(sluice.__file__).resolve().parents[1])  # this checkout's package first
    env = dict(os.environ, SLUICE_DATA_ROOT=str(tmp_path))
    env.pop("SLUICE_DATA", None)
    env.pop("SLUICE_PIPELINES_DIR", None)  # the shipped specs
    env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    spec = str(REPO / "include" / "pipelines" / "clicks_per_minute.yaml")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO), spec],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["plan"]["pipeline"] == "clicks_per_minute"
    assert report["commit"]["epoch"] == report["plan"]["epoch"] == 1
    assert report["commit"]["stats"]["records_read"] > 0  # a real epoch was committed
    assert [m for m in SPARK_MODULES if m in report["loaded"]] == []
