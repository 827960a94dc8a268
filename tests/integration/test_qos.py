"""qos 0, 1 and 2 without crashes: the same committed output, published at the step each
level promises (qos 1 before the checkpoint, qos 0 right after it, qos 2 at commit)."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.demo import render_click_files
from sluice.protocol import commit_epoch, plan_epoch, process_epoch, run_until_drained

from tests.fixtures.pipelines import (
    click_reference,
    click_spec,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

FILES = render_click_files(files=4, events_per_file=60, seed=11)
REFERENCE = click_reference(FILES)


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_every_qos_level_gives_the_reference_without_crashes(
    spark: Any, local_workspace: Any, qos: int
) -> None:
    local_workspace.put_files(FILES)
    spec = click_spec(
        local_workspace, qos=qos, source={**_source(local_workspace), "max_files_per_epoch": 2}
    )
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark)
    assert [o.checkpoint.epoch for o in outcomes] == [1, 2]
    assert (
        compare_rows(committed_rows(spec, "out"), REFERENCE.emitted, keys=["user", "window_start"])
        == []
    )
    assert len(committed_rows(spec, "late_records")) == len(REFERENCE.late)
    assert len(committed_rows(spec, "dead_letters")) == len(REFERENCE.dead)
    assert staged_keys(spec) == []
    markers = [rt.repo.sinks_committed(e) for e in (1, 2)]
    assert [m.output for m in markers if m] == [
        {0: "committed", 1: "written", 2: "committed"}[qos]
    ] * 2


@pytest.mark.parametrize(("qos", "visible_after"), [(2, "commit"), (1, "process"), (0, "process")])
def test_output_becomes_visible_at_the_step_the_level_promises(
    spark: Any, local_workspace: Any, qos: int, visible_after: str
) -> None:
    local_workspace.put_files(FILES)
    spec = click_spec(local_workspace, qos=qos)
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    record = process_epoch(rt, spark, plan.epoch)
    after_process = len(committed_rows(spec, "out"))
    checkpoint_after_process = rt.repo.checkpoint(plan.epoch) is not None
    commit_epoch(rt, plan.epoch, record.attempt)
    after_commit = len(committed_rows(spec, "out"))
    assert after_commit == len(REFERENCE.emitted)
    assert after_process == (after_commit if visible_after == "process" else 0)
    # qos 0 commits the offsets before writing the output; 1 and 2 leave it to the commit step
    assert checkpoint_after_process == (qos == 0)


def _source(ws: Any) -> dict[str, Any]:
    from tests.fixtures.pipelines import click_spec_dict

    return dict(click_spec_dict(ws)["source"])
