"""The checkpoint monitor's pages over real checkpoints (sluice.monitor; the Airflow side and
the browser are in tests/airflow/test_monitor_ui.py)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser
from typing import Any

from sluice.demo import render_click_files
from sluice.monitor import (
    HistoryCache,
    PipelineView,
    pipeline_view,
    render_overview,
    render_pipeline,
)
from sluice.protocol import run_until_drained, take_savepoint

from tests.fixtures.history import clone_history
from tests.fixtures.pipelines import click_spec, runtime

FILES = render_click_files(files=6, events_per_file=40, seed=11)


class _Table(HTMLParser):
    """The cells of each ``data-epoch`` row of the history table."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, dict[str, str]] = {}
        self._row: int | None = None
        self._col: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-epoch"):
            self._row = int(a["data-epoch"] or 0)
            self.rows[self._row] = {"status": a.get("data-status") or ""}
        elif tag == "td" and self._row is not None and a.get("data-col"):
            self._col = a["data-col"]

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._col:
            self.rows[self._row][self._col] = data.strip()
            self._col = None


def _history(page: str) -> dict[int, dict[str, str]]:
    parser = _Table()
    parser.feed(page)
    return parser.rows


def test_the_page_shows_each_epoch_with_its_counts_charts_and_savepoints_also_for_1000(
    spark: Any, local_workspace: Any
) -> None:
    local_workspace.put_files(FILES)
    spec = click_spec(local_workspace)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=lambda i: 2)
    take_savepoint(rt, "before_upgrade", note="for the test")
    view = pipeline_view(rt, "sluice__clicks", cache=HistoryCache())

    assert [r["epoch"] for r in view.committed] == [1, 2, 3]
    assert view.lag == 0 and view.health().state == "caught up"
    page = render_pipeline(view, can_act=True)
    shown = _history(page)
    for epoch in (1, 2, 3):
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None
        stats = checkpoint.result.stats
        spark_s, run_s = float(shown[epoch].pop("spark")), float(shown[epoch].pop("run"))
        assert shown[epoch] == {
            "status": "sinks committed",
            "in": f"{stats.records_read:,}",
            "out": f"{stats.windows_emitted:,}",
            "late": f"{stats.late:,}",
            "dead": f"{stats.dead:,}",
        }
        # Spark time and end to end (plan start to sinks committed), which holds it
        assert spark_s == round(checkpoint.result.process_seconds, 2) and run_s >= spark_s
    assert len(re.findall(r"<svg ", page)) == 4
    assert 'data-savepoint="before_upgrade"' in page
    assert 'id="take-savepoint"' in page and 'id="restore-checkpoint"' in page
    read_only = render_pipeline(view, can_act=False)
    assert 'id="read-only"' in read_only and "<form" not in read_only
    overview = render_overview([view])
    assert 'data-pipeline="clicks"' in overview and 'href="pipelines/sluice__clicks"' in overview

    # The same pipeline with 1,000 retained epochs (clones of epoch 3; one Spark run for both).
    clone_history(rt.repo, 3, 1000)
    cache = HistoryCache()

    started = time.perf_counter()
    cold = pipeline_view(rt, "sluice__clicks", cache=cache)
    cold_page = render_pipeline(cold, can_act=True)
    cold_s = time.perf_counter() - started
    reads: list[str] = []
    get = rt.repo.store.get
    rt.repo.store.get = lambda key: (reads.append(key), get(key))[1]  # type: ignore[method-assign]
    started = time.perf_counter()
    warm = pipeline_view(rt, "sluice__clicks", cache=cache)
    warm_page = render_pipeline(warm, can_act=True)
    warm_s = time.perf_counter() - started
    print(f"\n1000 epochs: first load {cold_s:.2f} s, second {warm_s:.2f} s, "
          f"page {len(warm_page) / 1024:.0f} KiB")  # fmt: skip

    assert len(_history(cold_page)) == 200 and 'id="more"' in cold_page
    assert len(_history(render_pipeline(warm, can_act=True, history_limit=None))) == 1000
    assert warm.rows == cold.rows
    # only the latest checkpoint and the next plan are read again (for the lag)
    assert sorted(k for k in reads if k.startswith("epochs/")) == [
        "epochs/000000001000/checkpoint.json",
        "epochs/000000001001/plan.json",
    ]


def test_health_compares_the_last_commit_with_the_interval_and_sees_failing_epochs() -> None:
    def view(rows: list[dict[str, Any]], now: float, lag: int = 1) -> Any:
        return PipelineView("p", "sluice__p", 60.0, "files", rows, [], lag, now)

    done = {"status": "sinks committed", "committed_at": 1000.0, "late": 2, "dead": 1}
    rows = [{"epoch": 1, **done}, {"epoch": 2, **done, "committed_at": 1060.0}]
    assert view([], 0).health().state == "idle"
    ok = view(rows, now=1100.0).health()
    assert (ok.state, ok.last_commit_age_s, ok.late, ok.dead) == ("ok", 40.0, 4, 2)
    assert view(rows, now=1060.0 + 121).health().state == "behind"
    # issue #26: nothing waiting (lag 0) is caught up, however old the last commit
    assert view(rows, now=1060.0 + 121, lag=0).health().state == "caught up"
    failing = view([*rows, {"epoch": 3, "status": "failed"}], now=1100.0).health()
    assert (failing.state, failing.failed_epochs) == ("failing", 1)
    assert "epoch 3 failed" in failing.text
    page = render_overview([view([*rows, {"epoch": 3, "status": "failed"}], now=1100.0)])
    assert '<span class="pill failing">failing</span>' in page


def test_a_join_pipelines_page_shows_the_lag_of_each_source(
    spark: Any, local_workspace: Any
) -> None:
    """The lag card counts both sources' waiting input; a card per source says whose."""
    from sluice.spec import parse_spec

    from tests.joins.data import make_input
    from tests.joins.pipelines import join_spec_dict

    inp = make_input(files=3)
    local_workspace.put_files(inp.persons, "persons")
    local_workspace.put_files(inp.auctions[:1], "auctions")
    rt = runtime(parse_spec(join_spec_dict(local_workspace, "window")))
    run_until_drained(rt, spark, max_units=1)  # reads persons 00 with auctions 00, then 01, 02
    local_workspace.put_files(inp.auctions[1:], "auctions")  # two auction files wait
    view = pipeline_view(rt, "sluice__join_window_inner")
    assert view.lag == 2 and view.lag_by_source == {"persons": 0, "auctions": 2}
    page = render_pipeline(view, can_act=True)
    assert "lag of persons" in page and "lag of auctions" in page
    assert re.search(r"lag of auctions.*?\b2\b", page, re.S)
