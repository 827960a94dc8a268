"""The monitor's actions in-process (sluice.airflow.monitor + sluice.monitor.actions; no
server, no browser, no Spark): every request is checked as the DAG's ``plan`` task checks it
before anything is triggered, a restore says what it retracts and triggers only with the
token of exactly that, and a savepoint delete asks first.

The histories are real protocol documents: :func:`commit_epoch_rows` plans each epoch with
the protocol (one input file each, rewinds through the run request) and commits it as a
process step that wrote the given rows would. No Airflow API server runs here, so an action
that gets as far as triggering ends with "Airflow's REST API did not answer"; the browser
test (tests/airflow/test_monitor_rewind_browser.py) triggers for real.
"""

from __future__ import annotations

import dataclasses
import html
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sluice.airflow.monitor import create_app
from sluice.contracts.records import (
    Checkpoint,
    EpochResult,
    EpochStats,
    Prepared,
    RetiredMark,
    SinksCommitted,
)
from sluice.monitor.actions import preview_restore
from sluice.protocol import Runtime
from sluice.protocol.request import InvalidRunRequest, PlanOptions, RunRequest
from sluice.protocol.retention import take_savepoint
from sluice.spec import parse_spec

from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

NAME = "acts"
DAG = f"sluice__{NAME}"
ORIGIN = {"Origin": "http://testserver"}
NO_AIRFLOW = "Airflow's REST API did not answer"
# rows per sink of epochs 1..4: results ("out"), late records, dead letters
ROWS = [(10, 1, 0), (20, 0, 2), (30, 3, 0), (40, 0, 4)]


# -- a history without Spark ---------------------------------------------------------------


def commit_epoch_rows(
    rt: Runtime, rows: tuple[int, ...], options: PlanOptions | None = None
) -> int:
    """Plan the next epoch (one input file; ``options``: a run request's, e.g. a rewind) and
    commit it with ``rows`` per sink (in ``rt.sinks`` order), as a process step that wrote
    them would: the plan, the checkpoint and the sinks marker. Returns the epoch."""
    plan = (options or PlanOptions()).plan(rt, max_units=1)
    assert plan is not None, "no input left to plan"
    attempt = rt.new_attempt_id()
    prepared = tuple(
        Prepared(role.sink.name, f"file:///{role.sink.name}", plan.epoch, attempt, n)
        for role, n in zip(rt.sinks, rows, strict=True)
    )
    stats = EpochStats(records_read=sum(rows), accepted=rows[0], late=rows[1], dead=rows[2],
                       windows_emitted=rows[0], input_units=1)  # fmt: skip
    result = EpochResult(stats, plan.watermark, None, plan.state, prepared, 0.5)
    rt.repo.put_checkpoint_if_absent(
        Checkpoint(
            rt.name, plan.epoch, attempt, plan, result, rt.clock(), rt.run_id or "manual__test"
        )
    )
    rt.repo.mark_sinks_committed(SinksCommitted(plan.epoch, attempt, rt.clock(), 0.1))
    return plan.epoch


def rewind(rt: Runtime, epoch: int, rows: tuple[int, ...]) -> int:
    """Commit a rewind to ``epoch`` (planned through the run request, as ``plan`` does)."""
    request = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": epoch})
    return commit_epoch_rows(rt, rows, request.resolve(rt))


def files_pipeline(root: Path, folder: Path, files: int, name: str = NAME) -> Runtime:
    """A files pipeline on local storage with ``files`` input files; its spec in ``folder``."""
    ws = Workspace("local", (root / name).as_uri())
    ws.put_files([(f"part-{i:04d}.jsonl", b"") for i in range(files)])
    body = click_spec_dict(ws, name=name)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return runtime(parse_spec(body))


def history(root: Path, folder: Path, files: int = 8, name: str = NAME) -> Runtime:
    """Epochs 1..4 committed with ROWS; savepoint ``early`` at 2 and ``late`` at 3; then a
    rewind to 2 committed as epoch 5 (it retracted 3 and 4: ``late`` is retracted)."""
    rt = files_pipeline(root, folder, files, name)
    for rows in ROWS:
        commit_epoch_rows(rt, rows)
    take_savepoint(rt, "early", 2)
    take_savepoint(rt, "late", 3)
    assert rewind(rt, 2, (5, 0, 0)) == 5
    return rt


def stored(rt: Runtime, root: Path) -> list[tuple[str, int]]:
    """Every object under the pipeline's folder (checkpoints, sinks, input), with its size."""
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*")
                  if p.is_file())  # fmt: skip


# -- the app ---------------------------------------------------------------------------------


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """``monitor(folder, role="admin")``: a test client of the app over ``folder`` as an
    Airflow user of ``role`` (the SimpleAuthManager decides what that role may do);
    ``errors=False``: a server error comes back as its page (else the test client raises it)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    init_auth_manager()
    clients: list[TestClient] = []

    def open_monitor(folder: Path, role: str = "admin", errors: bool = True) -> TestClient:
        app = create_app(folder)
        user = SimpleAuthManagerUser(username=role, role=role)
        app.dependency_overrides[get_user] = lambda: user
        clients.append(TestClient(app, raise_server_exceptions=errors))
        return clients[-1]

    yield open_monitor
    for client in clients:
        client.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "pipelines"
    path.mkdir()
    return path


def post(client: TestClient, action: str, form: dict[str, Any]) -> Any:
    return client.post(f"/pipelines/{DAG}/{action}", data=form, headers=ORIGIN,
                       follow_redirects=False)  # fmt: skip


def text_of(page: str, element_id: str) -> str:
    """The text a browser shows of the element with ``element_id`` (tags dropped)."""
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found, f"no #{element_id} in the page"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(2))).strip()


def banner(client: TestClient, answer: Any) -> str:
    """The message banner of the page a redirect leads to."""
    assert answer.status_code == 303, answer.text[:2000]
    page = client.get("/pipelines/" + answer.headers["location"].removeprefix("../")).text
    return text_of(page, "message")


# -- the forms -------------------------------------------------------------------------------


def test_the_forms_offer_what_can_be_restored_and_say_what_a_savepoint_captures(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = history(tmp_path, folder)
    page = monitor(folder).get(f"/pipelines/{DAG}").text

    epoch = re.search(r'<input type="number" name="epoch"[^>]*>', page)
    assert epoch, page
    assert 'min="1"' in epoch.group(0) and 'max="5"' in epoch.group(0)
    listed = re.search(r'<datalist id="restorable-epochs">(.*?)</datalist>', page, re.S)
    assert listed and re.findall(r'value="(\d+)"', listed.group(1)) == ["5", "2", "1"]
    assert text_of(page, "restorable") == "restorable: 1..2, 5"
    # a select of the savepoints that can be restored: "late" (epoch 3, retracted) is not one
    select = re.search(r'<select name="savepoint" required>(.*?)</select>', page, re.S)
    assert select and re.findall(r'<option value="([^"]+)"', select.group(1)) == ["early"]
    assert re.search(r"early · epoch 2 · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d<", select.group(1))
    assert '<tr data-savepoint="late" class="gone" data-retracted-by="5">' in page
    assert "by the rewind at epoch 5: not restorable" in page
    # 8 files; epoch 5 replayed the third (after epoch 2): 5 wait, a savepoint captures 6
    assert text_of(page, "capture") == "captures epoch 6 (the run first processes the 5 new files)"

    for _ in range(5):
        commit_epoch_rows(rt, (1, 0, 0))
    page = monitor(folder).get(f"/pipelines/{DAG}").text
    assert text_of(page, "capture") == "captures epoch 10, the latest (no new input)"


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        ("0", "epoch: 0 is not a whole number >= 1"),
        ("-3", "epoch: -3 is not a whole number >= 1"),
        ("x1", "epoch: 'x1' is not a whole number >= 1"),
        ("", "epoch: required with restore_from=checkpoint (a committed epoch)"),
        ("99", "epoch: no committed checkpoint 99; "),
        ("1", "epoch: no committed checkpoint 1; "),  # retired (below the retention mark)
        ("3", "epoch: the output of epoch 3 was retracted by the rewind that epoch 5 started"),
    ],
)
def test_an_epoch_that_cannot_be_restored_is_refused_in_its_form_and_nothing_is_written(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path, epoch: str, expected: str
) -> None:
    rt = history(tmp_path, folder)
    rt.repo.put_retired_mark(RetiredMark(below=2, created_at=rt.clock()))
    client = monitor(folder)
    before = stored(rt, tmp_path / NAME)

    answer = post(client, "restore", {"kind": "checkpoint", "epoch": epoch})

    assert answer.status_code == 422, answer.text[:2000]
    error = text_of(answer.text, "form-error")
    assert error.startswith("not triggered: " + expected), error
    assert NO_AIRFLOW not in answer.text  # no trigger was attempted
    form = re.search(r'<form [^>]*id="restore-checkpoint".*?</form>', answer.text, re.S)
    assert form and f'value="{epoch}"' in form.group(0)  # the form again, as it was sent
    assert 'action="restore"' in form.group(0)  # relative to the action's own page
    assert 'min="2" max="5"' in form.group(0)  # epoch 1 is retired now
    assert stored(rt, tmp_path / NAME) == before
    if epoch == "99":
        restorable = (
            "restorable committed epochs are 2, 5 (3..4 retracted by a rewind: not restorable)"
        )
        assert restorable in error


def test_a_restore_says_what_it_retracts_and_triggers_only_with_the_token_of_that(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = files_pipeline(tmp_path, folder, 8)
    for rows in ROWS:
        commit_epoch_rows(rt, rows)
    take_savepoint(rt, "at3", 3)
    client = monitor(folder)
    before = stored(rt, tmp_path / NAME)

    first = post(client, "restore", {"kind": "checkpoint", "epoch": "2"})

    assert first.status_code == 200, first.text[:2000]
    assert stored(rt, tmp_path / NAME) == before  # asking wrote nothing, triggered nothing
    assert NO_AIRFLOW not in first.text
    summary = text_of(first.text, "confirm-summary")
    assert summary.startswith("Epoch 5 will continue from checkpoint 2: it replays the input "
                              "after epoch 2, and its commit retracts the output of 2 committed "
                              "epochs (3, 4) from every sink")  # fmt: skip
    sinks = [role.sink.name for role in rt.sinks]
    assert sinks == ["out", "late_records", "dead_letters"]
    assert _cells(first.text) == {
        "3": ["30", "3", "0"], "4": ["40", "0", "4"], "total": ["70", "3", "4"],
    }  # fmt: skip
    assert "at3" in text_of(first.text, "retracted-savepoints")
    token = re.search(r'name="confirm" value="([0-9a-f]{32})"', first.text)
    assert token

    # epoch 5 commits meanwhile: the confirmation is stale, the page says what it is now
    commit_epoch_rows(rt, (50, 5, 0))
    stale = post(client, "restore", {"kind": "checkpoint", "epoch": "2", "confirm": token[1]})
    assert stale.status_code == 409, stale.text[:2000]
    assert "changed since you confirmed (latest epoch now 5)" in text_of(stale.text, "form-error")
    assert _cells(stale.text)["total"] == ["120", "8", "4"]
    assert NO_AIRFLOW not in stale.text
    fresh = re.search(r'name="confirm" value="([0-9a-f]{32})"', stale.text)
    assert fresh and fresh[1] != token[1]

    # the current token: the trigger (no Airflow here, so it reports that it was not answered)
    done = post(client, "restore", {"kind": "checkpoint", "epoch": "2", "confirm": fresh[1]})
    assert NO_AIRFLOW in banner(client, done)
    assert rt.repo.plan(6) is None  # the monitor plans nothing itself


def _cells(page: str) -> dict[str, list[str]]:
    """Rows of the #retracted table: epoch (or "total") -> the rows per sink."""
    table = re.search(r'<table id="retracted">(.*?)</table>', page, re.S)
    assert table, page[:3000]
    found = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)[1:]:
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
                 re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]  # fmt: skip
        found[cells[0]] = cells[1:-1]
    return found


def test_the_trigger_conf_carries_the_latest_epoch_and_plan_refuses_it_once_stale(
    tmp_path: Path, folder: Path
) -> None:
    rt = history(tmp_path, folder)
    preview = preview_restore(rt, {"restore_from": "savepoint", "savepoint": "early"})
    assert (preview.target, preview.latest, [e.epoch for e in preview.epochs]) == (2, 5, [5])
    assert preview.conf == {"restore_from": "savepoint", "savepoint": "early", "expect_latest": 5}
    request = RunRequest.from_conf(NAME, preview.conf)
    assert request.resolve(rt).rewind_to == 2  # as confirmed: fine

    commit_epoch_rows(rt, (1, 0, 0))  # epoch 6 commits before the run plans
    with pytest.raises(InvalidRunRequest) as refused:
        request.resolve(rt)
    assert refused.value.problems == [
        "expect_latest: the latest committed epoch is now 6, not 5: epochs committed (or were "
        "retired) after this request was made, so it would not do what was confirmed; look "
        "again and confirm anew"
    ]


def test_restoring_the_latest_retracts_nothing_and_still_asks(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    history(tmp_path, folder)
    page = post(monitor(folder), "restore", {"kind": "savepoint", "savepoint": "early"})
    assert "retracts the output of 1 committed epoch (5)" in text_of(page.text, "confirm-summary")
    page = post(monitor(folder), "restore", {"kind": "checkpoint", "epoch": "5"})
    assert text_of(page.text, "confirm-summary").startswith("Nothing is retracted")


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        ({"kind": "savepoint", "savepoint": "late"},
         "savepoint: the output of epoch 3 was retracted by the rewind that epoch 5 started"),
        ({"kind": "savepoint", "savepoint": "gone"},
         "savepoint: no savepoint 'gone' (savepoints: early, late)"),
        ({"kind": "savepoint"}, "savepoint: required with restore_from=savepoint"),
    ],
)  # fmt: skip
def test_a_savepoint_that_cannot_be_restored_is_refused_in_its_form(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path, form: dict[str, str],
    expected: str,
) -> None:  # fmt: skip
    rt = history(tmp_path, folder)
    before = stored(rt, tmp_path / NAME)
    answer = post(monitor(folder), "restore", form)
    assert answer.status_code == 422, answer.text[:2000]
    assert text_of(answer.text, "form-error").startswith("not triggered: " + expected)
    select = re.search(r'<select name="savepoint" required>(.*?)</select>', answer.text, re.S)
    assert select and re.findall(r'<option value="([^"]+)"', select.group(1)) == ["early"]
    assert stored(rt, tmp_path / NAME) == before


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("early", "take_savepoint: 'early' already exists (epoch 2); choose another name"),
        ("../x", "take_savepoint: '../x' is not a savepoint name"),
        ("", "take_savepoint: '' is not a savepoint name"),
    ],
)
def test_a_savepoint_name_that_is_taken_or_bad_is_refused_before_triggering(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path, name: str, expected: str
) -> None:
    rt = history(tmp_path, folder)
    before = stored(rt, tmp_path / NAME)
    answer = post(monitor(folder), "savepoint", {"name": name})
    assert answer.status_code == 422, answer.text[:2000]
    assert text_of(answer.text, "form-error").startswith("not triggered: " + expected)
    assert 'name="name" required' in answer.text and "captures epoch 6" in answer.text
    assert stored(rt, tmp_path / NAME) == before


def test_a_new_savepoint_name_goes_to_the_trigger_saying_what_it_captures(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    history(tmp_path, folder)
    client = monitor(folder)
    assert NO_AIRFLOW in banner(client, post(client, "savepoint", {"name": "fresh"}))


def test_a_savepoint_with_nothing_to_capture_is_refused(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    files_pipeline(tmp_path, folder, 0)
    answer = post(monitor(folder), "savepoint", {"name": "first"})
    assert answer.status_code == 422, answer.text[:2000]
    assert text_of(answer.text, "form-error") == (
        "not triggered: take_savepoint: nothing to capture: nothing: no epoch is committed "
        "and there is no input"
    )


def test_a_savepoint_is_deleted_after_a_confirmation(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = history(tmp_path, folder)
    client = monitor(folder)
    page = client.get(f"/pipelines/{DAG}").text
    assert re.search(r'action="sluice__acts/delete-savepoint" class="delete"><input '
                     r'type="hidden" name="name" value="late">', page)  # fmt: skip

    ask = post(client, "delete-savepoint", {"name": "late"})
    assert ask.status_code == 200 and rt.repo.savepoint("late") is not None
    assert "Savepoint late points to epoch 3" in text_of(ask.text, "confirm-summary")
    assert "the rewind at epoch 5 retracted" in text_of(ask.text, "confirm-summary")
    token = re.search(r'name="confirm" value="([0-9a-f]{32})"', ask.text)
    assert token

    wrong = post(client, "delete-savepoint", {"name": "late", "confirm": "0" * 32})
    assert wrong.status_code == 409 and rt.repo.savepoint("late") is not None

    done = post(client, "delete-savepoint", {"name": "late", "confirm": token[1]})
    assert banner(client, done) == "deleted savepoint 'late' (epoch 3)"
    assert rt.repo.savepoint("late") is None and rt.repo.savepoint("early") is not None
    assert 'data-savepoint="late"' not in client.get(f"/pipelines/{DAG}").text

    again = post(client, "delete-savepoint", {"name": "late", "confirm": token[1]})
    assert again.status_code == 422
    assert text_of(again.text, "form-error") == (
        "not deleted: savepoint: no savepoint 'late' (savepoints: early)"
    )


@pytest.mark.parametrize(
    ("action", "form"),
    [
        ("delete-savepoint", {"name": "early"}),
        ("restore", {"kind": "checkpoint", "epoch": "2"}),
        ("savepoint", {"name": "new"}),
    ],
)
def test_actions_refuse_viewers_and_cross_site_posts_and_change_nothing(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path, action: str,
    form: dict[str, str],
) -> None:  # fmt: skip
    rt = history(tmp_path, folder)
    before = stored(rt, tmp_path / NAME)
    viewer = monitor(folder, role="viewer")
    assert viewer.get(f"/pipelines/{DAG}").status_code == 200
    assert post(viewer, action, form).status_code == 403
    admin = monitor(folder)
    cross = admin.post(f"/pipelines/{DAG}/{action}", data=form, follow_redirects=False,
                       headers={"Origin": "http://attacker.example"})  # fmt: skip
    assert cross.status_code == 403
    bare = admin.post(f"/pipelines/{DAG}/{action}", data=form, follow_redirects=False)
    assert bare.status_code == 403  # neither Origin nor Referer
    assert stored(rt, tmp_path / NAME) == before


# -- no server path on any refusal or error page ---------------------------------------------


def _refusal_case(kind: str, rt: Runtime, root: Path) -> tuple[str, str, dict[str, str]]:
    """Prepare the store for refusal ``kind``: (action, expected start of the error, form)."""
    checkpoint = {"kind": "checkpoint"}
    if kind == "planned":  # an uncommitted epoch is in the way of a rewind
        assert PlanOptions().plan(rt, max_units=1) is not None
        return "restore", "epoch: epoch 6 is already planned and not committed", {
            **checkpoint, "epoch": "2"}  # fmt: skip
    if kind == "compacted":  # a sink that cannot retract: a compacted file spans epoch 2
        out = Path(str(rt.spec.sinks[0].storage_path()).removeprefix("file://"))
        out.mkdir(parents=True, exist_ok=True)
        (out / "part-000000000001-000000000005-c00000.parquet").write_bytes(b"")
        return "restore", (
            "epoch: restoring checkpoint 2 retracts the output of epochs 5, but sink 'out': "
            "the compacted file part-000000000001-000000000005-c00000.parquet holds epochs on "
            "both sides of 2"), {**checkpoint, "epoch": "2"}  # fmt: skip
    if kind == "input gone":  # epoch 5 (the rewind's replay) read part-0002.jsonl
        (root / NAME / "in" / "part-0002.jsonl").unlink()
        return "restore", (
            "on_missing_offsets: the source no longer has input that epochs 5 read "
            "(part-0002.jsonl); replaying without it would change the output silently. Put it "
            "back, or set on_missing_offsets=earliest"), {**checkpoint, "epoch": "2"}  # fmt: skip
    cases: dict[str, tuple[str, str, dict[str, str]]] = {
        "out of range": ("restore", "epoch: no committed checkpoint 99; restorable committed "
                         "epochs are 2, 5 (3..4 retracted by a rewind: not restorable)",
                         {**checkpoint, "epoch": "99"}),
        "retired": ("restore", "epoch: no committed checkpoint 1; restorable committed epochs "
                    "are 2, 5", {**checkpoint, "epoch": "1"}),
        "retracted": ("restore", "epoch: the output of epoch 3 was retracted by the rewind "
                      "that epoch 5 started", {**checkpoint, "epoch": "3"}),
        "not a number": ("restore", "epoch: 'x1' is not a whole number >= 1",
                         {**checkpoint, "epoch": "x1"}),
        "unknown savepoint": ("restore", "savepoint: no savepoint 'gone' (savepoints: early, "
                              "late)", {"kind": "savepoint", "savepoint": "gone"}),
        "retracted savepoint": ("restore", "savepoint: the output of epoch 3 was retracted",
                                {"kind": "savepoint", "savepoint": "late"}),
        "taken name": ("savepoint", "take_savepoint: 'early' already exists (epoch 2)",
                       {"name": "early"}),
        "bad name": ("savepoint", "take_savepoint: '../x' is not a savepoint name",
                     {"name": "../x"}),
        "delete unknown": ("delete-savepoint", "savepoint: no savepoint 'gone'",
                           {"name": "gone"}),
    }  # fmt: skip
    return cases[kind]


def _no_server_path(page: str, rt: Runtime, root: Path) -> None:
    """Neither the checkpoint store, the temp folder nor any file:// or s3:// URI is on it."""
    for path in (rt.repo.store.uri(), root.as_uri(), str(root), str(root.resolve()),
                 "file://", "s3://"):  # fmt: skip
        assert path not in page and html.escape(path) not in page, (path, page[:4000])


@pytest.mark.parametrize(
    "kind",
    ["out of range", "retired", "retracted", "not a number", "planned", "compacted",
     "input gone", "unknown savepoint", "retracted savepoint", "taken name", "bad name",
     "delete unknown"],
)  # fmt: skip
def test_no_refusal_shows_a_server_path_but_each_names_the_epochs_and_the_fix(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path, kind: str
) -> None:
    rt = history(tmp_path, folder)
    rt.repo.put_retired_mark(RetiredMark(below=2, created_at=rt.clock()))
    action, expected, form = _refusal_case(kind, rt, tmp_path)
    verb = "deleted" if action == "delete-savepoint" else "triggered"

    answer = post(monitor(folder), action, form)

    assert answer.status_code == 422, answer.text[:2000]
    error = text_of(answer.text, "form-error")
    assert error.startswith(f"not {verb}: {expected}"), error
    _no_server_path(answer.text, rt, tmp_path)


def test_a_savepoint_with_nothing_to_capture_is_refused_without_a_server_path(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = files_pipeline(tmp_path, folder, 0)
    answer = post(monitor(folder), "savepoint", {"name": "first"})
    assert answer.status_code == 422 and "nothing to capture" in answer.text
    _no_server_path(answer.text, rt, tmp_path)


def test_error_pages_and_the_last_refusal_show_no_server_path(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = history(tmp_path, folder)
    client = monitor(folder)
    # a refusal as `plan` recorded it before refusals left the storage out
    store = rt.repo.store.uri()
    rt.repo.record_refusal("manual__old", f"epoch: no committed checkpoint 99 in {store}; "
                           "restorable committed epochs are 1..2, 5", 1)  # fmt: skip
    page = client.get(f"/pipelines/{DAG}").text
    shown = re.search(r'<div id="last-refusal">.*?<div class="errtext">(.*?)</div>', page, re.S)
    assert shown and html.unescape(shown[1]) == (
        "epoch: no committed checkpoint 99 in the checkpoint store; restorable committed "
        "epochs are 1..2, 5"
    )
    _no_server_path(page, rt, tmp_path)
    for answer, status in (
        (client.get("/pipelines/sluice__nope"), 404),
        (post(client, "restore", {"epoch": "2"}), 400),
    ):
        assert answer.status_code == status, answer.text[:2000]
        _no_server_path(answer.text, rt, tmp_path)

    # storage that cannot be read: a manifest that fails its checksum
    manifest = tmp_path / NAME / "ckpt" / NAME / "epochs" / f"{5:012d}" / "checkpoint.json"
    manifest.write_text(manifest.read_text().replace('"epoch": 5', '"epoch": 6'))
    failed = monitor(folder, errors=False).get(f"/pipelines/{DAG}")
    assert failed.status_code == 500, failed.text[:2000]
    reason = text_of(failed.text, "error")
    assert "checksum mismatch" in reason and "epochs/000000000005/checkpoint.json" in reason
    _no_server_path(failed.text, rt, tmp_path)
    overview = monitor(folder).get("/").text
    assert "checksum mismatch" in overview
    _no_server_path(overview, rt, tmp_path)


# -- after an action: the triggered run is in flight until the store shows it -----------------

RUN = "manual__2026-11-27T10:00:00.123456+00:00"


def _page_after(client: TestClient, answer: Any) -> str:
    assert answer.status_code == 303, answer.text[:2000]
    return str(answer.headers["location"]).removeprefix("../")


def _health(page: str) -> str:
    """The health card's text: its state, then what it says."""
    card = re.search(r'<div class="card" data-card="health">(.*?)</div>', page, re.S)
    assert card, page[:3000]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", card[1])).split())


def test_a_confirmed_rewind_is_in_flight_at_once_and_the_page_refreshes_until_it_commits(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import sluice.airflow.monitor as app

    rt = files_pipeline(tmp_path, folder, 4)
    for rows in ROWS:
        commit_epoch_rows(rt, rows)
    sent: list[dict[str, Any]] = []

    def trigger(request: Any, dag: str, conf: dict[str, Any]) -> tuple[bool, str, str]:
        sent.append(conf)
        return True, f"triggered run {RUN} with conf {conf}", RUN

    monkeypatch.setattr(app, "_trigger", trigger)
    client = monitor(folder)
    before = client.get(f"/pipelines/{DAG}").text
    assert _health(before).startswith("health caught up no input waiting")
    assert "location.reload" not in before
    ask = post(client, "restore", {"kind": "checkpoint", "epoch": "2"})
    token = re.search(r'name="confirm" value="([0-9a-f]{32})"', ask.text)
    assert token

    # confirmed: the run exists in Airflow, nothing of it in the store yet
    page = _page_after(client, post(client, "restore", {"kind": "checkpoint", "epoch": "2",
                                                        "confirm": token[1]}))  # fmt: skip
    assert sent == [{"restore_from": "checkpoint", "epoch": 2, "expect_latest": 4}]
    shown = client.get(f"/pipelines/{page}").text
    health = text_of(shown, "message")  # the banner says what was triggered
    assert health.startswith(f"triggered run {RUN}") and "retracts epochs 3..4" in health
    assert _health(shown).startswith("health ok last commit ")
    assert _health(shown).endswith(f"; run {RUN} requested")
    live = text_of(shown, "live")
    assert live.startswith(f"Run {RUN} was triggered") and "refreshes every 10 s" in live
    assert "location.reload" in shown

    # the run plans the rewind (epoch 5): in flight as any epoch
    run_rt = dataclasses.replace(rt, run_id=RUN)
    request = RunRequest.from_conf(NAME, sent[0])
    options = request.resolve(run_rt)
    assert options.plan(run_rt, max_units=1) is not None
    shown = client.get(f"/pipelines/{page}").text
    assert text_of(shown, "live").startswith("Epoch 5 is planned")
    assert "location.reload" in shown

    # it commits (the replay read file 3 of 4: one waits again), nothing refreshes
    commit_epoch_rows(run_rt, (5, 0, 0), options)
    shown = client.get(f"/pipelines/{page}").text
    assert re.fullmatch(r"health ok last commit \d+s ago", _health(shown)), _health(shown)
    assert "location.reload" not in shown
    assert 'id="live"' not in shown and 'id="lost-run"' not in shown


def test_a_triggered_run_stops_being_awaited_once_refused_or_overdue(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    rt = files_pipeline(tmp_path, folder, 2)
    commit_epoch_rows(rt, (1, 0, 0))
    commit_epoch_rows(rt, (1, 0, 0))
    client = monitor(folder)
    now = time.time()
    waiting = client.get(f"/pipelines/{DAG}", params={"run": RUN, "at": now - 5}).text
    assert "location.reload" in waiting and text_of(waiting, "live").startswith(f"Run {RUN}")

    overdue = client.get(f"/pipelines/{DAG}", params={"run": RUN, "at": now - 3600}).text
    assert "location.reload" not in overdue  # checkpoint.timeout is 10 minutes
    assert "the checkpoint store shows nothing of it" in text_of(overdue, "lost-run")

    rt.repo.record_refusal(RUN, "expect_latest: the latest committed epoch is now 3, not 2", 1)
    refused = client.get(f"/pipelines/{DAG}", params={"run": RUN, "at": now - 5}).text
    assert "location.reload" not in refused and 'id="live"' not in refused
    assert "expect_latest: the latest committed epoch is now 3" in refused


# -- counts read as English ------------------------------------------------------------------


def test_one_of_anything_is_singular_on_the_pages(
    monitor: Callable[..., TestClient], tmp_path: Path, folder: Path
) -> None:
    from sluice.monitor.charts import charts
    from sluice.words import count

    rt = files_pipeline(tmp_path, folder, 5)
    for rows in ROWS:
        commit_epoch_rows(rt, rows)
    client = monitor(folder)
    page = client.get(f"/pipelines/{DAG}").text
    assert text_of(page, "capture") == "captures epoch 5 (the run first processes the 1 new file)"
    lag = re.search(r'data-card="lag">lag<b>(.*?)</b><small>(.*?)</small>', page)
    assert lag and lag.groups() == ("1", "file not yet in a committed epoch")
    overview = client.get("/").text
    assert re.search(r'<div class="sub">1 pipeline; health:', overview)
    assert "<td>1 file</td>" in overview

    (tmp_path / NAME / "in" / "part-0005.jsonl").write_bytes(b"")
    page = client.get(f"/pipelines/{DAG}").text
    assert "the 2 new files)" in text_of(page, "capture")
    assert "<td>2 files</td>" in client.get("/").text

    rows = [{"epoch": 1, "committed_at": 10.0, "state_rows": 1, "watermark_us": None}]
    assert charts(rows)[2].legend_text == "last 1 row"
    rows[0]["state_rows"] = 2
    assert charts(rows)[2].legend_text == "last 2 rows"
    assert [count(n, "epochs") for n in (0, 1, 2, 1200)] == [
        "0 epochs", "1 epoch", "2 epochs", "1,200 epochs"]  # fmt: skip
