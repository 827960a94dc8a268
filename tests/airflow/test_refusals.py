"""A refused run request fails ``plan`` with one line and is kept for the monitor.

The one line in a real task log (no traceback) is checked by tests/airflow/test_server.py;
here: the line, the record in the checkpoint store, and that Airflow's retry policy of
``plan`` fails it without retries while other errors keep the spec's retries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.definitions.retry_policy import RetryAction
from sluice.airflow.tasks import PLAN_RETRY_POLICY, RunRefused, plan_task
from sluice.demo import render_click_files
from sluice.spec import parse_spec

from tests.fixtures.pipelines import click_spec_dict, runtime


def test_a_refused_request_is_one_line_recorded_for_the_monitor(
    local_workspace: Any, tmp_path: Path
) -> None:
    local_workspace.put_files(render_click_files(files=1, events_per_file=5, seed=3))
    body = click_spec_dict(local_workspace, name="refused")
    spec_file = tmp_path / "refused.yaml"
    spec_file.write_text(yaml.safe_dump(body))
    rt = runtime(parse_spec(body))
    conf = {"restore_from": "checkpoint", "epoch": 99, "max_records": 10}

    with pytest.raises(RunRefused) as refused:
        plan_task(str(spec_file), conf, "manual__refused")
    line = refused.value.message
    assert str(refused.value) == line and "\n" not in line
    assert line.startswith("pipeline 'refused': run request refused, nothing was run: ")
    assert "epoch: no committed checkpoint 99" in line and "nothing is committed yet" in line
    assert refused.value.code == "run request refused"  # what the task runner logs
    assert refused.value.__cause__ is None and refused.value.__suppress_context__

    last = rt.repo.last_refusal()
    assert last is not None and (last["run_id"], last["message"]) == ("manual__refused", line)
    assert last["at_us"] > 0
    assert rt.repo.plan(1) is None  # nothing of the run was written

    # a second refusal replaces the first: the monitor shows the last one
    with pytest.raises(RunRefused):
        plan_task(str(spec_file), {"restore_from": "savepoint", "savepoint": "x"}, "manual__2")
    last = rt.repo.last_refusal()
    assert last is not None and last["run_id"] == "manual__2"
    assert "no savepoint 'x'" in last["message"]


def test_plan_fails_a_refusal_at_once_and_retries_anything_else() -> None:
    def action(exc: BaseException) -> RetryAction:
        return PLAN_RETRY_POLICY.evaluate(exception=exc, try_number=1, max_tries=4).action

    assert action(RunRefused("pipeline 'p': run request refused")) == RetryAction.FAIL
    assert action(OSError("storage unreachable")) == RetryAction.DEFAULT
