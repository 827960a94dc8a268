"""``sluice state`` (issue #7 part 5): the state of any retained checkpoint or savepoint equals
what the independent reference computes for that point of the input.

The click pipeline reads one file per epoch; after epoch k its state must hold exactly the
windows still open after the first k files, with every aggregate so far
(:func:`tests.reference.compute_reference` ``open_windows``, computed record by record in plain
Python). The keyed-function view is checked in tests/keyed/test_keyed_pipelines.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sluice.cli import main
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained, take_savepoint
from sluice.spec import parse_spec
from sluice.state_view import StateViewError, resolve_checkpoint, rows_of, state_view

from tests.fixtures.pipelines import click_reference, click_spec_dict, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=3, events_per_file=80, seed=23)
KEYS = ["user", "window_start"]


def test_the_state_of_each_epoch_equals_the_reference_at_that_point(
    spark: Any, local_workspace: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace)
    spec_path = tmp_path / "clicks.yaml"
    spec_path.write_text(json.dumps(body))  # JSON is YAML
    rt = runtime(parse_spec(body))
    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.latest_epoch() == 3
    take_savepoint(rt, "after-two", epoch=2)

    for epoch in (1, 2, 3):
        expected = click_reference(FILES[:epoch]).open_windows
        assert expected, "each point has open windows (the test would prove nothing)"
        view = state_view(spark, rt, resolve_checkpoint(rt, epoch))
        assert view is not None
        rows = rows_of(view)
        assert compare_rows(rows, expected, keys=KEYS) == []
        assert len(rows) == len(expected)
        assert list(rows[0]) == [
            "user",
            "window_start",
            "window_end",
            "clicks",
            "total",
            "biggest",
            "mean",
        ]

    # a savepoint names its checkpoint; a key filter keeps that key's windows only
    two = click_reference(FILES[:2]).open_windows
    user = two[0]["user"]
    view = state_view(spark, rt, resolve_checkpoint(rt, savepoint="after-two"), {"user": user})
    assert view is not None
    mine = [r for r in two if r["user"] == user]
    assert compare_rows(rows_of(view), mine, keys=KEYS) == []

    # the command: JSON of epoch 2 for one key, and the table of the latest checkpoint
    assert main(["state", str(spec_path), "--epoch", "2", "--key", f"user={user}",
                 "--format", "json"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    assert printed["epoch"] == 2 and len(printed["rows"]) == len(mine)
    assert {r["window_start"] for r in printed["rows"]} == {
        str(r["window_start"].replace(tzinfo=None)) for r in mine
    }
    assert main(["state", str(spec_path), "--limit", "2"]) == 0
    table = capsys.readouterr().out
    three = click_reference(FILES).open_windows
    assert "state of pipeline clicks, checkpoint 3" in table
    assert f"{len(three)} row(s), first 2 shown" in table

    # what cannot be shown is refused, naming what exists
    with pytest.raises(StateViewError, match=r"no committed checkpoint 9 \(retained: 1, 2, 3\)"):
        resolve_checkpoint(rt, 9)
    with pytest.raises(StateViewError, match=r"no savepoint 'nope' \(savepoints: after-two\)"):
        resolve_checkpoint(rt, savepoint="nope")
    with pytest.raises(StateViewError, match="--key url: not a key column"):
        state_view(spark, rt, resolve_checkpoint(rt), {"url": "x"})
    assert main(["state", str(spec_path), "--key", "user"]) == 2
    assert "expected COLUMN=VALUE" in capsys.readouterr().err


def test_a_join_state_holds_each_record_that_may_still_match(
    spark: Any, local_workspace: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tumbling window join of persons and auctions, one file of each an epoch: after each
    epoch the view holds exactly the valid records read so far whose window the pipeline's
    watermark has not passed (nothing of the first three files is late), with their key, the
    columns the state keeps and when they leave; ``--key`` keeps one key's rows of both
    sides."""
    from tests.joins.data import _micros
    from tests.joins.pipelines import INPUT, join_spec_dict

    local_workspace.put_files(INPUT.persons, "persons")
    local_workspace.put_files(INPUT.auctions, "auctions")
    body = join_spec_dict(local_workspace, "window")
    spec_path = tmp_path / "join.yaml"
    spec_path.write_text(json.dumps(body))
    rt = runtime(parse_spec(body))
    size = 2_000_000  # the join's 2 s window
    for epoch in (1, 2, 3):
        run_until_drained(rt, spark, max_units=1, max_epochs=1)
        checkpoint = resolve_checkpoint(rt, epoch)
        watermark = checkpoint.result.watermark_us
        assert watermark is not None
        expected = set()
        for side, key in (("persons", "id"), ("auctions", "seller")):
            read = {name for name, _ in getattr(INPUT, side)[:epoch]}
            for line in INPUT.rows(side):
                record = line["record"]
                if line["file"] not in read or not isinstance((record or {}).get("id"), int):
                    continue  # not read yet, or a dead letter
                t = _micros(record["date_time"])
                start = t - t % size
                kept = json.dumps({"id": record["id"]}, separators=(",", ":"))  # Spark's JSON
                if start + size - 1 >= watermark:
                    expected.add((side, record[key], start, t, start + size - 1, kept))
        assert {"persons", "auctions"} <= {e[0] for e in expected}
        view = state_view(spark, rt, checkpoint)
        assert view is not None
        assert view.columns == ["side", "id", "window_start", "event_time", "kept_until",
                                "matched", "record"]  # fmt: skip
        got = view.selectExpr(
            "side", "id", "unix_micros(window_start)", "unix_micros(event_time)",
            "unix_micros(kept_until)", "record",
        ).collect()  # fmt: skip
        assert len(got) == len(expected) == checkpoint.result.state.rows
        assert {tuple(r) for r in got} == expected

    person_key = next(e[1] for e in sorted(expected) if e[0] == "persons")
    assert main(["state", str(spec_path), "--key", f"id={person_key}", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["epoch"] == 3
    assert sorted((r["side"], r["id"]) for r in printed["rows"]) == sorted(
        (e[0], e[1]) for e in expected if e[1] == person_key
    )
