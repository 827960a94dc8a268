"""Split invariance: the committed output is a pure function of the input and the spec.

The same generated input (out of order, late and malformed records) runs as one epoch, one
file per epoch, and a random split; each run must equal an independent reference computed
over the whole input in one go (tests/reference.py, plain Python), with no duplicates.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained

from tests.fixtures.pipelines import (
    click_reference,
    click_spec,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

FILES = render_click_files(files=8, events_per_file=120, seed=11)
REFERENCE = click_reference(FILES)
SPLITS: dict[str, Any] = {
    "one_epoch": None,
    "file_per_epoch": 1,
    "random": (lambda rng: lambda _i: rng.randint(1, 4))(random.Random(5)),
}


# On local directories, tests/integration/test_windows.py shows the same for every window type
# (tumbling included, with partitions); here the S3 backend is the point. make chaos runs local.
BACKENDS = [pytest.param("local", marks=pytest.mark.slow), "s3"]


@pytest.mark.parametrize("workspace", BACKENDS, indirect=True)
@pytest.mark.parametrize("split", list(SPLITS))
def test_output_equals_reference_for_any_split(spark: Any, workspace: Any, split: str) -> None:
    workspace.put_files(FILES)
    spec = click_spec(workspace)
    cap = SPLITS[split]
    outcomes = run_until_drained(
        runtime(spec), spark, max_units=cap if split != "one_epoch" else 100
    )

    if split == "file_per_epoch":
        assert len(outcomes) == len(FILES)
    for outcome in outcomes:  # counts reconcile per epoch
        s = outcome.checkpoint.result.stats
        assert s.records_read == s.accepted + s.late + s.dead, outcome.checkpoint.epoch

    results = committed_rows(spec, "out")
    assert compare_rows(results, REFERENCE.emitted, keys=["user", "window_start"]) == []
    late = sorted(
        (r["source_file"], r["source_line"]) for r in committed_rows(spec, "late_records")
    )
    assert late == sorted(REFERENCE.late)
    dead = sorted(
        (r["file"], r["line"], r["reason_code"]) for r in committed_rows(spec, "dead_letters")
    )
    assert dead == sorted(REFERENCE.dead)
    assert staged_keys(spec) == []
    total_open = outcomes[-1].checkpoint.result.stats.windows_open
    assert total_open == len(REFERENCE.open_windows)
