"""Run requests that move the start (``restore_from: offsets``) and spec changes under a
stored state (sluice.protocol.upgrade), on the in-memory pipeline."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from sluice.contracts.records import Restore
from sluice.protocol import InvalidRunRequest, RunRequest, Runtime, SpecChanged, plan_epoch
from sluice.spec.model import StateSpec
from sluice.testing.memory import (
    expected_output,
    read_memory_state,
    run_until_drained,
    sink_rows,
)

from tests.protocol.memory.conftest import PER_EPOCH, RECORDS, assert_settled, dead_lines

Pipeline = Callable[..., Runtime]


def test_offsets_ahead_skip_input_and_offsets_behind_are_refused(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)  # records 0..3

    def request(offsets: object) -> RunRequest:
        return RunRequest.from_conf(rt.name, {"restore_from": "offsets", "offsets": offsets})

    with pytest.raises(InvalidRunRequest, match="behind the committed offsets"):
        request({"next_record": 1}).resolve(rt)
    with pytest.raises(InvalidRunRequest, match=re.escape('offsets: expected {"next_record"')):
        request({"next": 6}).resolve(rt)
    assert rt.repo.plan(3) is None  # refused: nothing written

    plan = request({"next_record": 6}).resolve(rt).plan(rt, max_units=PER_EPOCH)
    assert plan is not None and plan.start_offset == {"type": "memory", "next_record": 6}
    assert plan.restored_from is not None
    assert plan.restored_from == Restore(
        "offsets", requested={"next_record": 6}, skipped_from={"type": "memory", "next_record": 4}
    )
    run_until_drained(rt, max_units=PER_EPOCH)
    kept = RECORDS[:4] + RECORDS[6:]  # records 4 and 5 were skipped, as asked
    assert sink_rows(rt) == expected_output(kept, PER_EPOCH)
    assert dead_lines(rt) == [3, 7]
    assert_settled(rt)


def test_a_spec_change_that_drops_state_needs_allowing(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)
    changed = replace(rt, spec=replace(rt.spec, key_by=("key", "value")))
    with pytest.raises(SpecChanged, match="key_by"):
        plan_epoch(changed, max_units=PER_EPOCH)
    assert rt.repo.plan(3) is None

    plan = plan_epoch(changed, max_units=PER_EPOCH, allow_state_drop=True)
    assert plan is not None and plan.state.parts == ()  # the state starts empty
    assert plan.state_migration is not None and plan.state_migration.to_dict()["reset_all"] is True
    run_until_drained(changed, max_units=PER_EPOCH)
    # totals restart at epoch 3: the oracle of the records from there on
    assert sink_rows(rt) == (expected_output(RECORDS[:4], PER_EPOCH)
                             + expected_output(RECORDS[4:], PER_EPOCH))  # fmt: skip
    assert_settled(rt)


def test_a_compatible_spec_change_keeps_the_state(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)
    process = rt.spec.process
    assert process is not None
    more = replace(process, state=(*process.state, StateSpec("seen", "value", "long")))
    upgraded = replace(rt, spec=replace(rt.spec, process=more))
    plan = plan_epoch(upgraded, max_units=PER_EPOCH)
    assert plan is not None and plan.state_migration is not None
    assert plan.state_migration.to_dict()["added"] == ["state seen: added (value<long>)"]
    checkpoint = rt.repo.checkpoint(2)
    assert checkpoint is not None and plan.state == checkpoint.result.state
    assert read_memory_state(rt.repo.store, plan.state) == {"a": 4, "b": 2}
    run_until_drained(upgraded, max_units=PER_EPOCH)
    assert sink_rows(rt) == expected_output(RECORDS, PER_EPOCH)
