"""Two attempts of one epoch, and planners at the same time: one wins, the others are
refused or aborted, and the output is published once (qos 1: the loser's direct write is the
at-least-once duplicate it allows)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sluice.contracts.records import AttemptStatus, Plan
from sluice.exceptions import SluiceError
from sluice.protocol import EpochAlreadyCommitted, Runtime, commit_epoch, plan_epoch
from sluice.protocol.process import process_attempt
from sluice.testing.memory import (
    MemoryCompute,
    expected_epochs,
    run_epoch,
    run_until_drained,
    sink_of,
    sink_rows,
)

from tests.protocol.memory.conftest import PER_EPOCH, RECORDS, assert_exact, dead_lines

Pipeline = Callable[..., Runtime]


def test_the_second_attempt_commits_first(pipeline: Pipeline) -> None:
    rt = pipeline()
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None
    first = process_attempt(rt, MemoryCompute(), 1)
    second = process_attempt(pipeline(), MemoryCompute(), 1)  # e.g. a retry on another worker

    won = commit_epoch(rt, 1, second.attempt)
    lost = commit_epoch(rt, 1, first.attempt)

    assert won.attempt == lost.attempt == second.attempt
    statuses = {a.attempt: a.status for a in rt.repo.attempts(1)}
    assert statuses == {first.attempt: AttemptStatus.ABORTED,
                        second.attempt: AttemptStatus.COMMITTED}  # fmt: skip
    assert sink_of(rt).staged() == []
    run_until_drained(rt, max_units=PER_EPOCH)
    assert_exact(rt)


@pytest.mark.parametrize("qos", [2, 1, 0])
def test_a_zombie_attempt_loses_to_the_epoch_committed_meanwhile(
    pipeline: Pipeline, qos: int
) -> None:
    """The zombie starts epoch 2; while it computes, another process plans, processes and
    commits epoch 2; the zombie then stages and tries to commit."""
    rt = pipeline(qos=qos)
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=1)
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None

    def meanwhile(plan: Plan) -> None:
        assert run_epoch(pipeline(qos=qos), max_units=PER_EPOCH) is not None

    zombie = process_attempt(rt, MemoryCompute(on_compute=meanwhile), 2)
    winner = commit_epoch(rt, 2, zombie.attempt)

    assert winner.attempt != zombie.attempt
    attempt = rt.repo.attempt(2, zombie.attempt)
    assert attempt is not None and attempt.status == AttemptStatus.ABORTED
    assert not [f for f in rt.repo.store.list("state/") if zombie.attempt in f.key]
    with pytest.raises(EpochAlreadyCommitted):  # too late even to start
        process_attempt(rt, MemoryCompute(), 2)
    run_until_drained(rt, max_units=PER_EPOCH)
    if qos != 1:
        assert_exact(rt)
        return
    # qos 1 writes directly while processing: the zombie's rows of epoch 2 stay, once more
    epochs = expected_epochs(RECORDS, PER_EPOCH)
    assert sink_rows(rt) == [*epochs[0], *epochs[1], *epochs[1],
                             *[r for e in epochs[2:] for r in e]]  # fmt: skip
    assert dead_lines(rt) == [3, 3, 7]


def test_concurrent_commits_of_one_epoch_publish_it_once(pipeline: Pipeline) -> None:
    rt = pipeline()
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None
    attempts = [process_attempt(pipeline(), MemoryCompute(), 1).attempt for _ in range(3)]
    start = threading.Barrier(len(attempts))
    won: list[str] = []
    errors: list[BaseException] = []

    def commit(attempt: str) -> None:
        try:
            start.wait()
            won.append(commit_epoch(pipeline(), 1, attempt).attempt)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(a,)) for a in attempts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert len(set(won)) == 1 and won[0] in attempts  # every committer names the one winner
    statuses = sorted(a.status for a in rt.repo.attempts(1))
    assert statuses == sorted([AttemptStatus.COMMITTED] + [AttemptStatus.ABORTED] * 2)
    run_until_drained(rt, max_units=PER_EPOCH)
    assert_exact(rt)


@pytest.mark.parametrize("caps", [(2, 2, 2, 2), (1, 2, 3, 4)])
def test_concurrent_planners_agree_on_one_plan(pipeline: Pipeline, caps: tuple[int, ...]) -> None:
    start = threading.Barrier(len(caps))
    plans: list[Any] = []

    def plan(cap: int) -> None:
        start.wait()
        plans.append(plan_epoch(pipeline(), max_units=cap))

    threads = [threading.Thread(target=plan, args=(cap,)) for cap in caps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    stored = pipeline().repo.plan(1)
    assert stored is not None and plans == [stored] * len(caps)
    assert stored.source_range["stop"] in caps  # one planner's caps won, whole


@pytest.mark.parametrize("retained", [10, 2])
def test_runners_racing_through_every_epoch_publish_each_once(
    pipeline: Pipeline, retained: int
) -> None:
    """Three runners (as three Airflow workers would) run plan -> process -> commit on the
    same pipeline at once until it is drained, retention retiring epochs meanwhile. A step
    that loses a race fails (its epoch committed by another runner, its staged files swept
    as a loser's, its plan retired) and the runner goes on, as a task's retry would; the
    output is the oracle's all the same."""
    start = threading.Barrier(3)
    lost: list[str] = []
    errors: list[BaseException] = []

    def runner() -> None:
        rt = pipeline(retained=retained)
        start.wait()
        try:
            for _ in range(60):  # bounded: 6 epochs, each lost race costs a round
                try:
                    if run_epoch(rt, max_units=PER_EPOCH) is None:
                        return
                except SluiceError as exc:
                    lost.append(type(exc).__name__)
            raise AssertionError(f"not drained after 60 rounds: {lost}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    rt = pipeline(retained=retained)
    assert rt.repo.committed_epochs() == [1, 2, 3, 4, 5, 6][-retained:]
    assert_exact(rt)
