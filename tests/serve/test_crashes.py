"""The server dies mid-epoch: SIGKILL at a named fault point (``SLUICE_FAULT`` in the server's
environment fires inside it, as in a spark-submit driver) and at a random moment inside the
epoch's Spark jobs. The request fails (:class:`ServeUnavailable`, what fails the Airflow task);
the retry reaches the restarted server; the protocol's recovery (a new attempt, the dead one's
staged output removed) keeps the committed output exactly the reference."""

from __future__ import annotations

import http.client
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from sluice.contracts.records import AttemptStatus
from sluice.protocol import commit_epoch, plan_epoch
from sluice.serve import ServeRefused, ServeUnavailable

from tests.fixtures.pipelines import assert_click_output_exact, staged_keys
from tests.serve.pipelines import CLICK_REFERENCE, Pipeline, click_pipeline, gated_pipeline
from tests.serve.test_server import wait_until


def _records_read(pipeline: Pipeline) -> int:
    latest = pipeline.rt.repo.latest_epoch()
    return sum(pipeline.rt.repo.checkpoint(e).result.stats.records_read
               for e in range(1, latest + 1))  # fmt: skip


def _die_at_fault_point(server: Any, pipeline: Pipeline, epoch: int, marker: Path) -> None:
    """Epoch ``epoch`` is planned here; its attempt kills the server; the restarted server
    processes the retry."""
    client = server.client()
    assert plan_epoch(pipeline.rt) is not None
    with pytest.raises(ServeUnavailable):
        client.process(pipeline.path, epoch, f"run_{epoch}")
    assert server.wait_exit() == -9 and marker.exists()
    [dead] = pipeline.rt.repo.attempts(epoch)
    after_record = server.env.get("SLUICE_FAULT") == "process.after_attempt"
    wanted = AttemptStatus.PREPARED if after_record else AttemptStatus.STARTED
    assert dead.status == wanted  # nobody lived to record more
    server.start()  # same environment: the SLUICE_FAULT_ONCE marker keeps it quiet now
    retried = client.process(pipeline.path, epoch, f"run_{epoch}")
    assert retried["attempt"] != dead.attempt
    commit_epoch(pipeline.rt, epoch)


def test_server_killed_at_a_fault_point_and_inside_a_spark_job(
    serve_factory: Any, local_workspace: Any, tmp_path: Path
) -> None:
    pipeline = click_pipeline(local_workspace, tmp_path / "specs", files_per_epoch=3)
    marker = tmp_path / "fault-fired"
    fault = {"SLUICE_FAULT": "process.after_prepare", "SLUICE_FAULT_EPOCH": "1",
             "SLUICE_FAULT_ONCE": str(marker)}  # fmt: skip
    server = serve_factory([tmp_path / "specs"], **fault)
    client = server.client()

    # 1. Epoch 1 dies with every sink staged and the attempt record still STARTED.
    _die_at_fault_point(server, pipeline, 1, marker)

    # 2. Epoch 2: SIGKILL at a random moment once its Spark jobs have started.
    assert plan_epoch(pipeline.rt) is not None
    started = client.start(pipeline.path, 2, "run_2")
    wait_until("epoch 2's first Spark job",
               lambda: client.status(started["id"])["spark_jobs"]["started"] > 0)  # fmt: skip
    delay = random.Random(11).uniform(0.0, 1.5)
    time.sleep(delay)  # the random moment itself, not a wait for something to happen
    state = client.status(started["id"])
    server.kill()
    print(f"killed {delay:.2f} s after the first Spark job of epoch 2: {state['spark_jobs']}, "
          f"request {state['status']}")  # fmt: skip
    with pytest.raises(ServeUnavailable):
        client.status(started["id"])
    server.start()
    with pytest.raises(ServeRefused, match="HTTP 404"):  # a new server: that request is gone
        client.status(started["id"])
    client.process(pipeline.path, 2, "run_2")
    commit_epoch(pipeline.rt, 2)

    assert pipeline.epoch(client) is None  # nothing left
    assert_click_output_exact(pipeline.spec, CLICK_REFERENCE)  # and nothing left staged
    assert _records_read(pipeline) == CLICK_REFERENCE.records_read
    assert server.client().health()["epochs"]["succeeded"] == 1  # this server's own count
    assert server.starts == 3


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["process.after_start", "process.after_state", "process.after_attempt"]
)
def test_server_killed_at_each_process_fault_point(
    serve_factory: Any, local_workspace: Any, tmp_path: Path, point: str
) -> None:
    pipeline = click_pipeline(local_workspace, tmp_path / "specs", files_per_epoch=3)
    marker = tmp_path / "fault-fired"
    server = serve_factory([tmp_path / "specs"], SLUICE_FAULT=point, SLUICE_FAULT_EPOCH="1",
                           SLUICE_FAULT_ONCE=str(marker))  # fmt: skip
    _die_at_fault_point(server, pipeline, 1, marker)
    pipeline.drain(server.client())
    assert_click_output_exact(pipeline.spec, CLICK_REFERENCE)
    assert _records_read(pipeline) == CLICK_REFERENCE.records_read


def test_sigterm_cancels_the_running_attempt_then_stops(serve_factory: Any, tmp_path: Path) -> None:
    """A stop (SIGTERM), unlike a crash: the running attempt is cancelled (recorded FAILED, its
    staged output removed), its long poll answers ``cancelled``, and the server exits 0."""
    server = serve_factory([tmp_path])
    client = server.client()
    gated, gate = gated_pipeline(tmp_path / "gated", name="gated_stop")
    gate.close()
    plan = plan_epoch(gated.rt)
    assert plan is not None
    started = client.start(gated.path, plan.epoch, "run_1")
    wait_until("the attempt inside its Spark job", gate.entered.exists)
    # The long poll is sent before the signal; its answer waits in this socket once the
    # server has gone.
    poll = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    poll.request("GET", f"/v1/attempts/{started['id']}?wait=60",
                 headers={"Authorization": f"Bearer {server.token}"})  # fmt: skip
    # Only a request the server has begun is answered on the way out (a connection whose
    # request is still unread is closed, as any HTTP server's stop does): wait until it holds
    # the poll.
    wait_until("the long poll held by the server", lambda: client.health()["long_polls"] >= 1)
    server.stop()
    answer = poll.getresponse()
    polled = json.loads(answer.read())
    gate.open()

    assert server.proc.returncode == 0, server.tail()
    assert answer.status == 200 and polled["status"] == "cancelled", polled
    record = gated.rt.repo.attempt(plan.epoch, polled["attempt"])
    assert record is not None and record.status == AttemptStatus.FAILED
    assert "cancelled by sluice serve stopping" in (record.error or ""), record.error
    assert staged_keys(gated.spec) == []
    log = server.tail(10**7)
    assert "SIGTERM: stopping (running attempts are cancelled)" in log and "stopped" in log
