"""Data-aware runs (issue #26): a DAG run when the input has something new, none when idle.

:func:`work_waiting` (what the input watcher asks) on a real checkpoint store and source.

make test, on the Airflow of tests/airflow/test_server.py (:func:`add_idle_and_bad_specs`,
:func:`check_idle_and_bad`): a pipeline whose input stays empty, watched every 5 s for the
whole of that test, has one run (the daily time run made at DAG creation, skipped) and no
epoch; a bad spec next to the good ones is a placeholder DAG, with no import error.

make chaos (its own Airflow and two cold epochs, ~5 min): with no input, the creation-time
run is skipped and no other run or epoch follows; two files arriving make asset-triggered
runs that commit two epochs in turn (one file each), the second right after the first; then
the DAG is idle again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.airflow.triggers import work_waiting
from sluice.demo import render_click_files
from sluice.protocol import plan_epoch
from sluice.spec import parse_spec

from tests.fixtures.airflow import REPO, wait_for
from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

FILES = render_click_files(files=2, events_per_file=40, seed=53)
NAME = "arrivals"
DAG_ID = f"sluice__{NAME}"
POLL_S = 5
IDLE_POLLS = 4  # how many of the watcher's looks an idle pipeline is watched for


def test_work_waiting_is_unplanned_input_or_an_abandoned_plan(local_workspace: Any) -> None:
    rt = runtime(parse_spec(click_spec_dict(local_workspace, name=NAME)))
    assert work_waiting(rt) is None  # no input folder yet
    local_workspace.put_files(FILES)
    assert work_waiting(rt) == f"2 new input units at {rt.source.location}"
    plan = plan_epoch(rt)  # a run planned epoch 1, then ended without committing
    assert plan is not None
    assert work_waiting(rt) == (
        "epoch 1 is planned but not committed (its run ended); a new run replays it"
    )


def test_each_source_of_a_join_is_watched_on_its_own(local_workspace: Any) -> None:
    """A join pipeline's input assets: one per source, each watcher counting only its own
    source's new input (a run comes when any of them has some)."""
    from tests.joins.data import make_input
    from tests.joins.pipelines import join_spec_dict

    rt = runtime(parse_spec(join_spec_dict(local_workspace, "window")))
    auctions = rt.source.sources["auctions"]
    assert work_waiting(rt, "persons") is None and work_waiting(rt, "auctions") is None
    local_workspace.put_files(make_input(files=2).auctions[:1], "auctions")
    assert work_waiting(rt, "persons") is None
    assert work_waiting(rt, "auctions") == f"1 new input unit at {auctions.location}"
    assert work_waiting(rt) == f"1 new input unit at {rt.source.location}"  # the whole


def add_idle_and_bad_specs(pipelines: Path, root: Path) -> Any:
    """Next to a test's pipelines: ``idle`` (its input stays empty, watched every
    :data:`POLL_S`) and ``typo.yaml`` (a misspelt field); the runtime of ``idle``."""
    body = click_spec_dict(Workspace("local", root.as_uri()), name="idle")
    body["checkpoint"]["interval"] = f"{POLL_S}s"
    (pipelines / "idle.yaml").write_text(yaml.safe_dump(body))
    demo = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text()
    (pipelines / "typo.yaml").write_text(demo.replace("name: clicks_per_minute", "name: typo")
                                         .replace("window:", "windw:"))  # fmt: skip
    return runtime(parse_spec(body))


def check_idle_and_bad(server: Any, idle: Any) -> None:
    """The bad spec is a placeholder DAG saying what to fix (no import error); the idle
    pipeline, watched all along, has had one run (made at DAG creation, skipped), no epoch."""
    typo = server.api("GET", "/dags/sluice__typo").json()
    assert "spec-error" in [t["name"] for t in typo["tags"]], typo
    assert "windw: unknown field" in typo["description"]
    assert server.api("GET", "/importErrors").json()["total_entries"] == 0
    assert _watched(server, "sluice__idle")
    [first] = wait_for("the idle pipeline's first run to end",
                       lambda: _ended(_runs(server, "sluice__idle")), 120, poll=2)  # fmt: skip
    assert (first["run_type"], first["state"]) == ("scheduled", "success")
    assert server.task_instances("sluice__idle", first["dag_run_id"])["plan"]["state"] == "skipped"
    assert idle.repo.latest_epoch() == 0 and idle.repo.plan(1) is None


def _runs(server: Any, dag: str = DAG_ID) -> list[dict[str, Any]]:
    r = server.api("GET", f"/dags/{dag}/dagRuns", params={"limit": 100})
    r.raise_for_status()
    return sorted(r.json()["dag_runs"], key=lambda d: d["run_after"])


def _ended(runs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return runs if runs and all(d["state"] in ("success", "failed") for d in runs) else None


def _watched(server: Any, dag: str) -> list[Any]:
    """The watchers of the DAG's input asset (registered once the DAG is active)."""
    found = server.api("GET", "/assets", params={"name_pattern": f"{dag}__input"}).json()
    return [w for a in found["assets"] for w in a["watchers"]]


def _stays_idle(server: Any, runs: int, rt: Any, epochs: int) -> None:
    """No new run and no new epoch while the watcher looks ``IDLE_POLLS`` times."""
    deadline = time.monotonic() + IDLE_POLLS * POLL_S
    while time.monotonic() < deadline:
        assert len(_runs(server)) == runs, _runs(server)
        assert rt.repo.latest_epoch() == epochs
        time.sleep(1)


@pytest.mark.slow  # its own Airflow and two cold epochs (~5 min); make test: check_idle_and_bad
def test_runs_come_when_data_arrives(
    airflow_server_factory: Any, local_workspace: Any, tmp_path: Path
) -> None:
    body = click_spec_dict(local_workspace, name=NAME)
    body["source"]["max_files_per_epoch"] = 1
    body["checkpoint"]["interval"] = f"{POLL_S}s"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{NAME}.yaml").write_text(yaml.safe_dump(body))
    rt = runtime(parse_spec(body))
    server = airflow_server_factory(pipelines)
    wait_for(f"{DAG_ID} to be parsed", lambda: server.api("GET", f"/dags/{DAG_ID}").ok, 180)

    # no input: the one time run made at DAG creation is skipped, nothing else happens
    [first] = wait_for("the DAG's first run to end", lambda: _ended(_runs(server)), 300, poll=2)
    assert (first["run_type"], first["state"]) == ("scheduled", "success")
    plan = server.task_instances(DAG_ID, first["dag_run_id"])["plan"]
    assert plan["state"] == "skipped"
    wait_for("the input watcher to be registered", lambda: _watched(server, DAG_ID), 120)
    _stays_idle(server, 1, rt, 0)

    # two files arrive: asset-triggered runs commit one epoch each, in turn
    local_workspace.put_files(FILES)

    def two_epochs() -> bool:
        return rt.repo.latest_epoch() == 2 and not any(
            d["state"] in ("queued", "running") for d in _runs(server)
        )

    wait_for("two epochs to commit", two_epochs, 600, poll=2)
    runs = _runs(server)
    by_run = {d["dag_run_id"]: d for d in runs}
    for epoch in (1, 2):
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None and checkpoint.result.stats.input_units == 1
        run = by_run[str(checkpoint.run_id)]
        assert (run["run_type"], run["state"]) == ("asset_triggered", "success"), runs
    assert len(runs) == 3, runs  # the first run and one per epoch: no empty run

    # caught up: idle again
    _stays_idle(server, 3, rt, 2)
