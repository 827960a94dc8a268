"""Rewinds (issue #7 part 3, docs/rewind.md) with the files sinks, in-process.

The click pipeline runs one file per epoch. A rewind to epoch k plans the next epoch from
checkpoint k (offsets, watermark, state); its commit retracts the output of the epochs after k
from every sink. After each step the sinks are compared with the independent reference over
exactly the input the pipeline's history now holds.

make test-extended runs this file (the fence, docs/testing.md):
tests/protocol/memory/test_rewind.py runs the same cases without Spark in make test, and the
Airflow tests (test_dag_test.py, test_server.py) rewind through Spark there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sluice.cli import main
from sluice.demo import render_click_files
from sluice.protocol import (
    InvalidRunRequest,
    ProtocolError,
    RunRequest,
    run_until_drained,
    take_savepoint,
)
from sluice.protocol.process import retract_after
from sluice.sinks.compaction import compact
from sluice.spec import parse_spec

from tests.fixtures.pipelines import (
    LOCAL_NOW_S3_SLOW,
    click_reference,
    click_spec_dict,
    committed_rows,
    new_workspace,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

pytestmark = pytest.mark.extended

FILES = render_click_files(files=5, events_per_file=60, seed=41)  # 30 s of clicks each
KEYS = ["user", "window_start"]


def _rewind(rt: Any, conf: dict[str, Any], max_units: int | None = 1) -> Any:
    """What the plan task does with a trigger conf."""
    return RunRequest.from_conf(rt.name, conf).resolve(rt).plan(rt, max_units=max_units)


def _check(spec: Any, files: list[tuple[str, bytes]]) -> None:
    """Every sink holds exactly what a run over ``files`` holds."""
    want = click_reference(files)
    rows = committed_rows(spec, "out")
    assert compare_rows(rows, want.emitted, keys=KEYS) == []
    late = sorted((r["source_file"].rsplit("/", 1)[-1], r["source_line"]) for r in
                  committed_rows(spec, "late_records"))  # fmt: skip
    assert late == sorted((f.rsplit("/", 1)[-1], n) for f, n in want.late)
    dead = sorted((r["file"].rsplit("/", 1)[-1], r["line"]) for r in
                  committed_rows(spec, "dead_letters"))  # fmt: skip
    assert dead == sorted((f.rsplit("/", 1)[-1], n) for f, n, _ in want.dead)
    assert staged_keys(spec) == []


@pytest.fixture(params=LOCAL_NOW_S3_SLOW)
def workspace(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """S3 only in make chaos: tests/faults/test_rewind_sinks.py rewinds on S3 in make test."""
    return new_workspace(request, tmp_path)


def test_rewind_retracts_then_replays_to_the_uninterrupted_output(
    spark: Any, workspace: Any
) -> None:
    ws = workspace
    ws.put_files(FILES)
    spec = parse_spec(click_spec_dict(ws, emit="on_close"))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=4)
    _check(spec, FILES[:4])
    want = click_reference(FILES[:4])
    assert want.late and want.dead, "the input has late and dead records (else this proves less)"

    plan = _rewind(rt, {"restore_from": "checkpoint", "epoch": 2})
    assert plan.epoch == 5  # epoch numbers never go back: every fence stays monotonic
    assert retract_after(plan) == 2
    assert plan.restored_from is not None and plan.restored_from.rewound == (3, 4)
    assert plan.start_offset == rt.repo.checkpoint(2).end_offset
    assert plan.state == rt.repo.checkpoint(2).result.state
    run_until_drained(rt, spark, max_units=1, max_epochs=1)
    # epoch 5 replayed file 3 alone: files 3-4's output is gone, file 3's is back
    _check(spec, FILES[:3])

    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.latest_epoch() == 7
    _check(spec, FILES)


def test_rewinding_twice_and_across_a_rewind(spark: Any, local_workspace: Any) -> None:
    """A second rewind to before the first one's base; an epoch a rewind retracted is no
    base any more; a savepoint restores like its checkpoint; the CLI does the same."""
    ws = local_workspace
    ws.put_files(FILES)
    body = click_spec_dict(ws, emit="on_close")
    spec = parse_spec(body)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=3)
    take_savepoint(rt, "one", epoch=1)
    _rewind(rt, {"restore_from": "checkpoint", "epoch": 2})
    run_until_drained(rt, spark, max_units=1, max_epochs=2)  # epochs 4, 5 = files 3, 4
    _check(spec, FILES[:4])
    assert rt.repo.rewound() == {3: 4}

    with pytest.raises(InvalidRunRequest) as refused:
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 3})
    assert "the output of epoch 3 was retracted by the rewind that epoch 4 started" in str(
        refused.value
    )
    with pytest.raises(InvalidRunRequest) as unknown:  # names what can be restored
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 9})
    assert "restorable committed epochs are 1..2, 4..5 (3 retracted by a rewind" in str(
        unknown.value
    )

    spec_path = ws.root.removeprefix("file://") + "/spec.yaml"
    with open(spec_path, "w") as handle:
        json.dump(body, handle)
    code = main(["run", spec_path, "--restore-from", "savepoint", "--savepoint", "one",
                 "--max-files", "1", "--max-epochs", "1", "--quiet"])  # fmt: skip
    assert code == 0
    plan = rt.repo.plan(6)
    assert plan.restored_from is not None and plan.restored_from.kind == "savepoint"
    assert plan.restored_from.rewound == (2, 4, 5)  # 3 was retracted already
    _check(spec, FILES[:2])
    run_until_drained(rt, spark, max_units=1)
    _check(spec, FILES)


def test_rewind_refusals_write_nothing(spark: Any, local_workspace: Any) -> None:
    ws = local_workspace
    ws.put_files(FILES[:3])
    spec = parse_spec(click_spec_dict(ws, emit="on_close"))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)

    def listing() -> list[str]:
        return sorted(i.key for i in rt.repo.store.list())

    before = listing()
    # offsets behind the committed ones: refused, pointing to the rewind that replays them
    with pytest.raises(InvalidRunRequest) as refused:
        _rewind(rt, {"restore_from": "offsets", "offsets": {"after_key": FILES[1][0]}})
    assert "restore_from=checkpoint with epoch=2, which ends at these offsets" in str(refused.value)
    # the input the rewound epochs read is gone: refused, naming the source and the files
    ws.store("in").delete(FILES[2][0])
    with pytest.raises(InvalidRunRequest) as refused:
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 1})
    message = str(refused.value)
    assert f"the source no longer has input that epochs 2..3 read ({FILES[2][0]})" in message
    assert "on_missing_offsets=earliest" in message
    # allowed, but nothing is left to replay after epoch 2
    with pytest.raises(ProtocolError, match="nothing left to replay after epoch 2"):
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 2, "on_missing_offsets": "earliest"})
    assert listing() == before

    # the explicit option replays what is left and records the gap
    plan = _rewind(rt, {"restore_from": "checkpoint", "epoch": 1, "on_missing_offsets": "earliest"})
    assert plan.restored_from is not None
    assert plan.restored_from.missing_input == (FILES[2][0],)
    run_until_drained(rt, spark, max_units=1)
    _check(spec, FILES[:2])

    # a compacted file spanning the rewind's epoch cannot be split
    report = compact(ws.store("dead"), "jsonl", up_to_epoch=4)
    assert report.written == 1, report  # dead letters in epochs 1 and 4 merged into one file
    before = listing()
    with pytest.raises(InvalidRunRequest) as refused:
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 1})
    assert "holds epochs on both sides of 1" in str(refused.value)
    assert listing() == before
