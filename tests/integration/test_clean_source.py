"""``clean_source``: read files are archived (or deleted) once no retained checkpoint or
savepoint can replay them — never a file a rewind could still need, each exactly once, also
across a crash between the move and its record."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.monitor.pages import render_pipeline
from sluice.monitor.view import pipeline_view
from sluice.protocol import RunRequest, run_epoch, run_until_drained, take_savepoint
from sluice.protocol.release import released_summary
from sluice.protocol.retention import delete_savepoint
from sluice.report import checkpoint_rows, released_line
from sluice.spec import parse_spec

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
    runtime,
)

FILES = render_click_files(files=8, events_per_file=40, seed=53)
NAMES = [k for k, _ in FILES]


def clean_body(ws: Workspace, mode: str = "archive", retained: int = 2) -> dict[str, Any]:
    body = click_spec_dict(ws, name="cleaned")
    clean = {"mode": mode} | ({"archive_path": ws.uri("archive")} if mode == "archive" else {})
    body["source"] |= {"max_files_per_epoch": 1, "clean_source": clean}
    body["checkpoint"]["retained"] = retained
    return body


def keys(ws: Workspace, sub: str) -> list[str]:
    return sorted(i.key for i in ws.store(sub).list())


def test_archive_moves_each_file_once_no_checkpoint_can_replay_it(
    spark: Any, workspace: Workspace
) -> None:
    ws = workspace
    ws.put_files(FILES[:6])
    spec = parse_spec(clean_body(ws))
    rt = runtime(spec)
    for epoch in range(1, 7):
        assert run_epoch(rt, spark, max_units=1) is not None
        # checkpoints epoch-1 and epoch are kept: a rewind to epoch-1 replays epoch's file
        # (epoch 1's goes at once: no rewind goes back before the first checkpoint)
        oldest = max(epoch - 1, 1)
        assert keys(ws, "archive") == NAMES[:oldest], epoch
        assert keys(ws, "in") == NAMES[oldest:6], epoch
    assert ws.store("archive").get(NAMES[0]) == FILES[0][1]  # moved as it was
    assert released_summary(rt) == {"files": 5, "epochs": [[1, 5]], "pending": []}
    assert_click_output_exact(spec, click_reference(FILES[:6]))


def test_delete_mode_deletes_them(spark: Any, local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files(FILES[:4])
    spec = parse_spec(clean_body(ws, mode="delete", retained=1))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    assert keys(ws, "in") == [] and not Path(ws.uri("archive")[7:]).exists()
    assert released_summary(rt)["files"] == 4
    assert_click_output_exact(spec, click_reference(FILES[:4]))


def test_a_savepoint_holds_its_files_until_it_is_deleted(
    spark: Any, local_workspace: Workspace
) -> None:
    ws = local_workspace
    ws.put_files(FILES[:6])
    spec = parse_spec(clean_body(ws))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=2)
    take_savepoint(rt, "keep")
    run_until_drained(rt, spark, max_units=1)
    # a rewind to the savepoint (epoch 2) replays files 3..6: only 1 and 2 may go
    assert keys(ws, "archive") == NAMES[:2]
    assert keys(ws, "in") == NAMES[2:6]
    summary = released_summary(rt)
    assert summary["pending"] == [3, 4]  # retired epochs whose files wait for the savepoint
    assert released_line(rt) == (
        f"source files archived to {ws.uri('archive')}: 2 (input of epochs 1..2); epochs "
        "3, 4 wait (a savepoint can replay them)"
    )
    rows = {r["epoch"]: r for r in checkpoint_rows(rt)}
    assert rows[2].get("input_released") and not rows[5].get("input_released")
    page = render_pipeline(pipeline_view(rt, "sluice__cleaned"), can_act=False)
    assert '<div class="sub" id="released">source files archived to' in page
    assert "epochs 3, 4 wait (a savepoint can replay them)" in page
    assert page.count("input files cleaned") == 1  # epoch 2, the savepoint's (1 is retired)
    delete_savepoint(rt, "keep")
    ws.put_files(FILES[6:7])
    assert run_epoch(rt, spark, max_units=1) is not None
    assert keys(ws, "archive") == NAMES[:6] and keys(ws, "in") == NAMES[6:7]
    assert released_summary(rt) == {"files": 6, "epochs": [[1, 6]], "pending": []}
    assert_click_output_exact(spec, click_reference(FILES[:7]))


def test_a_rewind_inside_retention_replays_exactly(spark: Any, local_workspace: Workspace) -> None:
    ws = local_workspace
    ws.put_files(FILES[:5])
    spec = parse_spec(clean_body(ws, retained=3) | {"emit": "on_close"})
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.committed_epochs() == [3, 4, 5]
    assert keys(ws, "archive") == NAMES[:3]  # checkpoint 3 is the oldest kept
    request = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": 3})
    plan = request.resolve(rt).plan(rt, max_units=1)
    assert plan is not None and plan.source_range["files"] == [NAMES[3]]
    ws.put_files(FILES[5:6])
    run_until_drained(rt, spark, max_units=1)
    assert_click_output_exact(spec, click_reference(FILES[:6]))
    # kept: 6 (the replay of file 4), 7 (file 5), 8 (file 6); a rewind to 6 replays 7 and 8
    live = [e for e in rt.repo.committed_epochs() if e not in rt.repo.rewound()]
    assert min(live) == 6
    assert keys(ws, "archive") == NAMES[:4] and keys(ws, "in") == NAMES[4:6]


@pytest.mark.parametrize("point", ["release.after_record", "release.after_move"])
def test_a_crash_around_the_move_releases_each_file_once(
    spark: Any, local_workspace: Workspace, tmp_path: Path, point: str
) -> None:
    ws = local_workspace
    ws.put_files(FILES[:5])
    body = clean_body(ws, retained=1)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=2)
    assert keys(ws, "archive") == NAMES[:2]
    code = crash_step(rt, spark, spec_path, point, 3, log=tmp_path / "cli.log")
    assert code == -signal.SIGKILL, (code, (tmp_path / "cli.log").read_text()[-3000:])
    moved = point == "release.after_move"
    assert keys(ws, "archive") == NAMES[: 3 if moved else 2]
    assert released_summary(rt)["pending"] == [3]  # recorded, not marked released
    run_until_drained(rt, spark, max_units=1)  # recovers the commit of 3, then 4 and 5
    assert keys(ws, "archive") == NAMES[:5] and keys(ws, "in") == []
    assert released_summary(rt) == {"files": 5, "epochs": [[1, 5]], "pending": []}
    assert_click_output_exact(spec, click_reference(FILES[:5]))
