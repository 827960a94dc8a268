"""The monitor tells the truth in Chromium, against the real Airflow API server (issue #26):
a pipeline whose attempts fail shows ``failing`` and the stored error; one with no input
waiting shows ``caught up``; the Checkpoints tab of a DAG that is not a Sluice pipeline shows
a styled message (no raw JSON, no server path); ``/sluice`` and ``/plugin/sluice`` work with or
without the trailing slash; no page is wider than a 1280 px window.

One Airflow for the module, and only what the pages need: the API server (with plugins/) and a
DAG processor for a DAGs folder holding the Sluice DAG file and one plain DAG,
``hello_world``. No scheduler: nothing runs. The histories are written into checkpoint
storage by :class:`History` (the protocol's steps on a clock the test moves,
tests/airflow/test_monitor_app.py). Screenshots go to ``$SLUICE_TEST_ARTIFACTS/monitor-truth``
(default ``.artifacts/monitor-truth``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.test_monitor_app import NAN_ERROR, History
from tests.airflow.test_monitor_ui import CHROMIUM
from tests.fixtures.airflow import REPO, start_airflow, wait_for

ARTIFACTS = Path(os.environ.get("SLUICE_TEST_ARTIFACTS") or REPO / ".artifacts") / "monitor-truth"
WIDTH = 1280
# A stored error as Spark writes them: one long token (a path) that must wrap, not overflow.
LONG_ERROR = f"{NAN_ERROR} in file:///data/in/{'clicks-2026-11-26-' * 12}part-00007.jsonl"
HELLO_DAG = """
from airflow.sdk import dag, task


@dag(dag_id="hello_world", schedule=None)
def hello_world():
    @task
    def hello():
        print("hello")

    hello()


hello_world()
"""
RED, GREEN, ERROR_BACKGROUND = "rgb(197, 48, 48)", "rgb(47, 133, 90)", "rgb(255, 245, 245)"


@dataclass
class Monitor:
    server: Any
    root: Path
    pipelines: Path
    page: Any  # a signed-in Chromium page, 1280 px wide

    @property
    def base(self) -> str:
        return f"{self.server.url}/sluice"

    def no_overflow(self, frame: Any = None) -> None:
        width = (frame or self.page).evaluate("document.documentElement.scrollWidth")
        assert width <= WIDTH, f"{width} px wide in a {WIDTH} px window"


@pytest.fixture(scope="module")
def monitor(tmp_path_factory: pytest.TempPathFactory, postgres_server: Any) -> Iterator[Monitor]:
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("monitor-browser")
    dags, pipelines = root / "dags", root / "pipelines"
    dags.mkdir()
    pipelines.mkdir()
    (dags / "hello_world.py").write_text(HELLO_DAG)
    (dags / "sluice_pipelines.py").symlink_to(REPO / "dags" / "sluice_pipelines.py")
    db = postgres_server.create_database(f"airflow_{uuid.uuid4().hex[:12]}")
    server = start_airflow(
        root / "airflow", pipelines, db, services=("api-server", "dag-processor"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="3",  # specs written by the tests
    )  # fmt: skip
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"]
            )
            context = browser.new_context(viewport={"width": WIDTH, "height": 900})
            context.add_cookies([{"name": "_token", "value": server.token(), "url": server.url}])
            yield Monitor(server, root, pipelines, context.new_page())
            browser.close()
    finally:
        server.stop()


def test_a_pipeline_whose_attempts_fail_shows_failing_and_the_stored_error(
    monitor: Monitor,
) -> None:
    h = History(monitor.root, monitor.pipelines, "nan_fn", files=2)
    h.plan()
    h.start(1)  # killed while running: its record stays "started"
    h.now += 60
    h.fail(LONG_ERROR)
    page = monitor.page

    page.goto(f"{monitor.base}/pipelines/{h.dag}")
    pill = page.locator('[data-card="health"] .pill')
    assert pill.inner_text() == "failing"
    assert pill.evaluate("e => getComputedStyle(e).backgroundColor") == RED
    assert page.locator("#last-error .errtext").inner_text() == LONG_ERROR
    assert page.locator('#history tr[data-epoch="1"]').get_attribute("data-status") == "failed"
    monitor.no_overflow()
    page.screenshot(path=str(ARTIFACTS / "1-failing-pipeline.png"), full_page=True)

    page.goto(f"{monitor.base}/")
    row = page.locator('tr[data-pipeline="nan_fn"]')
    assert row.locator(".pill").inner_text() == "failing"
    assert "epoch 1 failed (1 failed attempt)" in row.inner_text()
    assert NAN_ERROR in row.locator(".errtext").inner_text()
    assert row.locator('td[data-col="failed"]').inner_text() == "1"
    monitor.no_overflow()
    page.screenshot(path=str(ARTIFACTS / "2-overview-failing.png"), full_page=True)

    # Airflow's retry starts: the epoch is in flight, and its page reloads itself.
    h.now = time.time()
    h.start(1)
    page.goto(f"{monitor.base}/pipelines/{h.dag}")
    assert page.locator("#live").count() == 1
    with page.expect_event("load", timeout=60_000):  # the page's own reload (every 10 s)
        pass
    assert page.locator('#history tr[data-epoch="1"]').get_attribute("data-status") == (
        "processing"
    )


def test_a_pipeline_with_no_input_waiting_is_caught_up(monitor: Monitor) -> None:
    h = History(monitor.root, monitor.pipelines, "quiet", files=3)
    for late, dead in ((2, 1), (3, 0), (1, 4)):
        h.commit(late=late, dead=dead, spark_s=3.0, wait_s=25.0)  # an hour ago, interval 1m
    page = monitor.page

    page.goto(f"{monitor.base}/pipelines/{h.dag}")
    pill = page.locator('[data-card="health"] .pill')
    assert pill.inner_text() == "caught up"
    assert pill.evaluate("e => getComputedStyle(e).backgroundColor") == GREEN
    assert page.locator('[data-card="lag"] b').inner_text() == "0"
    assert page.locator('[data-card="late / dead"] b').inner_text() == "6 / 5"
    assert page.locator("svg [data-axis=y]").all_text_contents() == [
        "records", "seconds", "rows", "seconds"]  # fmt: skip
    assert page.locator("#live").count() == 0  # nothing in flight: no refresh
    monitor.no_overflow()
    page.screenshot(path=str(ARTIFACTS / "3-caught-up.png"), full_page=True)

    # In the DAG's Checkpoints tab (an iframe narrower than the window): nothing overflows.
    server = monitor.server
    wait_for(f"{h.dag} to be parsed", lambda: server.api("GET", f"/dags/{h.dag}").ok, 180)
    page.goto(f"{server.url}/dags/{h.dag}/plugin/sluice_checkpoints")
    frame = page.frame_locator("iframe")
    frame.locator("#history").wait_for(timeout=60_000)
    assert frame.locator('[data-card="health"] .pill').inner_text() == "caught up"
    scroll, client = frame.locator("html").evaluate("e => [e.scrollWidth, e.clientWidth]")
    assert scroll <= client, f"{scroll} px of content in a {client} px tab"
    monitor.no_overflow()
    page.screenshot(path=str(ARTIFACTS / "4-tab-caught-up.png"))


def test_the_tab_of_a_dag_that_is_not_a_pipeline_shows_a_styled_message(
    monitor: Monitor,
) -> None:
    server, page = monitor.server, monitor.page
    wait_for("hello_world to be parsed", lambda: server.api("GET", "/dags/hello_world").ok, 180)

    page.goto(f"{server.url}/dags/hello_world/plugin/sluice_checkpoints")
    error = page.frame_locator("iframe").locator("#error")
    error.wait_for(timeout=60_000)
    text = error.inner_text()
    assert text.startswith("hello_world is not a Sluice pipeline: no spec in the monitor's"), text
    assert "{" not in text and str(monitor.root) not in text
    style = error.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e)"
                           ".borderTopStyle]")  # fmt: skip
    assert style == [ERROR_BACKGROUND, "solid"], style
    page.screenshot(path=str(ARTIFACTS / "5-tab-not-a-pipeline.png"))

    # The overview, with or without the trailing slash, on its own and in Airflow's UI.
    for path in ("/sluice", "/sluice/"):
        page.goto(f"{server.url}{path}")
        assert page.url == f"{server.url}/sluice/" and page.locator("#overview").count() == 1
    for path in ("/plugin/sluice", "/plugin/sluice/"):
        page.goto(f"{server.url}{path}")
        page.frame_locator("iframe").locator("#overview").wait_for(timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "6-airflow-nav.png"))


# An asset-triggered run's id, as Airflow 3 names it: the longest cell of a history row.
LONG_RUN = "asset_triggered__2026-11-27T09:43:46.159733+00:00_2sLbyl8T"


def _history_fits(frame: Any, epoch: int) -> None:
    """The history table does not overflow its box, and the run cell of ``epoch`` shows the
    run's type and time inside it (the id is its link's title)."""
    table = frame.locator("#history")
    scroll, client = table.evaluate(
        "t => [t.parentElement.scrollWidth, t.parentElement.clientWidth]"
    )
    assert scroll <= client, f"the history is {scroll} px wide in a {client} px box"
    cell = frame.locator(f'#history tr[data-epoch="{epoch}"] td').last
    assert " ".join(cell.inner_text().split()) == "asset_triggered 2026-11-27 09:43:46"
    assert cell.locator("a").get_attribute("title") == LONG_RUN
    right, box_right = cell.evaluate(
        "c => [c.getBoundingClientRect().right, c.closest('.scroll').getBoundingClientRect().right]"
    )
    assert right <= box_right + 0.5, f"the run cell ends at {right} px, its box at {box_right}"
    assert cell.evaluate("c => c.scrollWidth <= c.clientWidth"), "the run id is cut"


def test_the_history_and_its_run_column_fit_1280_px(monitor: Monitor) -> None:
    h = History(monitor.root, monitor.pipelines, "long_runs", files=3)
    h.rt = replace(h.rt, run_id=LONG_RUN)
    for _ in range(3):
        h.commit(late=1, dead=1)
    page = monitor.page

    page.goto(f"{monitor.base}/pipelines/{h.dag}")
    _history_fits(page, 3)
    monitor.no_overflow()
    page.locator("#history").screenshot(path=str(ARTIFACTS / "7-history-1280.png"))

    server = monitor.server  # in the DAG's Checkpoints tab, narrower than the window
    wait_for(f"{h.dag} to be parsed", lambda: server.api("GET", f"/dags/{h.dag}").ok, 180)
    page.goto(f"{server.url}/dags/{h.dag}/plugin/sluice_checkpoints")
    frame = page.frame_locator("iframe")
    frame.locator("#history").wait_for(timeout=60_000)
    _history_fits(frame, 3)
    page.screenshot(path=str(ARTIFACTS / "8-tab-history.png"), full_page=True)
