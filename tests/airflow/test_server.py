"""End to end against a real Airflow (scheduler, DAG processor, triggerer, API server).

Runs are triggered through the REST API with conf, as the UI's trigger form does. A fault
(SIGKILL) injected in ``commit`` of epoch 2 makes Airflow retry only ``commit``, which
finishes the commit without reprocessing; the output is still exactly the reference. Bad conf
is refused (at trigger time when its shape is wrong, by ``plan`` when it names a checkpoint
that does not exist) and writes nothing. The checkpoint monitor's pages show the history in
headless Chromium and refuse requests without a session or permission. In make chaos: a
rewind triggered with ``restore_from=checkpoint`` of epoch 1 replays the rest, and the output
is the reference again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.spec import parse_spec

from tests.airflow.test_data_aware import add_idle_and_bad_specs, check_idle_and_bad
from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=60, seed=31)
REFERENCE = click_reference(FILES)
NAME = "e2e_clicks"
DAG_ID = f"sluice__{NAME}"
FAULT_EPOCH = 2


def test_triggered_runs_with_a_commit_fault_are_exactly_once(
    airflow_server_factory: Any, local_workspace: Any, tmp_path: Path
) -> None:
    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace, name=NAME)
    body["source"]["max_files_per_epoch"] = 2
    body["checkpoint"]["interval"] = "1d"  # the test triggers; at most one scheduled run
    body["restart"] = {"attempts": 2, "delay": "1s", "max_delay": "2s", "multiplier": 1}
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{NAME}.yaml").write_text(yaml.safe_dump(body))
    idle = add_idle_and_bad_specs(pipelines, tmp_path / "idle")  # checked at the end
    spec = parse_spec(body)
    marker = tmp_path / "fault-fired"
    server = airflow_server_factory(
        pipelines,
        SLUICE_FAULT="commit.after_checkpoint",
        SLUICE_FAULT_EPOCH=str(FAULT_EPOCH),
        SLUICE_FAULT_ONCE=str(marker),
    )
    from tests.fixtures.airflow import wait_for

    wait_for(f"{DAG_ID} to be parsed", lambda: server.api("GET", f"/dags/{DAG_ID}").ok, 180)

    # A malformed conf is refused at trigger time, with the field named.
    bad = server.trigger(DAG_ID, {"restore_from": "offsets", "offsets": "{not json"})
    assert bad.status_code == 400, bad.text
    assert "offsets" in bad.text

    rt = runtime(spec)
    runs = []
    for conf in ({"max_records": 100}, {}, {"restore_from": "latest"}, {}):
        r = server.trigger(DAG_ID, conf)
        assert r.status_code == 200, r.text
        runs.append(r.json()["dag_run_id"])
        assert server.wait_run(DAG_ID, runs[-1]) == "success", server.logs()
    assert marker.exists(), "the commit fault never fired"
    # Every file read exactly once over the epochs (a scheduled run may have taken one).
    checkpoints = [rt.repo.checkpoint(e) for e in range(1, rt.repo.latest_epoch() + 1)]
    assert all(c is not None for c in checkpoints)
    assert sum(c.result.stats.input_units for c in checkpoints if c) == len(FILES)
    # max_records=100 took one 60-record file although the spec allows two per epoch.
    [capped] = [c for c in checkpoints if c and c.run_id == runs[0]]
    assert capped.result.stats.input_units == 1

    # The run that committed epoch 2 retried only commit, and that retry did not reprocess.
    c2 = rt.repo.checkpoint(FAULT_EPOCH)
    assert c2 is not None and c2.run_id is not None
    tis = server.task_instances(DAG_ID, c2.run_id)
    tries = {t: tis[t]["try_number"] for t in ("plan", "process", "commit")}
    assert tries == {"plan": 1, "process": 1, "commit": 2}, tries
    assert len(rt.repo.attempts(FAULT_EPOCH)) == 1

    results = committed_rows(spec, "out")
    assert compare_rows(results, REFERENCE.emitted, keys=["user", "window_start"]) == []
    dead = [(r["file"], r["line"], r["reason_code"]) for r in committed_rows(spec, "dead_letters")]
    assert sorted(dead) == sorted(REFERENCE.dead)

    # An unknown checkpoint fails in plan, without retries, and writes nothing.
    before = sorted((i.key, i.size) for i in rt.repo.store.list())
    r = server.trigger(DAG_ID, {"restore_from": "checkpoint", "epoch": 99})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    assert server.wait_run(DAG_ID, run_id) == "failed"
    plan = server.task_instances(DAG_ID, run_id)["plan"]
    assert (plan["state"], plan["try_number"]) == ("failed", 1)
    log = server.task_log(DAG_ID, run_id, "plan", 1)
    latest = rt.repo.latest_epoch()
    assert "no committed checkpoint 99" in log and f"committed epochs are 1..{latest}" in log
    # one line, no traceback (an expected refusal), kept for the monitor
    [line] = [entry for entry in log.splitlines() if "no committed checkpoint 99" in entry]
    assert "run request refused" in line and "error_detail" not in log, log
    refusal = rt.repo.last_refusal()
    assert refusal is not None and refusal["run_id"] == run_id
    after = [(i.key, i.size) for i in rt.repo.store.list() if not i.key.startswith("refusals/")]
    assert sorted(after) == before

    # take_savepoint with no new input: plan keeps the latest checkpoint under that name and
    # skips the rest of the run
    r = server.trigger(DAG_ID, {"take_savepoint": "before-v2"})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    assert server.wait_run(DAG_ID, run_id) == "success", server.logs()
    saved = rt.repo.savepoint("before-v2")
    assert saved is not None and saved.epoch == latest and run_id in saved.note
    assert server.task_instances(DAG_ID, run_id)["process"]["state"] == "skipped"

    # The checkpoint monitor (plugins/): refusals, and the history in a real browser.
    from playwright.sync_api import sync_playwright

    from tests.airflow.test_monitor_ui import ARTIFACTS, history_matches, refusals, signed_in

    refusals(server, f"{server.url}/sluice", DAG_ID)
    check_idle_and_bad(server, idle)  # no input: no run but the creation-time one, no epoch
    with sync_playwright() as p:
        page = signed_in(p, server)
        page.goto(f"{server.url}/sluice/pipelines/{DAG_ID}")
        history_matches(page, rt, rt.repo.committed_epochs())
        assert page.locator('tr[data-savepoint="before-v2"]').count() == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "e2e-pipeline.png"), full_page=True)
        page.context.browser.close()


@pytest.mark.slow
def test_a_rewind_triggered_through_the_api_ends_in_the_reference(
    airflow_server_factory: Any, local_workspace: Any, tmp_path: Path
) -> None:
    from tests.fixtures.airflow import wait_for

    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace, name=NAME)
    body["source"]["max_files_per_epoch"] = 2
    body["checkpoint"]["interval"] = "1d"  # the test triggers; at most one scheduled run
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / f"{NAME}.yaml").write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    server = airflow_server_factory(pipelines)
    wait_for(f"{DAG_ID} to be parsed", lambda: server.api("GET", f"/dags/{DAG_ID}").ok, 180)
    rt = runtime(spec)
    for _ in range(len(FILES)):
        r = server.trigger(DAG_ID, {})
        assert server.wait_run(DAG_ID, r.json()["dag_run_id"]) == "success", server.logs()
        if server.task_instances(DAG_ID, r.json()["dag_run_id"])["process"]["state"] == "skipped":
            break
    latest = rt.repo.latest_epoch()
    assert latest >= 3

    # A rewind from the trigger form: back to checkpoint 1, then the rest of the input. The
    # rewind's commit retracted what epochs 2.. wrote, so the output is exactly the reference.
    r = server.trigger(DAG_ID, {"restore_from": "checkpoint", "epoch": 1})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    assert server.wait_run(DAG_ID, run_id) == "success", server.logs()
    rewind = rt.repo.checkpoint(latest + 1)
    assert rewind is not None and rewind.run_id == run_id
    assert rewind.plan.restored_from is not None
    assert rewind.plan.restored_from.retract_after == 1
    assert list(rewind.plan.restored_from.rewound) == list(range(2, latest + 1))
    assert rewind.plan.start_offset == rt.repo.checkpoint(1).end_offset  # type: ignore[union-attr]
    for _ in range(len(FILES)):
        r = server.trigger(DAG_ID, {})
        assert server.wait_run(DAG_ID, r.json()["dag_run_id"]) == "success", server.logs()
        if server.task_instances(DAG_ID, r.json()["dag_run_id"])["process"]["state"] == "skipped":
            break
    results = committed_rows(spec, "out")
    assert compare_rows(results, REFERENCE.emitted, keys=["user", "window_start"]) == []
    dead = [(r["file"], r["line"], r["reason_code"]) for r in committed_rows(spec, "dead_letters")]
    assert sorted(dead) == sorted(REFERENCE.dead)
