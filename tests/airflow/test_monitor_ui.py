"""The checkpoint monitor in a real Airflow, driven in headless Chromium (issue #9).

Two pipelines run in one Airflow (API server with plugins/, scheduler, DAG processor,
triggerer):
- ``monitor_clicks`` has 2 epochs committed before Airflow starts; the browser's actions add
  the rest;
- ``monitor_big`` has a history of 1,000 committed epochs (tests/fixtures/history.py), for
  the load-time figures.

The browser signs in as Airflow's UI does (the ``_token`` session cookie). It checks the
history's counts against the checkpoints, takes a savepoint from the page, restores from
checkpoint 2 from the page, and opens the overview and the tabs inside Airflow's own pages.
Each step leaves a screenshot in ``$SLUICE_TEST_ARTIFACTS/monitor`` (default
``.artifacts/monitor``).

make chaos runs it (about 5 minutes); make test checks the history in the browser and the
refusals on the Airflow of tests/airflow/test_server.py. Without the browser, the test also
checks the refusals:
- no session: 401;
- a read-only user may view (200) but not act (403);
- a cross-site POST: 403.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
import yaml
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.airflow import REPO, VIEWER_USER, wait_for
from tests.fixtures.history import clone_history
from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

FILES = render_click_files(files=6, events_per_file=50, seed=17)
NAME, BIG = "monitor_clicks", "monitor_big"
DAG, BIG_DAG = f"sluice__{NAME}", f"sluice__{BIG}"
CHROMIUM = os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("SLUICE_TEST_ARTIFACTS") or REPO / ".artifacts") / "monitor"


def _pipeline(root: Path, pipelines: Path, name: str, files: list[tuple[str, bytes]]) -> Any:
    ws = Workspace("local", root.as_uri())
    ws.put_files(files)
    body = click_spec_dict(ws, name=name)
    body["source"]["max_files_per_epoch"] = 2
    body["checkpoint"]["interval"] = "1d"  # the test triggers; at most one scheduled run
    (pipelines / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return parse_spec(body)


@pytest.mark.slow
def test_the_monitor_shows_history_and_acts_through_airflow(
    spark: Any, airflow_server_factory: Any, tmp_path: Path
) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    # Two epochs' input before Airflow starts, committed here: with no input waiting, the
    # input watcher asks for no run (docs/airflow.md#data-aware-runs) while the page is read.
    spec = _pipeline(tmp_path / "clicks", pipelines, NAME, FILES[:4])
    rt = runtime(spec)
    run_until_drained(rt, spark)
    big = runtime(_pipeline(tmp_path / "big", pipelines, BIG, FILES[:2]))
    run_until_drained(big, spark)
    clone_history(big.repo, 1, 1000)

    server = airflow_server_factory(pipelines)
    for dag in (DAG, BIG_DAG):
        wait_for(f"{dag} to be parsed", lambda d=dag: server.api("GET", f"/dags/{d}").ok, 180)
    base = f"{server.url}/sluice"
    refusals(server, base)

    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        page = signed_in(p, server)

        page.goto(f"{base}/pipelines/{DAG}")
        history_matches(page, rt, [1, 2])
        page.screenshot(path=str(ARTIFACTS / "1-pipeline.png"), full_page=True)

        # Take a savepoint from the page: a run that commits epoch 3 and saves it. The input
        # of epoch 3 arrives now (the watcher may run it first: the savepoint is then epoch 3).
        Workspace("local", (tmp_path / "clicks").as_uri()).put_files(FILES[4:])
        page.fill("#take-savepoint input[name=name]", "from_the_page")
        page.click("#take-savepoint button")
        run = _triggered(page)
        assert server.wait_run(DAG, run) == "success", server.logs()
        saved = rt.repo.savepoint("from_the_page")
        assert saved is not None and saved.epoch == 3 and saved.run_id == run
        page.goto(f"{base}/pipelines/{DAG}")
        assert page.locator('tr[data-savepoint="from_the_page"] td').nth(1).inner_text() == "3"
        history_matches(page, rt, [1, 2, 3])
        # epoch 3's run (the savepoint's, or a scheduled run that came first), linked
        made_by = rt.repo.checkpoint(3).run_id
        link = page.locator('tr[data-epoch="3"] a').first
        assert link.get_attribute("href") == f"../../dags/{DAG}/runs/{quote(made_by, safe='')}"

        # Restore from checkpoint 2 from the page: epoch 4 rewinds to 2 and retracts 3, as the
        # confirmation says before anything is triggered.
        page.fill("#restore-checkpoint input[name=epoch]", "2")
        page.click("#restore-checkpoint button")
        summary = page.locator("#confirm-summary").inner_text()
        assert "retracts the output of 1 committed epoch (3)" in summary, summary
        page.click("#confirm button")
        run = _triggered(page)
        assert server.wait_run(DAG, run) == "success", server.logs()
        plan = rt.repo.plan(4)
        assert plan is not None and plan.run_id == run
        assert plan.retract_after == 2
        page.goto(f"{base}/pipelines/{DAG}")
        history_matches(page, rt, [1, 2, 3, 4])
        assert "rewind to 2" in page.locator('tr[data-epoch="4"]').inner_text()
        assert "retracted by 4" in page.locator('tr[data-epoch="3"]').inner_text()
        page.screenshot(path=str(ARTIFACTS / "2-after-savepoint-and-restore.png"), full_page=True)

        page.goto(f"{base}/")
        for name in (NAME, BIG):
            pill = page.locator(f'tr[data-pipeline="{name}"] .pill').first
            assert pill.inner_text() == "caught up"  # both drained: lag 0
        page.screenshot(path=str(ARTIFACTS / "3-overview.png"), full_page=True)

        # Inside Airflow's own UI: the navigation entry and the DAG page's tab (iframes).
        page.goto(f"{server.url}/plugin/sluice")
        page.frame_locator("iframe").locator("#overview").wait_for(timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "4-airflow-nav.png"))
        page.goto(f"{server.url}/dags/{DAG}/plugin/sluice_checkpoints")
        page.frame_locator("iframe").locator("#history").wait_for(timeout=60_000)
        page.screenshot(path=str(ARTIFACTS / "5-airflow-dag-tab.png"))

        loads = []
        for _ in range(3):  # the first read fills the history cache
            page.goto(f"{base}/pipelines/{BIG_DAG}")
            loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].duration"))
        assert page.locator("#history tr[data-epoch]").count() == 200
        assert page.locator("svg[data-chart]").count() == 4
        page.screenshot(path=str(ARTIFACTS / "6-thousand-epochs.png"), full_page=True)
        print(f"\n1000 retained epochs, page load in Chromium: first {loads[0]:.0f} ms, then "
              f"{loads[1]:.0f} ms and {loads[2]:.0f} ms")  # fmt: skip
        page.context.browser.close()


def refusals(server: Any, base: str, dag: str = DAG) -> None:
    """No session: 401; the viewer reads but may not act: 403; a cross-site POST: 403."""
    form = {"name": "nope"}
    assert requests.get(f"{base}/", timeout=30).status_code == 401
    assert requests.get(f"{base}/pipelines/{dag}", timeout=30).status_code == 401
    assert requests.post(f"{base}/pipelines/{dag}/savepoint", data=form,
                         timeout=30).status_code == 401  # fmt: skip
    forged = requests.get(f"{base}/", cookies={"_token": "not.a.jwt"}, timeout=30)
    assert forged.status_code in (401, 403)

    viewer = {"Authorization": f"Bearer {server.token(VIEWER_USER)}"}
    page = requests.get(f"{base}/pipelines/{dag}", headers=viewer, timeout=60)
    assert page.status_code == 200 and 'id="read-only"' in page.text and "<form" not in page.text
    for action, data in (("savepoint", form), ("restore", {"kind": "checkpoint", "epoch": 1})):
        refused = requests.post(f"{base}/pipelines/{dag}/{action}", data=data, timeout=30,
                                headers={**viewer, "Origin": server.url},
                                allow_redirects=False)  # fmt: skip
        assert refused.status_code == 403, (action, refused.text)

    admin = {"Authorization": f"Bearer {server.token()}"}
    cross = requests.post(f"{base}/pipelines/{dag}/savepoint", data=form, timeout=30,
                          headers={**admin, "Origin": "http://attacker.example"},
                          allow_redirects=False)  # fmt: skip
    assert cross.status_code == 403, cross.text
    runs = server.api("GET", f"/dags/{dag}/dagRuns").json()["dag_runs"]
    assert not [r for r in runs if (r.get("conf") or {}).get("take_savepoint") == "nope"]


def signed_in(p: Any, server: Any) -> Any:
    """A page of headless Chromium signed in to ``server`` as admin (the session cookie)."""
    browser = p.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"]
    )
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.add_cookies([{"name": "_token", "value": server.token(), "url": server.url}])
    return context.new_page()


def _triggered(page: Any) -> str:
    message = page.locator("#message").inner_text()
    found = re.search(r"triggered run (\S+) with conf", message)
    assert found, message
    return found.group(1)


def history_matches(page: Any, rt: Any, epochs: list[int]) -> None:
    """The history table lists exactly ``epochs``, with their checkpoints' counts."""
    shown = page.locator("#history tr[data-epoch]")
    assert sorted(int(shown.nth(i).get_attribute("data-epoch")) for i in range(shown.count())) \
        == epochs  # fmt: skip
    for epoch in epochs:
        stats = rt.repo.checkpoint(epoch).result.stats
        row = page.locator(f'#history tr[data-epoch="{epoch}"]')
        cells = {c: row.locator(f'td[data-col="{c}"]').inner_text() for c in ("in", "late", "dead")}
        assert cells == {"in": f"{stats.records_read:,}", "late": f"{stats.late:,}",
                         "dead": f"{stats.dead:,}"}, (epoch, cells)  # fmt: skip
        assert row.get_attribute("data-status") == "sinks committed"
