"""`make airflow-stop`: stop what scripts/airflow-local.sh started, in order, and wait for it.

    python scripts/airflow_local_stop.py STATE_DIR [--timeout S] [--stage NAMES]...

Each service wrote ``STATE_DIR/<name>.pid``. Stages run in turn; each one:

1. takes the process tree of every service in the stage: the service and all its descendants
   (LocalExecutor workers, task supervisors in their own sessions, spark-submit JVMs, Python
   workers), kept up to date while it waits, so a task started meanwhile is not missed;
2. sends SIGTERM to each service's main process only: the scheduler then schedules nothing new
   and waits for its running tasks, which still reach the API server and ``sluice serve``
   because they stop in a later stage;
3. waits up to ``--timeout`` seconds for every process of those trees to exit, then SIGKILLs
   the ones left and names them (an epoch killed half-way is safe: its next attempt redoes it).

Default stages: ``scheduler``, then ``api-server,dag-processor,triggerer,serve``. A pid file
whose process started well after or before the file was written is stale (a reused pid) and
is only removed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

DEFAULT_STAGES = ("scheduler", "api-server,dag-processor,triggerer,serve")
DEFAULT_TIMEOUT_S = 60.0
PID_FILE_SLACK_S = 60.0  # a service's pid file is written right after the service forks
POLL_S = 0.2
KILL_WAIT_S = 10.0


def service(state: Path, name: str) -> psutil.Process | None:
    """The live process of ``name``'s pid file, or None (no file, gone, or a stale pid)."""
    pidfile = state / f"{name}.pid"
    try:
        pid = int(pidfile.read_text().strip())
        written = pidfile.stat().st_mtime
        proc = psutil.Process(pid)
        started = proc.create_time()
    except (OSError, ValueError, psutil.Error):
        return None
    if abs(started - written) > PID_FILE_SLACK_S or proc.status() == psutil.STATUS_ZOMBIE:
        return None
    return proc


def descendants(procs: dict[int, psutil.Process]) -> None:
    """Add the live descendants of ``procs`` to it (a process once seen stays tracked)."""
    for proc in list(procs.values()):
        try:
            children = proc.children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            procs.setdefault(child.pid, child)


def alive(procs: dict[int, psutil.Process]) -> list[psutil.Process]:
    left = []
    for proc in procs.values():
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.Error:
            continue
    return left


def describe(proc: psutil.Process) -> str:
    try:
        command = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        command = "?"
    return f"{proc.pid} {command[:100]}"


def stop_stage(
    state: Path, names: Sequence[str], timeout: float
) -> tuple[list[str], list[psutil.Process]]:
    """Stop one stage (module docstring, steps 1-3): what had to be SIGKILLed, and what is
    still alive after that (nothing, unless a process survives SIGKILL)."""
    mains = {name: proc for name in names if (proc := service(state, name)) is not None}
    tracked: dict[int, psutil.Process] = {}
    for name, proc in mains.items():
        tree = {proc.pid: proc}
        descendants(tree)
        tracked.update(tree)
        try:
            proc.send_signal(signal.SIGTERM)
            print(f"stopping {name} (pid {proc.pid}, {len(tree)} processes)")
        except psutil.Error:
            pass
    deadline = time.monotonic() + timeout
    while alive(tracked) and time.monotonic() < deadline:
        descendants(tracked)
        time.sleep(POLL_S)
    descendants(tracked)
    killed = []
    for proc in alive(tracked):
        what = describe(proc)  # before the kill: a dead process has no command line
        try:
            proc.kill()
            killed.append(what)
        except psutil.Error:
            continue
    deadline = time.monotonic() + KILL_WAIT_S  # a zombie is gone: only its parent reaps it
    while alive(tracked) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for name in names:
        (state / f"{name}.pid").unlink(missing_ok=True)
    return killed, alive(tracked)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="airflow_local_stop.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("state", type=Path, help="the folder of the <service>.pid files")
    timeout = float(os.environ.get("AIRFLOW_STOP_TIMEOUT", DEFAULT_TIMEOUT_S))
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per stage")
    parser.add_argument("--stage", action="append", help="comma-separated services, in turn")
    args = parser.parse_args(argv)
    left: list[psutil.Process] = []
    for stage in args.stage or DEFAULT_STAGES:
        killed, survivors = stop_stage(args.state, [n for n in stage.split(",") if n], args.timeout)
        for line in killed:
            print(f"killed (still running after {args.timeout:.0f} s): {line}")
        left += survivors
    if left:
        print("still running:\n" + "\n".join(describe(p) for p in left), file=sys.stderr)
        return 1
    print("stopped: every process make airflow started has exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
