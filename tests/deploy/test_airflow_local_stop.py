"""`make airflow-stop` (scripts/airflow_local_stop.py) against real process trees shaped like
make airflow's: a "scheduler" that on SIGTERM waits for its running "task" (in its own session,
as Airflow's task supervisors are) and a "spark-submit" under it that ignores SIGTERM, and an
"api-server" the task still needs. The scheduler is stopped first, the API server only after
the scheduler's tree is gone, and what outlives the bounded wait is SIGKILLed and named.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
STOP = ROOT / "scripts" / "airflow_local_stop.py"

# The task: its own session (setsid), a child that ignores SIGTERM, exits on TERM itself.
TASK = """
trap 'exit 0' TERM
bash -c 'trap "" TERM; echo $$ > {state}/spark.pid; while :; do sleep 0.2; done' &
while :; do sleep 0.2; done
"""
# The scheduler: on TERM it stops scheduling and waits for its task (LocalExecutor.end()).
SCHEDULER = """
setsid bash -c '{task}' &
task=$!
echo $task > {state}/task.pid
trap 'kill -TERM $task; wait $task; echo "$(date +%s.%N)" > {state}/scheduler.exited; exit 0' TERM
while :; do sleep 0.2; done
"""
API = """
trap 'echo "$(date +%s.%N)" > {state}/api.got-term; exit 0' TERM
while :; do sleep 0.2; done
"""


def start(state: Path, name: str, script: str) -> int:
    proc = subprocess.Popen(["setsid", "bash", "-c", script], start_new_session=False)
    (state / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def wait_for_file(path: Path, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.1)
    raise AssertionError(f"{path} not written")


def test_scheduler_first_then_the_rest_and_leftovers_are_killed_and_named(tmp_path: Path) -> None:
    task = TASK.format(state=tmp_path).replace("'", "'\\''")
    start(tmp_path, "scheduler", SCHEDULER.format(state=tmp_path, task=task))
    start(tmp_path, "api-server", API.format(state=tmp_path))
    spark = int(wait_for_file(tmp_path / "spark.pid"))
    task_pid = int(wait_for_file(tmp_path / "task.pid"))
    assert psutil.Process(task_pid).pid != psutil.Process(task_pid).ppid()
    assert psutil.Process(spark).is_running()

    proc = subprocess.run(
        [sys.executable, str(STOP), str(tmp_path), "--timeout", "3",
         "--stage", "scheduler", "--stage", "api-server,serve"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the SIGTERM-deaf "spark-submit" was SIGKILLed after the wait, and named
    killed = [line for line in proc.stdout.splitlines() if line.startswith("killed")]
    assert [k for k in killed if f" {spark} " in k and "trap" in k], proc.stdout
    assert all(f" {spark} " in k or k.endswith(" sleep 0.2") for k in killed), proc.stdout
    assert not psutil.pid_exists(spark) or psutil.Process(spark).status() == "zombie"
    # the API server got SIGTERM only after the scheduler had exited (its task was gone)
    exited = float(wait_for_file(tmp_path / "scheduler.exited"))
    assert float(wait_for_file(tmp_path / "api.got-term")) >= exited
    assert not (tmp_path / "scheduler.pid").exists() and not (tmp_path / "api-server.pid").exists()
    assert "every process make airflow started has exited" in proc.stdout


def test_a_stale_pid_file_is_only_removed(tmp_path: Path) -> None:
    """A pid file written long after its pid's process started names another process (the
    pid was reused): that process is never signalled."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        pidfile = tmp_path / "scheduler.pid"
        pidfile.write_text(f"{other.pid}\n")
        later = time.time() + 3600
        os.utime(pidfile, (later, later))
        proc = subprocess.run([sys.executable, str(STOP), str(tmp_path), "--timeout", "1"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "stopping" not in proc.stdout
        assert not pidfile.exists()
        assert other.poll() is None, "the process of a stale pid file was signalled"
    finally:
        other.kill()
        other.wait()
