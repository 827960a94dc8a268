"""A backfill in a real Airflow: one epoch per run, in turn (issue #7 part 4).

``POST /api/v2/backfills`` over three daily intervals with the backfill's own
``max_active_runs`` = 3 (Airflow applies it independently of the DAG's): the three runs start
together, but a run whose next epoch was planned by another run still in flight waits
(``up_for_reschedule``) until that run ends. The result: three epochs, each committed by a
different backfill run, reading distinct input, and output equal to the reference.

Slow (a whole Airflow plus three spark-submits): make chaos.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.spec import parse_spec

from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

pytestmark = pytest.mark.slow

# five epochs of input: three for the backfill, one for the time run the scheduler makes when
# the DAG appears (catchup is off: at most one), one for a run the input watcher may ask for
# before the backfill's runs exist (docs/airflow.md#data-aware-runs)
FILES = render_click_files(files=10, events_per_file=60, seed=41)
NAME = "backfill_clicks"
DAG_ID = f"sluice__{NAME}"


def test_a_backfill_makes_one_epoch_per_run_in_turn(
    airflow_server_factory: Any, local_workspace: Any, tmp_path: Path
) -> None:
    from tests.fixtures.airflow import wait_for

    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace, name=NAME)
    body["source"]["max_files_per_epoch"] = 2
    body["checkpoint"]["interval"] = "1d"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{NAME}.yaml").write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    server = airflow_server_factory(pipelines)
    wait_for(f"{DAG_ID} to be parsed", lambda: server.api("GET", f"/dags/{DAG_ID}").ok, 180)

    r = server.api(
        "POST",
        "/backfills",
        json={
            "dag_id": DAG_ID,
            "from_date": "2026-01-02T00:00:00Z",
            "to_date": "2026-01-04T00:00:00Z",
            "max_active_runs": 3,
        },
    )
    assert r.status_code == 200, r.text

    def backfill_runs() -> list[dict[str, Any]]:
        found = server.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100})
        found.raise_for_status()
        return [d for d in found.json()["dag_runs"] if d["run_type"] == "backfill"]

    def all_done() -> list[dict[str, Any]] | None:
        runs = backfill_runs()
        done = len(runs) == 3 and all(d["state"] in ("success", "failed") for d in runs)
        return runs if done else None

    runs = wait_for("the three backfill runs to finish", all_done, 900, poll=5)
    assert sorted(d["state"] for d in runs) == ["success"] * 3, server.logs()
    backfill_ids = {d["dag_run_id"] for d in runs}

    rt = runtime(spec)
    committed = [rt.repo.checkpoint(e) for e in range(1, rt.repo.latest_epoch() + 1)]
    assert all(c is not None for c in committed)
    by_backfill = [c for c in committed if c is not None and c.run_id in backfill_ids]
    # every backfill run committed its own epoch (a scheduled or watcher run may have taken more)
    assert len(by_backfill) == 3 and {c.run_id for c in by_backfill} == backfill_ids
    read: list[str] = []
    for c in committed:
        assert c is not None and c.result.stats.input_units == 2
        read += c.plan.source_range["files"]
    assert read == [k for k, _ in FILES][: len(read)]  # in order, each file once
    reference = click_reference([f for f in FILES if f[0] in read])
    results = committed_rows(spec, "out")
    assert compare_rows(results, reference.emitted, keys=["user", "window_start"]) == []
