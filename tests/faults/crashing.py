"""Kill one protocol step at a named fault point, in a real ``sluice`` subprocess (SIGKILL).

Only the step that dies runs in a subprocess: a plan or commit step is a plain Python process
(no JVM, a few seconds), a process step starts its own Spark. The steps before it run in the
caller's process with its warm Spark session. Used by the fast crash matrix
(test_crash_matrix.py) and the soak (soak.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sluice.protocol import plan_epoch, process_epoch

__all__ = ["crash_step", "step_of"]

TIMEOUT_S = 600


def step_of(point: str) -> str:
    """The CLI step that reaches ``point``: retention (and the release of read input) runs
    inside a commit, compaction inside a process step."""
    step = point.split(".", 1)[0]
    return {"retention": "commit", "release": "commit", "state": "process"}.get(step, step)


def crash_step(
    rt: Any,
    spark: Any,
    spec_path: Path,
    point: str,
    epoch: int,
    *,
    max_units: int = 1,
    log: Path | None = None,
) -> int:
    """Run epoch ``epoch`` up to the step holding ``point`` here, that step in a ``sluice``
    subprocess told to die at ``point``; returns its exit code (-9 when it died there)."""
    step = step_of(point)
    argv = ["plan", str(spec_path), "--max-files", str(max_units)]
    if step != "plan" and rt.repo.plan(epoch) is None:
        plan_epoch(rt, max_units=max_units)
    if step == "process":
        argv = ["process", str(spec_path)]
    elif step == "commit":
        record = process_epoch(rt, spark, epoch)
        argv = ["commit", str(spec_path), "--epoch", str(epoch), "--attempt", record.attempt]
    env = dict(os.environ, SLUICE_FAULT=point, SLUICE_FAULT_EPOCH=str(epoch),
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="200")  # fmt: skip
    out = log.open("ab") if log else subprocess.DEVNULL
    try:
        proc = subprocess.run([sys.executable, "-m", "sluice.cli", *argv], env=env, stdout=out,
                              stderr=out, timeout=TIMEOUT_S, check=False)  # fmt: skip
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    return proc.returncode
