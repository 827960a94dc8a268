"""Keyed state is exactly-once: a real ``sluice run`` killed (SIGKILL) at a fault point, then
resumed, ends with the output and state of an uninterrupted run.

* the shipped ``count_window_average`` (one file per epoch): (1, 4) and (1, 5) and nothing
  twice, at every fault point of epoch 2 (make test: one point; make chaos: all);
* ``kinds`` (every state kind, TTL, timers): at every fault point of epoch 3, equal to the
  record-by-record reference (make chaos).
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
from sluice.protocol import FAULT_POINTS, run_until_drained
from sluice.sinks.files import read_rows
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.keyed.data import ROOT, cwa_expected, kinds_rows

IN_MAKE_TEST = {"commit.after_checkpoint"}


def _params(in_make_test: set[str]) -> list[Any]:
    return [
        pytest.param(p, id=p, marks=[] if p in in_make_test else [pytest.mark.slow])
        for p in FAULT_POINTS
    ]


def _crash(spec: str | Path, point: str, epoch: int, env: dict[str, str]) -> None:
    full = {**os.environ, **env, "SLUICE_FAULT": point, "SLUICE_FAULT_EPOCH": str(epoch),
            "SLUICE_SPARK_MASTER": "local[1]"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec), "--quiet", "--max-files", "1"],
        env=full, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr[-3000:])


@pytest.mark.parametrize("point", _params(IN_MAKE_TEST))
def test_count_window_average_after_a_crash(spark: Any, cwa: Any, point: str) -> None:
    _crash(ROOT / "include" / "pipelines" / "count_window_average.yaml", point, 2,
           {"SLUICE_DATA": os.environ["SLUICE_DATA"]})  # fmt: skip
    rt = runtime(cwa)
    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.latest_epoch() == 5
    rows = read_rows(open_store(cwa.sinks[0].path), "parquet")
    assert Counter((r["key"], r["average"]) for r in rows) == cwa_expected()
    state = spark.read.parquet(rt.repo.latest_checkpoint().result.state.uri).collect()
    assert {r["key"]: r["_s_sum"].asDict() for r in state} == {
        1: {"count": 1, "sum": 2},
        2: {"count": 1, "sum": 30},
    }


@pytest.mark.parametrize("point", _params(set()))
def test_every_state_kind_after_a_crash(spark: Any, kinds: Any, point: str) -> None:
    spec, expected = kinds
    _crash(spec.origin, point, 3, {})
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.latest_epoch() == 11
    got = kinds_rows(spec)
    assert got == expected, (got - expected, expected - got)
