"""``sluice serve`` end to end: a real server subprocess (its own Spark), real HTTP, real
pipelines. Epochs planned and committed here, processed by the server, give exactly the
reference output, also when a pipeline moves between cold (spark-submit) and warm epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from sluice.contracts.records import AttemptStatus
from sluice.protocol import commit_epoch, plan_epoch
from sluice.serve import AttemptCancelled, PipelineBusy, ServeRefused
from sluice.spark import engine_jars, submit_conf

from tests.fixtures.airflow import REPO
from tests.fixtures.pipelines import assert_click_output_exact, staged_keys
from tests.fixtures.serve import ServeProcess
from tests.keyed.data import cwa_expected
from tests.serve.pipelines import (
    CLICK_REFERENCE,
    SUMMARY_KEYS,
    averages,
    click_pipeline,
    gated_pipeline,
    write_spec,
)

DEADLINE_S = 300


def wait_until(what: str, check: Any, timeout: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def cold_epoch(spec_path: Path, epoch: int) -> dict[str, Any]:
    """What the cold DAG task runs: spark-submit jobs/run_epoch.py; its SLUICE_RESULT."""
    bin_dir = Path(sys.executable).parent
    cmd = [str(bin_dir / "spark-submit"), "--master", "local[2]"]
    for key, value in submit_conf().items():
        cmd += ["--conf", f"{key}={value}"]
    if jars := ",".join(str(p) for p in engine_jars()):
        cmd += ["--jars", jars]
    cmd += [str(REPO / "jobs" / "run_epoch.py"), "--spec", str(spec_path), "--epoch", str(epoch)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("SLUICE_RESULT ")][-1]
    result: dict[str, Any] = json.loads(line.removeprefix("SLUICE_RESULT "))
    return result


def test_warm_epochs_equal_the_reference(
    serve_server: ServeProcess, local_workspace: Any, tmp_path: Path
) -> None:
    pipeline = click_pipeline(local_workspace, tmp_path / "specs")
    client = serve_server.client()
    health = client.health()
    summaries = pipeline.drain(client)

    assert [s["epoch"] for s in summaries] == [1, 2, 3]
    assert_click_output_exact(pipeline.spec, CLICK_REFERENCE)
    for epoch, summary in enumerate(summaries, start=1):
        assert set(summary) == SUMMARY_KEYS
        assert summary["pipeline"] == pipeline.spec.name
        assert summary["spark_application_id"] == health["spark_application_id"]
        checkpoint = pipeline.rt.repo.checkpoint(epoch)
        assert checkpoint is not None and checkpoint.attempt == summary["attempt"]
        assert summary["stats"] == checkpoint.result.stats.to_dict()
        record = pipeline.rt.repo.attempt(epoch, summary["attempt"])
        assert record is not None and record.status == AttemptStatus.COMMITTED
        assert record.engine is not None and record.engine["execution"] == "warm"
        assert record.run_id == f"test__{epoch}"
    after = client.health()
    assert after["epochs"]["succeeded"] == health["epochs"]["succeeded"] + 3
    assert after["uptime_s"] > health["uptime_s"]
    assert 0 < after["driver_heap"]["used_bytes"] <= after["driver_heap"]["max_bytes"]


# make chaos: one spark-submit costs about as much as the rest of this file (the summary
# comes from the same function, sluice.jobs.attempt_summary, in both modes).
@pytest.mark.slow
def test_cold_then_warm_epochs_equal_the_reference(
    serve_server: ServeProcess, local_workspace: Any, tmp_path: Path
) -> None:
    pipeline = click_pipeline(local_workspace, tmp_path / "specs")
    client = serve_server.client()
    health = client.health()

    plan_epoch(pipeline.rt)
    cold = cold_epoch(pipeline.path, 1)
    commit_epoch(pipeline.rt, 1)
    warm = pipeline.drain(client)

    assert [s["epoch"] for s in warm] == [2, 3]
    for summary in (cold, *warm):
        assert set(summary) == SUMMARY_KEYS
        stats = summary["stats"]
        assert stats["records_read"] == stats["accepted"] + stats["late"] + stats["dead"]
    assert cold["spark_application_id"] != health["spark_application_id"]
    assert {s["spark_application_id"] for s in warm} == {health["spark_application_id"]}
    assert_click_output_exact(pipeline.spec, CLICK_REFERENCE)
    read = sum(pipeline.rt.repo.checkpoint(e).result.stats.records_read for e in (1, 2, 3))
    assert read == CLICK_REFERENCE.records_read
    for epoch, summary in zip((2, 3), warm, strict=True):
        record = pipeline.rt.repo.attempt(epoch, summary["attempt"])
        assert record is not None and record.status == AttemptStatus.COMMITTED
        assert record.engine is not None and record.engine["execution"] == "warm"
        assert record.run_id == f"test__{epoch}"
    after = client.health()
    assert after["epochs"]["succeeded"] >= health["epochs"]["succeeded"] + 2


def test_a_join_pipeline_runs_cold_then_warm_and_equals_the_reference(
    serve_server: ServeProcess, local_workspace: Any, tmp_path: Path
) -> None:
    """A stream-stream join (two files sources, a left interval join, one file of each side
    an epoch) through both engines the DAG uses: epoch 1 cold (spark-submit), the rest on
    the warm server; the output, late records and dead letters are the in-process suite's."""
    from tests.joins.pipelines import assert_committed_reference, capped_join_dict

    pipeline = write_spec(tmp_path / "specs", capped_join_dict(local_workspace, "served_join", 1))

    client = serve_server.client()
    server_app = client.health()["spark_application_id"]
    plan_epoch(pipeline.rt)
    cold = cold_epoch(pipeline.path, 1)
    commit_epoch(pipeline.rt, 1)
    warm = pipeline.drain(client)

    assert [s["epoch"] for s in warm] == [2, 3, 4, 5, 6]
    assert cold["spark_application_id"] != server_app
    assert {s["spark_application_id"] for s in warm} == {server_app}
    for summary in (cold, *warm):
        stats = summary["stats"]
        assert stats["records_read"] == (
            stats["accepted"] + stats["late"] + stats["dead"] + stats["filtered"]
        )
    assert_committed_reference(pipeline.spec, "interval", "left")
    record = pipeline.rt.repo.attempt(2, warm[0]["attempt"])
    assert record is not None and record.engine is not None
    assert record.engine["execution"] == "warm"


@pytest.mark.slow
def test_warm_epochs_on_s3(serve_server: ServeProcess, s3_server: Any, tmp_path: Path) -> None:
    from tests.fixtures.pipelines import Workspace

    ws = Workspace("s3", f"s3://{s3_server.bucket('sluice-serve')}/{tmp_path.name}")
    pipeline = click_pipeline(ws, tmp_path / "specs", name="clicks_s3")
    assert len(pipeline.drain(serve_server.client())) == 3
    assert_click_output_exact(pipeline.spec, CLICK_REFERENCE)


def test_requests_without_the_token_are_refused(serve_server: ServeProcess) -> None:
    url = serve_server.url
    routes = [("GET", "/v1/health"), ("GET", "/v1/attempts"), ("POST", "/v1/attempts"),
              ("GET", "/v1/attempts/x"), ("DELETE", "/v1/attempts/x")]  # fmt: skip
    wrong = [{}, {"Authorization": "Bearer nope"}, {"Authorization": serve_server.token},
             {"Authorization": f"Basic {serve_server.token}"},
             {"Authorization": f"Bearer {serve_server.token}x"}]  # fmt: skip
    for method, path in routes:
        for headers in wrong:
            r = requests.request(method, url + path, headers=headers, json={}, timeout=30)
            assert r.status_code == 401, (method, path, headers)
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert "token" in r.json()["error"]
    with pytest.raises(ServeRefused, match="HTTP 401"):
        serve_server.client(token="x" * 32).health()
    assert requests.get(url + "/livez", timeout=30).json() == {"status": "ok"}
    assert serve_server.client().health()["status"] == "ok"
    log = serve_server.tail(10**7)
    assert serve_server.token not in log and "$SLUICE_SERVE_TOKEN" in log


def test_only_specs_under_the_roots_are_served(
    serve_server: ServeProcess, local_workspace: Any, tmp_path: Path, tmp_path_factory: Any
) -> None:
    client = serve_server.client()
    pipeline = click_pipeline(local_workspace, tmp_path / "specs")
    outside = Path(tmp_path_factory.getbasetemp()).parent / "elsewhere.yaml"
    outside.write_text(pipeline.path.read_text())
    (tmp_path / "specs" / "link.yaml").symlink_to(outside)
    (tmp_path / "specs" / "notes.txt").write_text(pipeline.path.read_text())
    refused = {
        str(REPO / "include" / "pipelines" / "clicks_per_minute.yaml"): "not under",
        str(outside): "not under",
        f"{tmp_path}/specs/../../../../{outside.name}": "not under",
        str(tmp_path / "specs" / "link.yaml"): "not under",
        str(tmp_path / "specs" / "notes.txt"): "not a .yaml",
        str(tmp_path / "specs" / "missing.yaml"): "does not exist",
    }
    for path, reason in refused.items():
        with pytest.raises(ServeRefused) as caught:
            client.start(path, 1)
        assert caught.value.status == 403, path
        named = os.path.abspath(path)  # the client sends absolute paths
        assert named in caught.value.message and reason in caught.value.message
    outside.unlink()

    bad = tmp_path / "specs" / "bad.yaml"
    bad.write_text(pipeline.path.read_text().replace("size: 1m", "size: soon"))
    with pytest.raises(ServeRefused) as caught:
        client.start(bad, 1)
    assert caught.value.status == 422 and "window.size" in caught.value.message
    spec = str(pipeline.path)
    bodies = [({"epoch": 1}, "spec"), ({"spec": spec, "epoch": 0}, "epoch"),
              ({"spec": spec, "epoch": 1, "x": 1}, "x")]  # fmt: skip
    for body, field in bodies:
        r = requests.post(serve_server.url + "/v1/attempts", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {serve_server.token}"})  # fmt: skip
        assert r.status_code == 400 and field in r.json()["error"]
    with pytest.raises(ServeRefused, match="HTTP 404"):
        client.status("no-such-request")
    for wait in ("nan", "inf", "soon"):
        r = requests.get(f"{serve_server.url}/v1/attempts/x?wait={wait}", timeout=30,
                         headers={"Authorization": f"Bearer {serve_server.token}"})  # fmt: skip
        assert r.status_code == 400 and "wait=" in r.json()["error"], wait
    assert pipeline.rt.repo.store.list() == []  # nothing refused wrote anything


def test_one_attempt_per_pipeline_while_other_pipelines_run(
    serve_server: ServeProcess, local_workspace: Any, tmp_path: Path
) -> None:
    client = serve_server.client()
    gated, gate = gated_pipeline(tmp_path / "gated")
    clicks = click_pipeline(local_workspace, tmp_path / "clicks", files_per_epoch=None)
    gate.close()
    plan = plan_epoch(gated.rt)
    assert plan is not None
    held = client.start(gated.path, plan.epoch, "run_a")
    wait_until("the held attempt inside its Spark job", gate.entered.exists)

    with pytest.raises(PipelineBusy) as caught:
        client.start(gated.path, plan.epoch, "run_b")
    assert caught.value.status == 409
    assert held["id"] in str(caught.value) and "'gated'" in str(caught.value)
    assert caught.value.running["id"] == held["id"]
    assert client.status(held["id"])["spark_jobs"]["active"] >= 1

    assert clicks.epoch(client) is not None  # another pipeline, all its input, meanwhile
    assert client.status(held["id"])["status"] == "running"
    gate.open()
    assert client.result(client.wait(held["id"]))["epoch"] == plan.epoch
    commit_epoch(gated.rt, plan.epoch)
    gated.drain(client)
    assert averages(gated.spec) == cwa_expected()
    assert_click_output_exact(clicks.spec, CLICK_REFERENCE)


def test_cancel_records_the_attempt_failed_and_a_retry_succeeds(
    serve_server: ServeProcess, tmp_path: Path
) -> None:
    client = serve_server.client()
    gated, gate = gated_pipeline(tmp_path / "gated", name="gated_cancel")
    before = client.health()["epochs"]
    gate.close()
    plan = plan_epoch(gated.rt)
    assert plan is not None
    started = client.start(gated.path, plan.epoch, "run_1")
    wait_until("the attempt inside its Spark job", gate.entered.exists)
    assert client.cancel(started["id"])["cancel_requested"] is True
    status = client.wait(started["id"], timeout=DEADLINE_S)
    assert status["status"] == "cancelled", status
    with pytest.raises(AttemptCancelled, match="cancelled"):
        client.result(status)
    gate.open()

    record = gated.rt.repo.attempt(plan.epoch, status["attempt"])
    assert record is not None and record.status == AttemptStatus.FAILED
    assert "cancel" in (record.error or "").lower()
    assert staged_keys(gated.spec) == []
    assert client.health()["epochs"]["cancelled"] == before["cancelled"] + 1
    assert client.cancel(started["id"])["status"] == "cancelled"  # idempotent

    retried = client.process(gated.path, plan.epoch, "run_1")
    assert retried["attempt"] != status["attempt"]
    commit_epoch(gated.rt, plan.epoch)
    gated.drain(client)
    assert averages(gated.spec) == cwa_expected()


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("PPid:")).split()[1])


def test_health_measures_the_server_process_and_its_jvm(serve_server: ServeProcess) -> None:
    """What the warm soak plots: heap after a full GC, threads, and both processes' RSS."""
    health = serve_server.client().health(gc=True)
    assert serve_server.proc is not None and health["pid"] == serve_server.proc.pid
    assert health["jvm_pid"] not in (None, health["pid"])
    assert _parent(health["jvm_pid"]) == health["pid"]  # the driver JVM PySpark launched
    assert health["rss_bytes"] > 0 and health["jvm_rss_bytes"] > 0
    assert 0 < health["driver_heap"]["used_bytes"] <= health["driver_heap"]["max_bytes"]
    assert health["python_threads"] >= 2 and health["jvm_threads"] > health["python_threads"]
