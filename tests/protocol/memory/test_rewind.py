"""Rewinds (docs/rewind.md) to an epoch and to a savepoint: the rewound epochs' output is
retracted and the replay ends exactly where a run that never rewound ends."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from sluice.contracts.records import Plan, Restore
from sluice.protocol import InvalidRunRequest, RunRequest, Runtime, take_savepoint
from sluice.protocol.process import retract_after
from sluice.testing.memory import (
    crashed,
    read_memory_state,
    run_until_drained,
    sink_of,
)

from tests.protocol.memory.conftest import PER_EPOCH, assert_exact

Pipeline = Callable[..., Runtime]


def _rewind(rt: Runtime, conf: dict[str, object]) -> Plan:
    """Plan the rewind a run request asks for (the first epoch of the replay)."""
    options = RunRequest.from_conf(rt.name, conf).resolve(rt)
    plan = options.plan(rt, max_units=PER_EPOCH)
    assert plan is not None
    return plan


def _final_state(rt: Runtime) -> dict[str, int]:
    latest = rt.repo.latest_checkpoint()
    assert latest is not None
    return read_memory_state(rt.repo.store, latest.result.state)


@pytest.mark.parametrize("qos", [2, 1, 0])
def test_a_rewind_retracts_then_replays_to_the_output_of_a_run_that_never_rewound(
    pipeline: Pipeline, root: object, qos: int
) -> None:
    straight = pipeline(name="straight", qos=qos)
    run_until_drained(straight, max_units=PER_EPOCH)
    rt = pipeline(qos=qos)
    run_until_drained(rt, max_units=PER_EPOCH)

    plan = _rewind(rt, {"restore_from": "checkpoint", "epoch": 3})
    assert (plan.epoch, retract_after(plan)) == (7, 3)
    assert plan.restored_from == Restore("checkpoint", 3, retract_after=3, rewound=(4, 5, 6))
    outcomes = run_until_drained(rt, max_units=PER_EPOCH)

    assert [o.checkpoint.epoch for o in outcomes] == [7, 8, 9]
    assert rt.repo.rewound() == {4: 7, 5: 7, 6: 7}
    # the rewound epochs' rows are gone from every sink; the replay's took their place
    assert sink_of(rt).epochs() == [1, 2, 3, 7, 8, 9]
    assert sink_of(rt, "dead").epochs() == [2, 7]
    assert_exact(rt)
    assert _final_state(rt) == _final_state(straight)


def test_a_rewind_to_a_savepoint_and_a_second_rewind_across_the_first(
    pipeline: Pipeline,
) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)
    take_savepoint(rt, "before-change", note="by hand")
    run_until_drained(rt, max_units=PER_EPOCH)

    plan = _rewind(rt, {"restore_from": "savepoint", "savepoint": "before-change"})
    restored = plan.restored_from
    assert restored is not None
    assert (restored.kind, restored.savepoint) == ("savepoint", "before-change")
    run_until_drained(rt, max_units=PER_EPOCH)  # epochs 7..10 replay 3..6
    assert_exact(rt)

    # the epochs the first rewind retracted cannot be rewound to; those before it can
    with pytest.raises(InvalidRunRequest, match="retracted by the rewind that epoch 7 started"):
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 4})
    plan = _rewind(rt, {"restore_from": "checkpoint", "epoch": 1})
    assert retract_after(plan) == 1
    run_until_drained(rt, max_units=PER_EPOCH)
    assert sink_of(rt).epochs() == [1, 11, 12, 13, 14, 15]
    assert_exact(rt)


def test_a_rewind_a_sink_cannot_retract_is_refused_before_anything_is_written(
    pipeline: Pipeline,
) -> None:
    rt = pipeline(retracts=False)
    run_until_drained(rt, max_units=PER_EPOCH)
    with pytest.raises(InvalidRunRequest, match="cannot retract published output"):
        _rewind(rt, {"restore_from": "checkpoint", "epoch": 2})
    assert rt.repo.plan(7) is None
    assert_exact(rt)


@pytest.mark.parametrize("point", ["process.after_prepare", "commit.mid_sinks"])
def test_a_crash_in_the_first_epoch_of_a_rewind_is_finished_by_the_resume(
    pipeline: Pipeline, point: str
) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH)
    _rewind(rt, {"restore_from": "checkpoint", "epoch": 2})
    code = crashed(rt, point, 7, lambda r: run_until_drained(r, max_units=PER_EPOCH))
    assert code == -signal.SIGKILL
    run_until_drained(pipeline(), max_units=PER_EPOCH)
    assert sink_of(rt).epochs() == [1, 2, 7, 8, 9, 10]
    assert_exact(rt)
