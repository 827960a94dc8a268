"""The monitor's app in-process (sluice.airflow.monitor, no server, no browser, no Spark): values
reach the page escaped exactly once, specs and runtimes are cached by spec file version, and the
pages tell the truth (issue #26): failing with the stored error, caught up at lag 0, totals
without retracted epochs, end-to-end time, the last refusal, broken specs, error pages.

Histories are written by :class:`History` through the protocol's own steps and records, on a
clock the test moves: no Spark, no scheduler.

Requests go through FastAPI's test client to the real app; Airflow's SimpleAuthManager decides
what the user may do. Only the user is given (``get_user`` overridden): signing in with
Airflow's session needs its metadata DB, and tests/airflow/test_monitor_ui.py checks that.
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from fastapi.testclient import TestClient
from sluice.airflow.monitor import create_app
from sluice.contracts.records import (
    AttemptRecord,
    AttemptStatus,
    EpochResult,
    EpochStats,
    Plan,
    Restore,
    WatermarkState,
)
from sluice.protocol import commit_epoch, plan_epoch
from sluice.protocol.process import Compute, process_attempt
from sluice.protocol.repository import advance
from sluice.spec import parse_spec

from tests.fixtures.pipelines import CLICK_SCHEMA, Workspace, click_spec_dict, runtime

ERROR_TEXT = "topic 'clicks' & co"
PIPELINES = 20
LAG_FILES = 3


class _Text(HTMLParser):
    """The text a browser shows, by element: ``data-card`` cards and ``data-pipeline`` rows."""

    def __init__(self) -> None:
        super().__init__()  # convert_charrefs: each entity is unescaped once, as a browser does
        self.cards: dict[str, list[str]] = {}
        self.rows: dict[str, list[str]] = {}
        self._into: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and a.get("data-card"):
            self._into = self.cards.setdefault(a["data-card"] or "", [])
        elif tag == "tr" and a.get("data-pipeline"):
            self._into = self.rows.setdefault(a["data-pipeline"] or "", [])
        elif tag == "tr":
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None and data.strip():
            self._into.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._into = None


def _text(page: str) -> _Text:
    parsed = _Text()
    parsed.feed(page)
    return parsed


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Callable[[Path], TestClient]]:
    """A test client of the monitor's app over a folder of specs, as an Airflow admin."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    init_auth_manager()
    admin = SimpleAuthManagerUser(username="admin", role="admin")
    clients: list[TestClient] = []

    def open_monitor(folder: Path) -> TestClient:
        app = create_app(folder)
        app.dependency_overrides[get_user] = lambda: admin
        clients.append(TestClient(app))
        return clients[-1]

    yield open_monitor
    for client in clients:
        client.close()


def _write_spec(folder: Path, body: dict[str, Any]) -> Path:
    path = folder / f"{body['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _files_pipeline(root: Path, folder: Path, name: str) -> Path:
    """A files pipeline on local storage with LAG_FILES input files not read yet."""
    ws = Workspace("local", (root / name).as_uri())
    ws.put_files([(f"part-{i}.jsonl", b"") for i in range(LAG_FILES)])
    return _write_spec(folder, click_spec_dict(ws, name=name))


def test_an_error_from_the_source_reaches_the_page_verbatim(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    """The lag card shows the source's error as the source wrote it: each character escaped
    once (``'`` as ``&#39;``, ``&`` as ``&amp;``), never twice."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    missing = tmp_path / f"{ERROR_TEXT}.db"  # the SQLite example source cannot open it
    body = click_spec_dict(Workspace("local", tmp_path.as_uri()), name="lagging")
    body["source"] = {
        "type": "sluice.examples:SqliteSource",
        "schema": dict(CLICK_SCHEMA),
        "options": {"path": str(missing), "table": "clicks"},
    }
    _write_spec(folder, body)

    page = monitor(folder).get("/pipelines/sluice__lagging")
    assert page.status_code == 200, page.text

    title, count, shown = _text(page.text).cards["lag"]
    assert (title, count) == ("lag", "-")  # no count: the source could not be asked
    assert shown.startswith("SqliteSourceError: sqlite://"), shown
    assert f"/{ERROR_TEXT}.db#clicks: OperationalError:" in shown, shown

    raw = re.search(r'data-card="lag">.*?</div>', page.text, re.S)
    assert raw is not None
    card = raw.group(0)
    assert "&amp;#" not in page.text and "&amp;amp;" not in page.text
    escaped_quotes = card.count("&#39;") + card.count("&#x27;")
    assert escaped_quotes == shown.count("'") and "'" not in card
    assert "topic &#39;clicks&#39; &amp; co" in card or "topic &#x27;clicks&#x27; &amp; co" in card


def test_the_overview_of_20_pipelines_loads_each_spec_and_builds_each_runtime_once(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    specs = [_files_pipeline(tmp_path, folder, f"p{i:02d}") for i in range(PIPELINES)]
    client = monitor(folder)
    catalog = client.app.state.catalog  # type: ignore[attr-defined]

    with ThreadPoolExecutor(4) as pool:  # concurrent first requests: still one of each
        first, *others = pool.map(lambda _: client.get("/"), range(4))
    assert first.status_code == 200, first.text
    assert [o.text == first.text for o in others] == [True] * 3
    rows = _text(first.text).rows
    assert sorted(rows) == [f"p{i:02d}" for i in range(PIPELINES)]
    assert all(f"{LAG_FILES} files" in " ".join(cells) for cells in rows.values()), rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (PIPELINES, PIPELINES)
    built = {dag: e.runtime for dag, e in catalog.pipelines().items()}

    # Same version, unreadable content: a monitor that parsed the specs again would drop them.
    for path in specs:
        _rewrite_keeping_version(path, b"{" * path.stat().st_size)
    second = client.get("/")
    assert second.status_code == 200, second.text
    assert _text(second.text).rows == rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (PIPELINES, PIPELINES)
    assert all(e.runtime is built[dag] for dag, e in catalog.pipelines().items())


def test_a_touched_spec_rebuilds_its_runtime_only_and_changes_and_removals_show(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    specs = {f"sluice__p{i}": _files_pipeline(tmp_path, folder, f"p{i}") for i in range(3)}
    client = monitor(folder)
    catalog = client.app.state.catalog  # type: ignore[attr-defined]
    assert client.get("/").status_code == 200
    built = {dag: e.runtime for dag, e in catalog.pipelines().items()}

    touched = specs["sluice__p1"]
    mtime_ns = touched.stat().st_mtime_ns + 1_000_000_000
    os.utime(touched, ns=(mtime_ns, mtime_ns))
    assert client.get("/").status_code == 200
    assert (catalog.spec_loads, catalog.runtime_builds) == (4, 4)
    now = {dag: e.runtime for dag, e in catalog.pipelines().items()}
    assert [dag for dag in specs if now[dag] is not built[dag]] == ["sluice__p1"]

    # A new interval in p0's spec shows on the next request; a removed spec is dropped.
    body = yaml.safe_load(specs["sluice__p0"].read_text())
    body["checkpoint"]["interval"] = "7m"
    _rewrite_keeping_version(specs["sluice__p0"], yaml.safe_dump(body).encode(), bump_s=2)
    specs["sluice__p2"].unlink()
    rows = _text(client.get("/").text).rows
    assert sorted(rows) == ["p0", "p1"] and rows["p0"][-1] == "7m", rows
    assert (catalog.spec_loads, catalog.runtime_builds) == (5, 5)
    assert client.get("/pipelines/sluice__p2").status_code == 404


def _rewrite_keeping_version(path: Path, data: bytes, bump_s: int = 0) -> None:
    """Write ``data`` to ``path`` and set its modification time back (plus ``bump_s``)."""
    mtime_ns = path.stat().st_mtime_ns + bump_s * 1_000_000_000
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_the_forms_are_the_run_requests_and_refuse_what_it_refuses_before_triggering(
    monitor: Callable[[Path], TestClient], tmp_path: Path
) -> None:
    """The action forms take their labels, help and the savepoint-name pattern from the run
    request model; a value the model refuses is refused by the monitor with the model's
    message, and nothing is triggered (no Airflow API server runs here: a trigger attempt
    would say so, not this message; tests/airflow/test_monitor_actions.py has the rest)."""
    from sluice.monitor.inputs import html_inputs

    folder = tmp_path / "pipelines"
    folder.mkdir()
    _files_pipeline(tmp_path, folder, "acts")
    client = monitor(folder)
    page = client.get("/pipelines/sluice__acts").text
    inputs = html_inputs()
    pattern = inputs["take_savepoint"]["pattern"]
    assert f'pattern="{pattern}"' in page
    assert re.fullmatch(pattern, "v2.0-rc_1") and not re.fullmatch(pattern, "../x")
    assert "take a savepoint named" in page  # restoring: once an epoch is committed

    origin = {"Origin": "http://testserver"}
    refused = [
        ("savepoint", {"name": "../x"}, "take_savepoint: '../x' is not a savepoint name"),
        ("restore", {"kind": "checkpoint", "epoch": "0"}, "epoch: 0 is not a whole number >= 1"),
    ]
    for action, form, expected in refused:
        answer = client.post(f"/pipelines/sluice__acts/{action}", data=form, headers=origin,
                             follow_redirects=False)  # fmt: skip
        assert answer.status_code == 422, answer.text  # the form again, with the reason
        assert "not triggered: " + expected in html.unescape(answer.text), answer.text[:3000]


# -- the truth of the pages (issue #26) ---------------------------------------------------------

NAN_ERROR = "ValueError: cannot convert float NaN to integer <b>&'row 7'"
VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Element(HTMLParser):
    """The text a browser shows inside the first element whose ``attr`` is ``value``."""

    def __init__(self, attr: str, value: str) -> None:
        super().__init__()
        self.attr, self.value = attr, value
        self.depth = 0  # > 0: inside the element
        self.found = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        if self.depth:
            self.depth += 1
        elif not self.found and dict(attrs).get(self.attr) == self.value:
            self.depth, self.found = 1, True

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in VOID:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth and data.strip():
            self.text.append(data.strip())


def shown(page: str, attr: str, value: str) -> str | None:
    """The text of the element ``[attr=value]`` of ``page`` (None: no such element)."""
    parser = _Element(attr, value)
    parser.feed(page)
    return " ".join(parser.text) if parser.found else None


class _Failing:
    """A process step's compute that fails as a user's function does (a stored error)."""

    def __init__(self, error: str) -> None:
        self.error = error

    def describe(self) -> dict[str, Any]:
        return {"engine": "test"}

    def compute(self, rt: Any, plan: Plan) -> Any:
        raise ValueError(self.error.removeprefix("ValueError: "))


class History:
    """A files pipeline (spec in ``folder``) whose epochs the test writes through the
    protocol's steps without Spark: ``plan_epoch`` plans from the real source listing, an
    attempt record is written as the process step writes it (or a compute fails in
    ``process_attempt``), and ``commit_epoch`` commits. The clock is ``self.now``."""

    def __init__(self, root: Path, folder: Path, name: str, files: int, interval: str = "1m"):
        self.ws = Workspace("local", (root / name).as_uri())
        self.ws.put_files([(f"part-{i:02d}.jsonl", b"") for i in range(files)])
        body = click_spec_dict(self.ws, name=name)
        body["source"]["max_files_per_epoch"] = 1
        body["checkpoint"]["interval"] = interval
        self.spec_path = _write_spec(folder, body)
        self.dag = f"sluice__{name}"
        self.now = time.time() - 3600.0
        self.rt = replace(runtime(parse_spec(body)), clock=lambda: self.now, run_id="manual__t")

    def add_file(self, name: str) -> None:
        self.ws.put_files([(name, b"")])

    def plan(self, rewind_to: int | None = None) -> Plan:
        restored = None
        if rewind_to is not None:
            latest = self.rt.repo.latest_epoch()
            rewound = tuple(range(rewind_to + 1, latest + 1))
            restored = Restore("checkpoint", rewind_to, rewind_to, rewound)
        plan = plan_epoch(self.rt, max_units=1, rewind_to=rewind_to, restored_from=restored)
        assert plan is not None
        return plan

    def start(self, epoch: int) -> AttemptRecord:
        rt = self.rt
        record = AttemptRecord(rt.name, epoch, rt.new_attempt_id(), AttemptStatus.STARTED,
                               self.now, self.now, rt.run_id)  # fmt: skip
        self.rt.repo.start_attempt(record)
        return record

    def fail(self, error: str) -> None:
        with pytest.raises(ValueError):
            process_attempt(self.rt, cast(Compute, _Failing(error)))

    def commit(self, *, late: int = 0, dead: int = 0, rewind_to: int | None = None,
               spark_s: float = 2.0, wait_s: float = 5.0,
               events: tuple[float, float] | None = None) -> int:  # fmt: skip
        """One epoch: planned, ``wait_s`` until process starts, ``spark_s`` of process, a
        second to commit; returns it. ``events``: (newest event time read so far, watermark),
        in seconds since the epoch (else it read no event time)."""
        plan = self.plan(rewind_to)
        self.now += wait_s
        record = self.start(plan.epoch)
        self.now += spark_s
        stats = EpochStats(records_read=10 + late + dead, accepted=10, late=late, dead=dead,
                           windows_emitted=3, input_units=1)  # fmt: skip
        watermark, mark_us = plan.watermark, None
        if events is not None:
            watermark = WatermarkState({"": int(events[0] * 1e6)})
            mark_us = int(events[1] * 1e6)
        result = EpochResult(stats, watermark, mark_us, plan.state, (), spark_s)
        self.rt.repo.update_attempt(advance(record, AttemptStatus.PREPARED, self.now,
                                                    result=result))  # fmt: skip
        self.now += 1.0
        commit_epoch(self.rt, plan.epoch, record.attempt)
        self.now += 30.0
        return plan.epoch


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    return folder


def test_attempts_that_fail_show_failing_with_the_stored_error_until_a_retry_runs(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    """Epoch 1 of a pipeline: an attempt killed while running (its record stays ``started``),
    then one whose function fails. What happened last is the failure: health ``failing`` with
    the stored error (escaped once), the epoch ``failed``, 1 failed epoch. A retry that starts
    is what happened last then: ``processing``, and the page refreshes itself."""
    h = History(tmp_path, specs, "nan_fn", files=2)
    h.plan()
    h.start(1)  # killed: never recorded as failed
    h.now += 60
    h.fail(NAN_ERROR)
    client = monitor(specs)

    overview = client.get("/")
    assert overview.status_code == 200, overview.text
    row = shown(overview.text, "data-pipeline", "nan_fn") or ""
    assert 'data-pipeline="nan_fn" data-health="failing"' in overview.text
    assert "epoch 1 failed (1 failed attempt); nothing committed yet" in row, row
    assert NAN_ERROR in row and shown(overview.text, "data-col", "failed") == "1"
    page = client.get(f"/pipelines/{h.dag}").text
    assert shown(page, "data-card", "health") == (
        "health failing epoch 1 failed (1 failed attempt); nothing committed yet"
    )
    assert shown(page, "id", "last-error") == f"Last error {NAN_ERROR}"
    assert "&lt;b&gt;&amp;" in page and "<b>&" not in page and "&amp;lt;" not in page
    assert 'data-epoch="1" data-status="failed"' in page
    assert 'id="live"' not in page and "<script>" not in page  # nothing in flight

    h.now = time.time() - 1200  # a retry that started 20 minutes ago and did nothing since:
    h.start(1)  # longer than a run may last (10m), so its run was stopped
    page = client.get(f"/pipelines/{h.dag}").text
    assert 'data-epoch="1" data-status="processing"' in page and "<script>" not in page
    assert "no progress for 20m, longer than a run may last: its run was stopped" in page
    assert shown(page, "data-card", "health") == "health idle no epoch committed yet"

    h.now = time.time()
    h.start(1)  # Airflow's next retry, running now
    page = client.get(f"/pipelines/{h.dag}").text
    assert 'data-epoch="1" data-status="processing"' in page
    assert shown(page, "data-card", "health") == (
        "health idle no epoch committed yet; epoch 1 processing"
    )
    assert "location.reload()" in page and shown(page, "id", "live") is not None


def test_a_pipeline_with_nothing_waiting_is_caught_up_and_shows_end_to_end_time(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    """Its last commit is an hour old (interval 1m): with lag 0 it is ``caught up``, not
    ``behind``; a new file makes it behind. Each epoch shows its Spark time and its end-to-end
    time (plan start to sinks committed, from the stored records); the charts' axes say their
    units."""
    h = History(tmp_path, specs, "quiet", files=2)
    for _ in range(2):
        h.commit(spark_s=2.5, wait_s=20.0)
    client = monitor(specs)
    page = client.get(f"/pipelines/{h.dag}").text
    health = shown(page, "data-card", "health") or ""
    assert health.startswith("health caught up no input waiting; last commit "), health
    assert shown(page, "data-card", "lag") == "lag 0 files not yet in a committed epoch"
    assert "<script>" not in page
    overview = client.get("/").text
    assert 'data-pipeline="quiet" data-health="caught up"' in overview

    for epoch in (1, 2):
        plan, marker = h.rt.repo.plan(epoch), h.rt.repo.sinks_committed(epoch)
        assert plan is not None and marker is not None
        end_to_end = marker.committed_at - (plan.created_at - plan.plan_seconds)
        row = re.search(rf'data-epoch="{epoch}".*?</tr>', page, re.S)
        assert row is not None
        assert shown(row.group(0), "data-col", "spark") == "2.50"
        assert shown(row.group(0), "data-col", "run") == f"{end_to_end:.2f}"
        assert end_to_end > 20.0 + 2.5  # the wait before process is in it
    units = re.findall(r'data-axis="y">([^<]*)<', page)
    assert units == ["records", "seconds", "rows", "seconds"], units
    assert "between steps" in page

    h.add_file("part-99.jsonl")
    behind = shown(client.get(f"/pipelines/{h.dag}").text, "data-card", "health") or ""
    assert behind.startswith("health behind last commit ") and "(interval 60s)" in behind


def test_totals_leave_out_retracted_epochs_which_are_retracted_once_the_rewind_commits(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    h = History(tmp_path, specs, "rewound", files=3)
    for late, dead in ((5, 3), (7, 4), (11, 2)):
        h.commit(late=late, dead=dead)
    h.plan(rewind_to=1)  # epoch 4 rewinds to 1: planned, not committed
    client = monitor(specs)
    page = client.get(f"/pipelines/{h.dag}").text
    for epoch in (2, 3):
        row = shown(page, "data-epoch", str(epoch)) or ""
        assert "retracted" not in row.replace("will retract", ""), row
        assert "rewind 4 will retract it once it commits" in row, row
    assert shown(page, "data-card", "late / dead") == (
        "late / dead 23 / 9 records over the retained epochs, retracted ones left out"
    )
    table = _cli_table(h)  # `sluice checkpoints` reads the same rows
    assert "rewind 4 will retract it" in table and "retracted by" not in table

    h.commit(late=6, dead=1, rewind_to=1)
    page = client.get(f"/pipelines/{h.dag}").text
    for epoch in (2, 3):
        assert "retracted by 4" in (shown(page, "data-epoch", str(epoch)) or "")
    assert "rewind to 1" in (shown(page, "data-epoch", "4") or "")
    assert shown(page, "data-card", "late / dead") == (
        "late / dead 11 / 4 records over the retained epochs, retracted ones left out"
    )
    assert "retracted by 4" in _cli_table(h)
    overview = client.get("/").text
    assert (shown(overview, "data-col", "late"), shown(overview, "data-col", "dead")) == ("11", "4")


def _cli_table(h: History) -> str:
    from rich.console import Console
    from sluice.report import checkpoint_rows, checkpoint_table

    with open(os.devnull, "w") as sink:
        console = Console(width=400, record=True, file=sink)
        console.print(checkpoint_table(h.rt, checkpoint_rows(h.rt)))
    return console.export_text()


def test_the_last_refused_run_request_is_on_the_pipeline_page(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    h = History(tmp_path, specs, "refusing", files=1)
    h.commit()
    message = "restore_from=checkpoint epoch 7: no committed checkpoint 7 <x>"
    at = 1_790_000_000.0
    h.rt.repo.record_refusal("manual__2026-11-26T10:00:00", message, int(at * 1e6))
    client = monitor(specs)
    page = client.get(f"/pipelines/{h.dag}").text
    block = shown(page, "id", "last-refusal") or ""
    assert block == ("Last refused run request 2026-09-21 14:13:20 UTC · run "
                     f"manual__2026-11-26T10:00:00 {message}"), block  # fmt: skip
    assert f'href="../../dags/{h.dag}/runs/manual__2026-11-26T10%3A00%3A00"' in page
    assert client.get(f"/api/pipelines/{h.dag}").json()["last_refusal"] == {
        "run_id": "manual__2026-11-26T10:00:00",
        "message": message,
        "at_us": int(at * 1e6),
    }


def test_a_broken_spec_shows_as_a_broken_row_and_errors_are_pages_without_server_paths(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    good = History(tmp_path, specs, "good", files=1)
    good.commit()
    body = yaml.safe_load(good.spec_path.read_text())
    body["name"], body["windw"] = "typo", body.pop("window")
    (specs / "typo.yaml").write_text(yaml.safe_dump(body))
    client = monitor(specs)

    overview = client.get("/")
    assert overview.status_code == 200, overview.text
    assert 'data-pipeline="good" data-health="caught up"' in overview.text
    broken = shown(overview.text, "data-broken", "typo.yaml") or ""
    assert "windw: unknown field" in broken and "did you mean 'window'?" in broken, broken
    assert str(specs) not in overview.text

    # A DAG that is not a Sluice pipeline (the Checkpoints tab of any DAG): a styled page.
    answer = client.get("/pipelines/hello_world")
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("text/html")
    text = shown(answer.text, "id", "error") or ""
    assert text.startswith(
        "hello_world is not a Sluice pipeline: no spec in the monitor's "
        "pipelines folder defines it (1 spec file does not load: see the overview)"
    ), text
    assert 'class="msg err"' in answer.text and str(tmp_path) not in answer.text
    assert "{" not in text
    api = client.get("/api/pipelines/hello_world")  # the JSON API stays JSON
    assert api.status_code == 404 and "detail" in api.json()

    # Restore with nothing chosen: a message on a page, not raw JSON.
    restore = client.post(f"/pipelines/{good.dag}/restore", data={"kind": "checkpoint"},
                          headers={"Origin": "http://testserver"})  # fmt: skip
    assert restore.headers["content-type"].startswith("text/html"), restore.text
    assert 'class="msg err"' in restore.text and '{"detail"' not in restore.text


def test_the_bare_prefix_redirects_to_the_overview() -> None:
    """``/sluice`` (no slash) would reach Airflow's UI catch-all, a blank page: redirected."""
    from fastapi import FastAPI
    from sluice.airflow.monitor import SlashRedirect

    root = FastAPI()
    root.mount("/sluice", FastAPI())

    @root.get("/{rest:path}")
    def catch_all(rest: str) -> dict[str, str]:  # as Airflow's UI route
        return {"ui": rest}

    root.add_middleware(SlashRedirect, prefix="/sluice")
    with TestClient(root) as client:
        answer = client.get("/sluice?x=1", follow_redirects=False)
        assert (answer.status_code, answer.headers["location"]) == (307, "sluice/?x=1")
        assert client.get("/sluice/x").status_code == 404  # the app's, not the UI's
        assert client.get("/sluicey").json() == {"ui": "sluicey"}


def _lag_chart(page: str) -> tuple[str, str, list[str]]:
    """The watermark-lag chart: its legend, its y-axis unit and its tick labels."""
    svg = re.search(r'<svg [^>]*data-chart="watermark lag at commit".*?</svg>', page, re.S)
    assert svg, page[:3000]
    texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg[0])]
    unit = re.search(r'data-axis="y">([^<]*)<', svg[0])
    assert unit
    return texts[1], unit[1], texts[2:5]


def test_the_watermark_lag_of_a_replay_is_against_the_newest_event_of_live_data_the_clock(
    monitor: Callable[[Path], TestClient], tmp_path: Path, specs: Path
) -> None:
    day = 86_400.0
    replay = History(tmp_path, specs, "replay", files=3)
    for i in range(3):  # demo data: events 330 days old, a 5 s bound, one partition 4 s behind
        newest = replay.now - 330.5 * day + 60 * i
        replay.commit(events=(newest, newest - 5 - 4 * i))
    live = History(tmp_path, specs, "live", files=2)
    for behind in (30.0, 65.0):  # the watermark trails the commit (8 s after planning) so far
        commit_at = live.now + 8
        live.commit(events=(commit_at - behind + 5, commit_at - behind))
    daily = History(tmp_path, specs, "daily", files=1, interval="1d")  # 3 d old: still live
    daily.commit(events=(daily.now - 3 * day, daily.now - 3 * day - 60))
    client = monitor(specs)

    legend, unit, ticks = _lag_chart(client.get("/pipelines/sluice__replay").text)
    assert legend == "last 13s behind the newest event (data 330d old)"
    assert unit == "seconds" and ticks == ["0", "10", "20"]  # not 330 days
    legend, unit, _ = _lag_chart(client.get("/pipelines/sluice__live").text)
    assert (legend, unit) == ("last 65s behind the wall clock", "seconds")
    page = client.get("/pipelines/sluice__daily").text
    assert _lag_chart(page)[:2] == ("last 3d behind the wall clock", "days")
