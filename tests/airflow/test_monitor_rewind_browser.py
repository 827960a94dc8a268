"""Safe rewinds in the monitor, in headless Chromium against a real Airflow API server (issue
#26): an epoch of 0 is refused in the form and creates no run; a restore shows what it
retracts and triggers only once confirmed; a retracted savepoint is not offered; a savepoint
is deleted after a confirmation.

Only the API server runs (with the plugin): the DAGs are written to its metadata DB by
``airflow dags reserialize``, so a trigger creates a real queued run, which no scheduler
picks up; the checkpoint histories are written with the protocol's own functions
(tests/airflow/test_monitor_actions.py), so no Spark runs either. About 40 s on 2 cores.
Screenshots go to ``$SLUICE_TEST_ARTIFACTS/monitor-rewinds`` (default
``.artifacts/monitor-rewinds``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from sluice.protocol import Runtime

from tests.airflow.test_monitor_actions import commit_epoch_rows, history
from tests.airflow.test_monitor_ui import signed_in
from tests.fixtures.airflow import (
    PASSWORDS,
    REPO,
    START_TIMEOUT_S,
    AirflowServer,
    airflow_env,
    copy_db,
    free_port,
    wait_for,
)

ARTIFACTS = Path(os.environ.get("SLUICE_TEST_ARTIFACTS") or REPO / ".artifacts") / "monitor-rewinds"
PIPELINES = ("refuse", "rewind", "offer", "delete")


@dataclass
class Monitor:
    server: AirflowServer
    runtimes: dict[str, Runtime]

    def page_url(self, name: str) -> str:
        return f"{self.server.url}/sluice/pipelines/sluice__{name}"

    def runs(self, name: str) -> list[dict[str, Any]]:
        answer = self.server.api("GET", f"/dags/sluice__{name}/dagRuns")
        answer.raise_for_status()
        return list(answer.json()["dag_runs"])


@pytest.fixture(scope="module")
def monitor(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitor]:
    """The API server alone over pipelines with histories (``history``: epochs 1..4,
    savepoints ``early`` at 2 and ``late`` at 3, a rewind to 2 committed as epoch 5)."""
    root = tmp_path_factory.mktemp("rewinds")
    pipelines = root / "pipelines"
    pipelines.mkdir()
    runtimes = {name: history(root, pipelines, name=name) for name in PIPELINES}
    home = root / "airflow"
    home.mkdir()
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))
    copy_db(airflow_db / "airflow.db", home / "airflow.db")  # migrated once a session
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = airflow_env(
        home,
        SLUICE_PIPELINES_DIR=str(pipelines),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__API__BASE_URL=url,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__HOST="127.0.0.1",
    )
    subprocess.run([sys.executable, "-m", "airflow", "dags", "reserialize"], env=env,
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    server = AirflowServer(home, url)
    log = (home / "api-server.log").open("wb")
    server.procs["api-server"] = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for("the Airflow API server", lambda: requests.get(f"{url}/api/v2/monitor/health",
                 timeout=10).ok, START_TIMEOUT_S)  # fmt: skip
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        yield Monitor(server, runtimes)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(monitor: Monitor) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        page = signed_in(p, monitor.server)
        yield page
        page.context.browser.close()


def test_an_epoch_of_0_is_refused_in_the_form_and_no_run_is_created(
    monitor: Monitor, browser: Any
) -> None:
    page = browser
    page.goto(monitor.page_url("refuse"))
    field = page.locator("#restore-checkpoint input[name=epoch]")
    assert (field.get_attribute("min"), field.get_attribute("max")) == ("1", "5")

    # The browser itself refuses 0 (below min): nothing is sent.
    field.fill("0")
    page.click("#restore-checkpoint button")
    assert field.evaluate("e => e.validity.rangeUnderflow") is True
    assert page.url == monitor.page_url("refuse")

    # Sent anyway (a browser that does not check, a hand-made request): the server refuses it
    # in the form, with the reason, and triggers nothing.
    field.evaluate("e => e.removeAttribute('min')")
    page.click("#restore-checkpoint button")
    error = page.locator("#form-error")
    assert error.inner_text() == "not triggered: epoch: 0 is not a whole number >= 1"
    assert page.locator("#restore-checkpoint input[name=epoch]").input_value() == "0"
    page.screenshot(path=str(ARTIFACTS / "1-epoch-0-refused.png"), full_page=True)

    # A retracted epoch is in range but not restorable: refused the same way.
    page.fill("#restore-checkpoint input[name=epoch]", "3")
    page.click("#restore-checkpoint button")
    assert (
        page.locator("#form-error")
        .inner_text()
        .startswith(
            "not triggered: epoch: the output of epoch 3 was retracted by the rewind that epoch 5 "
            "started"
        )
    )
    # A taken savepoint name: refused before triggering.
    page.goto(monitor.page_url("refuse"))
    assert page.locator("#capture").inner_text().startswith("captures epoch 6")
    page.fill("#take-savepoint input[name=name]", "early")
    page.click("#take-savepoint button")
    assert (
        page.locator("#form-error")
        .inner_text()
        .startswith("not triggered: take_savepoint: 'early' already exists (epoch 2)")
    )
    page.screenshot(path=str(ARTIFACTS / "2-savepoint-name-taken.png"), full_page=True)
    assert monitor.runs("refuse") == []


def test_a_rewind_shows_what_it_retracts_and_triggers_once_confirmed(
    monitor: Monitor, browser: Any
) -> None:
    page = browser
    rt = monitor.runtimes["rewind"]
    commit_epoch_rows(rt, (60, 6, 0))  # epoch 6 after the rewind of epoch 5
    page.goto(monitor.page_url("rewind"))
    page.fill("#restore-checkpoint input[name=epoch]", "2")
    page.click("#restore-checkpoint button")

    summary = page.locator("#confirm-summary").inner_text()
    assert "Epoch 7 will continue from checkpoint 2" in summary
    assert "retracts the output of 2 committed epochs (5, 6)" in summary
    rows = page.locator("#retracted tr[data-epoch]")
    assert [rows.nth(i).get_attribute("data-epoch") for i in range(rows.count())] == ["5", "6"]
    total = page.locator("#retracted-total")
    assert total.locator('[data-sink="out"]').inner_text() == "65"  # 5 + 60 rows
    assert total.locator('[data-sink="late_records"]').inner_text() == "6"
    page.screenshot(path=str(ARTIFACTS / "3-rewind-confirmation.png"), full_page=True)
    assert monitor.runs("rewind") == []  # asking triggers nothing

    page.click("#confirm button")
    message = page.locator("#message").inner_text()
    assert message.startswith("triggered run "), message
    assert message.endswith(": epoch 7 continues from checkpoint 2 and retracts epochs 5..6")
    [run] = monitor.runs("rewind")
    assert run["conf"] == {"restore_from": "checkpoint", "epoch": 2, "expect_latest": 6}
    assert run["dag_run_id"] in message and run["triggering_user_name"] == "admin"
    page.screenshot(path=str(ARTIFACTS / "4-rewind-triggered.png"), full_page=True)


def test_a_retracted_savepoint_is_listed_but_not_offered(monitor: Monitor, browser: Any) -> None:
    page = browser
    page.goto(monitor.page_url("offer"))
    options = page.locator("#restore-savepoint select option")
    assert [options.nth(i).get_attribute("value") for i in range(options.count())] == ["early"]
    late = page.locator('tr[data-savepoint="late"]')
    assert "retracted" in late.inner_text() and late.get_attribute("class") == "gone"
    assert late.evaluate("e => getComputedStyle(e.cells[0]).color") == "rgb(154, 165, 177)"
    page.locator("#savepoints").screenshot(path=str(ARTIFACTS / "5-retracted-savepoint.png"))


def test_a_savepoint_is_deleted_from_the_page_after_a_confirmation(
    monitor: Monitor, browser: Any
) -> None:
    page = browser
    rt = monitor.runtimes["delete"]
    page.goto(monitor.page_url("delete"))
    page.click('tr[data-savepoint="early"] form.delete button')
    assert "Savepoint early points to epoch 2" in page.locator("#confirm-summary").inner_text()
    page.screenshot(path=str(ARTIFACTS / "6-delete-confirmation.png"), full_page=True)
    assert rt.repo.savepoint("early") is not None

    page.click("#confirm button")
    assert page.locator("#message").inner_text() == "deleted savepoint 'early' (epoch 2)"
    assert rt.repo.savepoint("early") is None
    assert page.locator('tr[data-savepoint="early"]').count() == 0
    assert page.locator("#restore-savepoint").count() == 0  # nothing left to offer
    page.screenshot(path=str(ARTIFACTS / "7-deleted.png"), full_page=True)
    assert monitor.runs("delete") == []
