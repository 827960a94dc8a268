"""Kills at random moments inside Spark jobs, not only at the named fault points.

* The driver: a ``sluice run`` process is SIGKILLed (its whole process group, JVM included)
  at a seeded-random moment after epoch 2's attempt started, i.e. somewhere inside that
  epoch's Spark jobs (reading, the window query, the state snapshot, staging or direct sink
  writes). Resumed in-process, each qos level keeps its promise against the uninterrupted
  reference: qos 2 exactly the reference, qos 1 nothing missing, qos 0 nothing duplicated.
* An executor: on a real standalone cluster, the executor JVM is SIGKILLed while the epoch's
  jobs run. Spark reruns the lost tasks on a new executor; the run succeeds and the output is
  exactly the reference.

make test runs the driver kill at qos 2; make chaos the other levels and the executor kill.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import (
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows, row_key

FILES = render_click_files(files=6, events_per_file=80, seed=23)
REFERENCE = click_reference(FILES)
KEYS = ("user", "window_start")
TIMEOUT_S = 600


def _spec(workspace: Any, tmp_path: Path, qos: int) -> tuple[Any, Path]:
    workspace.put_files(FILES)
    body = click_spec_dict(workspace, qos=qos)
    body["source"]["max_files_per_epoch"] = 2
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    return parse_spec(body), path


def _start_run(spec_path: Path, **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "SLUICE_SPARK_MASTER": "local[1]", "COLUMNS": "300", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _wait_for_attempt(rt: Any, epoch: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not rt.repo.attempts(epoch):
        assert proc.poll() is None, f"sluice run ended before epoch {epoch}: {proc.stdout}"
        assert time.monotonic() < deadline, f"no attempt of epoch {epoch} after {TIMEOUT_S} s"
        time.sleep(0.1)


def _window_keys(spec: Any) -> Counter[tuple[Any, ...]]:
    return Counter(row_key(r, KEYS) for r in committed_rows(spec, "out"))


DRIVER_CASES = [
    pytest.param(2, id="qos2"),
    pytest.param(1, id="qos1", marks=pytest.mark.slow),
    pytest.param(0, id="qos0", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("qos", DRIVER_CASES)
def test_driver_killed_at_a_random_moment_in_an_epoch(
    spark: Any, local_workspace: Any, tmp_path: Path, qos: int
) -> None:
    spec, spec_path = _spec(local_workspace, tmp_path, qos)
    rt = runtime(spec)
    proc = _start_run(spec_path)
    _wait_for_attempt(rt, 2, proc)
    delay = random.Random(qos).uniform(0.0, 3.0)
    time.sleep(delay)  # the random moment itself, not a wait for something to happen
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=TIMEOUT_S)
    print(f"qos {qos}: killed {delay:.2f} s into epoch 2 (rc {proc.returncode})")

    run_until_drained(rt, spark)

    assert rt.repo.latest_epoch() == 3
    keys = _window_keys(spec)
    expected = {row_key(r, KEYS) for r in REFERENCE.emitted}
    assert set(keys) - expected == set()
    if qos >= 1:  # nothing lost
        assert expected - set(keys) == set()
    if qos in (0, 2):  # nothing duplicated
        assert [k for k, n in keys.items() if n > 1] == []
    if qos == 2:
        assert compare_rows(committed_rows(spec, "out"), REFERENCE.emitted, keys=list(KEYS)) == []
        assert staged_keys(spec) == []
    read = sum(rt.repo.checkpoint(e).result.stats.records_read for e in (1, 2, 3))
    assert read == REFERENCE.records_read  # every input line read once, by the checkpoints


def _executor_pids(app_id: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"],
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    return [int(p) for p in out.split()]


@pytest.mark.slow
def test_executor_killed_while_the_epoch_runs(
    spark_cluster: Any, spark: Any, local_workspace: Any, tmp_path: Path
) -> None:
    spec, spec_path = _spec(local_workspace, tmp_path, 2)
    rt = runtime(spec)
    proc = _start_run(spec_path, SLUICE_SPARK_MASTER=spark_cluster.master_url)
    _wait_for_attempt(rt, 2, proc)
    apps = [a for a in spark_cluster.applications() if a.get("state") == "RUNNING"]
    assert len(apps) == 1, apps
    pids = _executor_pids(str(apps[0]["id"]))
    assert pids, "no executor JVM found for the running application"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)

    out, _ = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, out[-3000:]
    assert rt.repo.latest_epoch() == 3
    assert compare_rows(committed_rows(spec, "out"), REFERENCE.emitted, keys=list(KEYS)) == []
    assert [k for k, n in _window_keys(spec).items() if n > 1] == []
    assert staged_keys(spec) == []
    relaunched = _executor_pids(str(apps[0]["id"]))
    print(f"killed executors {pids}; the application ended with executors {relaunched}")
