"""Crash recovery: kill a real ``sluice run`` process (SIGKILL) at every fault point, resume.

For every name in FAULT_POINTS and both backends, a ``sluice run`` subprocess dies at that
point of epoch 2 (of 3). The pipeline is then resumed in-process and must end exactly where an
uninterrupted run ends: output equal to the independent reference, no duplicates, no staged
leftovers, no state snapshot of a losing attempt, every attempt settled, counts reconciled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.contracts.layout import STATE
from sluice.contracts.records import AttemptStatus
from sluice.demo import render_click_files
from sluice.protocol import FAULT_POINTS, run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import (
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=80, seed=3)
REFERENCE = click_reference(FILES)
FILES_PER_EPOCH = 2
CRASH_EPOCH = 2
SUBPROCESS_TIMEOUT_S = 600


def _crash_run(spec_path: Path, point: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # the s3_server fixture put AWS_* here
    env.update(SLUICE_FAULT=point, SLUICE_FAULT_EPOCH=str(CRASH_EPOCH),
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="500")  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False,
    )  # fmt: skip


def _state_dirs(rt: Any) -> set[str]:
    """``<epoch>-<attempt>`` names of every directory under the checkpoint store's state/."""
    return {info.key[len(STATE) :].split("/", 1)[0] for info in rt.repo.store.list(STATE)}


# make test runs the commit's middle on S3 (each case is a new JVM, 40-60 s); every point on
# a local directory is test_crash_matrix.py's (one pipeline, make test). make chaos runs all
# 11 points here on both backends. The on_update and keyed crash tests add commit.mid_sinks
# and commit.after_checkpoint.
IN_DEFAULT_SUITE: dict[str, set[str]] = {
    "local": set(),
    "s3": {"commit.mid_sinks"},
}
CASES = [
    pytest.param(
        backend,
        point,
        id=f"{backend}-{point}",
        marks=[] if point in IN_DEFAULT_SUITE[backend] else [pytest.mark.slow],
    )
    for backend in ("local", "s3")
    for point in FAULT_POINTS
]


@pytest.mark.parametrize(("workspace", "point"), CASES, indirect=["workspace"])
def test_sigkill_at_fault_point_then_resume(
    spark: Any, workspace: Any, tmp_path: Path, point: str
) -> None:
    workspace.put_files(FILES)
    body = click_spec_dict(workspace)
    body["source"]["max_files_per_epoch"] = FILES_PER_EPOCH
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)

    proc = _crash_run(spec_path, point)
    assert proc.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at {point}, got rc={proc.returncode}\n{proc.stderr[-3000:]}"
    )
    rt = runtime(spec)
    # It died inside epoch 2: epoch 1 is committed, epoch 3 was never planned.
    assert rt.repo.checkpoint(1) is not None
    assert rt.repo.plan(CRASH_EPOCH + 1) is None
    committed_before = rt.repo.checkpoint(CRASH_EPOCH) is not None
    assert committed_before == (point.startswith("commit.") and point != "commit.before_checkpoint")

    outcomes = run_until_drained(rt, spark)

    epochs_run = [o.checkpoint.epoch for o in outcomes]
    assert epochs_run == list(range(CRASH_EPOCH + committed_before, 4)), epochs_run
    assert rt.repo.latest_epoch() == len(FILES) // FILES_PER_EPOCH

    # Output: equal to the reference, no duplicates, nothing left staged.
    results = committed_rows(spec, "out")
    keys = Counter((r["user"], r["window_start"]) for r in results)
    assert [k for k, n in keys.items() if n > 1] == []
    assert compare_rows(results, REFERENCE.emitted, keys=["user", "window_start"]) == []
    late = [(r["source_file"], r["source_line"]) for r in committed_rows(spec, "late_records")]
    assert len(late) == len(set(late))
    assert sorted(late) == sorted(REFERENCE.late)
    dead = [(r["file"], r["line"], r["reason_code"]) for r in committed_rows(spec, "dead_letters")]
    assert len(dead) == len(set(dead))
    assert sorted(dead) == sorted(REFERENCE.dead)
    assert staged_keys(spec) == []

    # Checkpoints: counts reconcile per epoch and in total; each epoch has one winner.
    checkpoints = [rt.repo.checkpoint(e) for e in range(1, rt.repo.latest_epoch() + 1)]
    assert all(c is not None for c in checkpoints)
    totals = Counter[str]()
    for c in checkpoints:
        assert c is not None
        s = c.result.stats
        assert s.records_read == s.accepted + s.late + s.dead, c.epoch
        assert s.input_units == FILES_PER_EPOCH, c.epoch
        totals.update(records_read=s.records_read, accepted=s.accepted, late=s.late, dead=s.dead)
        assert rt.repo.sinks_committed(c.epoch) is not None, c.epoch
        statuses = {a.attempt: a.status for a in rt.repo.attempts(c.epoch)}
        assert statuses[c.attempt] == AttemptStatus.COMMITTED, (c.epoch, statuses)
        others = {a: st for a, st in statuses.items() if a != c.attempt}
        assert all(st in (AttemptStatus.ABORTED, AttemptStatus.FAILED) for st in others.values()), (
            c.epoch, statuses,
        )  # fmt: skip
    assert totals["records_read"] == REFERENCE.records_read
    assert totals["accepted"] == REFERENCE.accepted_count
    assert totals["late"] == len(REFERENCE.late)
    assert totals["dead"] == len(REFERENCE.dead)
    last = checkpoints[-1]
    assert last is not None and last.result.stats.windows_open == len(REFERENCE.open_windows)

    # State: exactly the winners' snapshots of epochs that had open windows, nothing else.
    expected = {f"{c.epoch:012d}-{c.attempt}" for c in checkpoints if c and c.result.state.rows}
    assert _state_dirs(rt) == expected
    for c in checkpoints:
        assert c is not None
        if c.result.state.rows:
            assert c.result.state.uri is not None
            assert c.result.state.uri.rstrip("/").endswith(f"state/{c.epoch:012d}-{c.attempt}")
