"""Races between attempts of one epoch: the checkpoint's put-if-absent picks exactly one winner.

(a) two attempts of the same epoch commit in reverse order; (b) a stale zombie commits an
epoch long after the pipeline moved on; (c) two commits of one epoch at the same moment.
Every case ends with output equal to the independent reference. They run on a
local directory, make chaos on S3 too (S3's conditional put has its own race test in
tests/storage/test_object_store_contract.py).

make test-extended runs this file (the fence, docs/testing.md):
tests/protocol/memory/test_races.py runs the same races without Spark in make test, and
test_sink_matrix.py races two Spark attempts into every sink there.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sluice.contracts.layout import STATE, state_prefix
from sluice.contracts.records import AttemptStatus
from sluice.demo import render_click_files
from sluice.protocol import commit_epoch, plan_epoch, process_epoch, run_epoch, run_until_drained
from sluice.protocol.commit import write_checkpoint

from tests.fixtures.pipelines import (
    LOCAL_NOW_S3_SLOW,
    assert_click_output_exact,
    click_reference,
    click_spec,
    committed_rows,
    runtime,
    staged_keys,
)

pytestmark = pytest.mark.extended

FILES = render_click_files(files=4, events_per_file=80, seed=5)
REFERENCE = click_reference(FILES)


BACKENDS = pytest.mark.parametrize("workspace", LOCAL_NOW_S3_SLOW, indirect=True)


def _staged_of(spec: Any, attempt: str) -> list[str]:
    return [k for k in staged_keys(spec) if attempt in k]


def _state_of(rt: Any, epoch: int, attempt: str) -> list[str]:
    return [i.key for i in rt.repo.store.list(state_prefix(epoch, attempt))]


def _outputs(spec: Any) -> dict[str, Any]:
    return {
        name: sorted(map(repr, committed_rows(spec, name)))
        for name in ("out", "late_records", "dead_letters")
    }


def _assert_exact(spec: Any) -> None:
    assert_click_output_exact(spec, REFERENCE)


@BACKENDS
def test_second_attempt_commits_first(spark: Any, workspace: Any) -> None:
    workspace.put_files(FILES)
    spec = click_spec(workspace)
    rt = runtime(spec)
    plan = plan_epoch(rt, max_units=2)
    assert plan is not None and plan.epoch == 1
    first = process_epoch(rt, spark, 1)
    second = process_epoch(rt, spark, 1)
    assert first.attempt != second.attempt
    assert first.status == second.status == AttemptStatus.PREPARED
    assert _staged_of(spec, first.attempt) and _state_of(rt, 1, first.attempt)

    won = commit_epoch(rt, 1, second.attempt)
    assert won.attempt == second.attempt
    after_win = _outputs(spec)

    # A loser whose commit looked for C(1) just before the winner wrote it, and reads its own
    # record just after the winner aborted it, gets the winner too (not NoPreparedAttempt).
    assert write_checkpoint(rt, 1, first.attempt).to_dict() == won.to_dict()
    lost = commit_epoch(rt, 1, first.attempt)
    assert lost.attempt == second.attempt != first.attempt
    assert lost.to_dict() == won.to_dict()
    assert _staged_of(spec, first.attempt) == []
    assert _state_of(rt, 1, first.attempt) == []
    assert _state_of(rt, 1, second.attempt) != []
    first_record = rt.repo.attempt(1, first.attempt)
    second_record = rt.repo.attempt(1, second.attempt)
    assert first_record is not None and first_record.status == AttemptStatus.ABORTED
    assert second_record is not None and second_record.status == AttemptStatus.COMMITTED
    assert _outputs(spec) == after_win  # the loser's commit published nothing

    run_until_drained(rt, spark, max_units=2)
    assert rt.repo.latest_epoch() == 2
    _assert_exact(spec)


@BACKENDS
def test_stale_zombie_commit_changes_nothing(spark: Any, workspace: Any) -> None:
    workspace.put_files(FILES)
    spec = click_spec(workspace)
    zombie, live = runtime(spec, prefix="zombie"), runtime(spec, prefix="live")
    assert plan_epoch(zombie, max_units=2) is not None
    stale = process_epoch(zombie, spark, 1)
    assert _staged_of(spec, stale.attempt) and _state_of(zombie, 1, stale.attempt)

    fresh = process_epoch(live, spark, 1)
    assert commit_epoch(live, 1, fresh.attempt).attempt == fresh.attempt
    outcome = run_epoch(live, spark, max_units=2)
    assert outcome is not None and outcome.checkpoint.epoch == 2 and outcome.won
    before = _outputs(spec)
    epochs_before = {e: sorted(n) for e, n in live.repo.epochs().items()}
    checkpoint_1 = live.repo.checkpoint(1)
    assert checkpoint_1 is not None

    returned = commit_epoch(zombie, 1, stale.attempt)

    assert returned.attempt == fresh.attempt
    assert returned.to_dict() == checkpoint_1.to_dict()
    assert _outputs(spec) == before
    assert {e: sorted(n) for e, n in live.repo.epochs().items()} == epochs_before
    assert live.repo.latest_epoch() == 2
    assert _staged_of(spec, stale.attempt) == []
    assert _state_of(live, 1, stale.attempt) == []
    record = live.repo.attempt(1, stale.attempt)
    assert record is not None and record.status == AttemptStatus.ABORTED
    assert run_until_drained(live, spark) == []  # nothing left: the zombie did not rewind
    _assert_exact(spec)


@BACKENDS
def test_concurrent_commits_of_one_epoch(spark: Any, workspace: Any) -> None:
    workspace.put_files(FILES)
    spec = click_spec(workspace)
    rts = [runtime(spec, prefix="x"), runtime(spec, prefix="y")]
    assert plan_epoch(rts[0], max_units=2) is not None
    records = [process_epoch(rt, spark, 1) for rt in rts]
    assert records[0].attempt != records[1].attempt

    barrier = threading.Barrier(2)
    returned: list[Any] = [None, None]
    failures: list[BaseException] = []

    def commit(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            returned[i] = commit_epoch(rts[i], 1, records[i].attempt)
        except BaseException as exc:  # reported below, with the other thread's result
            failures.append(exc)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert returned[0].to_dict() == returned[1].to_dict()
    winner = returned[0].attempt
    assert winner in {r.attempt for r in records}
    loser = next(r.attempt for r in records if r.attempt != winner)

    checkpoint = rts[0].repo.checkpoint(1)
    assert checkpoint is not None and checkpoint.attempt == winner
    assert rts[0].repo.sinks_committed(1) is not None
    statuses = {a.attempt: a.status for a in rts[0].repo.attempts(1)}
    assert statuses == {winner: AttemptStatus.COMMITTED, loser: AttemptStatus.ABORTED}
    assert staged_keys(spec) == []
    state_dirs = {i.key[len(STATE) :].split("/", 1)[0] for i in rts[0].repo.store.list(STATE)}
    assert state_dirs <= {f"{1:012d}-{winner}"}
    assert len(committed_rows(spec, "out")) == checkpoint.result.stats.windows_emitted

    run_until_drained(rts[1], spark, max_units=2)
    assert rts[1].repo.latest_epoch() == 2
    _assert_exact(spec)
