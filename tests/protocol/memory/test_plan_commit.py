"""Plan, process and commit through the real protocol, on the in-memory pipeline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from sluice.contracts.records import AttemptStatus
from sluice.protocol import (
    EpochAlreadyCommitted,
    EpochBeyondNext,
    NoPlan,
    Runtime,
    commit_epoch,
    plan_epoch,
)
from sluice.protocol.process import process_attempt, refuse_beyond_next
from sluice.protocol.runtime import SinkRole
from sluice.testing.memory import (
    MemoryCompute,
    RowsSink,
    expected_epochs,
    read_memory_state,
    run_until_drained,
    sink_of,
    sink_rows,
    source_of,
)

from tests.protocol.memory.conftest import PER_EPOCH, RECORDS, assert_exact, state_folders

Pipeline = Callable[..., Runtime]
FATE = {0: "committed", 1: "written", 2: "committed"}


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_every_qos_level_gives_the_oracle_output(pipeline: Pipeline, qos: int) -> None:
    rt = pipeline(qos=qos)
    outcomes = run_until_drained(rt, max_units=PER_EPOCH)

    assert [o.checkpoint.epoch for o in outcomes] == [1, 2, 3, 4, 5, 6]
    assert all(o.won for o in outcomes)
    assert_exact(rt)
    for epoch, rows in enumerate(expected_epochs(RECORDS, PER_EPOCH), 1):
        checkpoint = rt.repo.checkpoint(epoch)
        marker = rt.repo.sinks_committed(epoch)
        assert checkpoint is not None and marker is not None
        assert marker.output == FATE[qos]
        stats = checkpoint.result.stats
        assert stats.records_read == PER_EPOCH == stats.input_units
        assert stats.records_read == stats.accepted + stats.late + stats.dead + stats.filtered
        assert stats.windows_emitted == len(rows)
        attempt = rt.repo.attempt(epoch, checkpoint.attempt)
        assert attempt is not None and attempt.engine is not None
        assert attempt.engine["engine"] == "memory"
    final = rt.repo.latest_checkpoint()
    assert final is not None
    assert read_memory_state(rt.repo.store, final.result.state) == {
        "a": 17, "b": 18, "c": 11, "d": 9,
    }  # fmt: skip
    assert run_until_drained(rt, max_units=PER_EPOCH) == []  # drained: nothing planned
    assert rt.repo.plan(7) is None


@pytest.mark.parametrize(("qos", "visible_after"), [(2, "commit"), (1, "process"), (0, "process")])
def test_output_becomes_visible_at_the_step_the_level_promises(
    pipeline: Pipeline, qos: int, visible_after: str
) -> None:
    rt = pipeline(qos=qos)
    plan = plan_epoch(rt, max_units=PER_EPOCH)
    assert plan is not None
    record = process_attempt(rt, MemoryCompute(), plan.epoch)
    after_process = sink_rows(rt)
    checkpoint_after_process = rt.repo.checkpoint(1) is not None
    commit_epoch(rt, 1, record.attempt)

    first = expected_epochs(RECORDS, PER_EPOCH)[0]
    assert sink_rows(rt) == first
    assert after_process == (first if visible_after == "process" else [])
    # qos 0 commits the offsets before writing the output; 1 and 2 leave it to the commit step
    assert checkpoint_after_process == (qos == 0)


def test_a_stored_plan_is_replayed_verbatim(pipeline: Pipeline) -> None:
    rt = pipeline(records=RECORDS[:3])
    plan = plan_epoch(rt, max_units=5)
    assert plan is not None and plan.source_range == {"type": "memory", "start": 0, "stop": 3}
    source_of(rt).append(*RECORDS[3:])
    # a retry (any caps) gets the same plan: the input of an epoch is fixed once planned
    assert plan_epoch(rt, max_units=1) == plan
    assert plan_epoch(pipeline(), max_units=10) == plan
    run_until_drained(rt, max_units=PER_EPOCH)
    ranges = [rt.repo.plan(e).source_range for e in rt.repo.committed_epochs()]  # type: ignore[union-attr]
    assert [(r["start"], r["stop"]) for r in ranges] == [(0, 3), (3, 5), (5, 7), (7, 9),
                                                          (9, 11), (11, 12)]  # fmt: skip
    assert sum(rt.repo.checkpoint(e).result.stats.records_read  # type: ignore[union-attr]
               for e in rt.repo.committed_epochs()) == len(RECORDS)  # fmt: skip


def test_caps_and_an_empty_source(pipeline: Pipeline) -> None:
    rt = pipeline(records=[])
    assert plan_epoch(rt) is None
    with pytest.raises(NoPlan):
        process_attempt(rt, MemoryCompute())  # nothing planned: refused, nothing written
    assert rt.repo.attempts(1) == []
    source_of(rt).append(*RECORDS)
    plan = plan_epoch(rt, max_records=4)
    assert plan is not None and plan.end_offset == {"type": "memory", "next_record": 4}
    plan = plan_epoch(pipeline(), max_units=1)  # stored: the caps of a retry change nothing
    assert plan is not None and plan.end_offset == {"type": "memory", "next_record": 4}


def test_an_attempt_of_a_committed_epoch_is_refused(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)
    winner = rt.repo.checkpoint(1)
    assert winner is not None
    with pytest.raises(EpochAlreadyCommitted) as refused:
        process_attempt(rt, MemoryCompute(), 1)
    assert winner.attempt in str(refused.value)
    assert len(rt.repo.attempts(1)) == 1


def test_an_attempt_of_an_epoch_beyond_the_next_is_refused(pipeline: Pipeline) -> None:
    rt = pipeline()
    with pytest.raises(EpochBeyondNext) as refused:
        process_attempt(rt, MemoryCompute(), 2)  # nothing committed yet: the next is 1
    assert (refused.value.pipeline, refused.value.epoch, refused.value.next_epoch) == (
        rt.name, 2, 1)  # fmt: skip
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=2)
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None  # epoch 3, planned
    for asked in (4, 9):
        with pytest.raises(EpochBeyondNext) as refused:
            process_attempt(rt, MemoryCompute(), asked)
        assert str(refused.value) == (
            f"pipeline {rt.name}: epoch {asked} cannot be processed: the next epoch is 3 "
            "(epochs run in order, each from the checkpoint before it). Process epoch 3 first "
            "(sluice process SPEC without --epoch takes the next one; sluice plan SPEC plans it "
            "if it has no plan); nothing was read or written"
        )
    assert [rt.repo.attempts(e) for e in (3, 4, 9)] == [[], [], []]  # nothing recorded
    assert rt.repo.plan(4) is None and rt.repo.latest_epoch() == 2
    with pytest.raises(EpochBeyondNext):  # the read-only check of sluice process / serve
        refuse_beyond_next(rt.name, rt.repo, 4)
    refuse_beyond_next(rt.name, rt.repo, 3)
    record = process_attempt(rt, MemoryCompute(), 3)  # the next one still runs
    assert record.epoch == 3 and record.status == AttemptStatus.PREPARED
    commit_epoch(rt, 3, record.attempt)
    run_until_drained(rt, max_units=PER_EPOCH)
    assert_exact(rt)


class _BrokenSink(RowsSink):
    """Fails its first ``prepare``, as a sink whose database is down would."""

    failures = 0

    def prepare(self, epoch: int, attempt: str, df: Any, rows: int | None) -> Any:
        if _BrokenSink.failures == 0:
            _BrokenSink.failures += 1
            raise OSError("the dead-letter table is not reachable")
        return super().prepare(epoch, attempt, df, rows)


def test_a_failed_attempt_is_recorded_cleaned_up_and_never_reused(pipeline: Pipeline) -> None:
    rt = pipeline()
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=1)
    broken = _BrokenSink("dead", sink_of(rt, "dead").store)
    rt = replace(rt, sinks=(*rt.sinks[:2], SinkRole(broken, "dead")))
    assert plan_epoch(rt, max_units=PER_EPOCH) is not None  # epoch 2 holds a dead letter
    with pytest.raises(OSError, match="not reachable"):
        process_attempt(rt, MemoryCompute(), 2)

    [failed] = rt.repo.attempts(2)
    assert failed.status == AttemptStatus.FAILED
    assert failed.error == "OSError: the dead-letter table is not reachable"
    assert {f.split("/")[1][:12] for f in state_folders(rt)} == {f"{1:012d}"}  # its part: gone
    assert sink_of(rt, "out").staged() == []  # and its staged results
    record = process_attempt(rt, MemoryCompute(), 2)  # a new attempt, never the failed one
    assert record.attempt != failed.attempt
    commit_epoch(rt, 2, record.attempt)
    run_until_drained(rt, max_units=PER_EPOCH)
    assert {a.attempt: a.status for a in rt.repo.attempts(2)} == {
        failed.attempt: AttemptStatus.FAILED, record.attempt: AttemptStatus.COMMITTED,
    }  # fmt: skip
    assert_exact(rt)


def test_state_is_compacted_into_a_base_every_few_deltas(pipeline: Pipeline) -> None:
    rt = pipeline(compact_every=2)
    run_until_drained(rt, max_units=PER_EPOCH)
    kinds = []
    for epoch in rt.repo.committed_epochs():
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None
        kinds.append("".join(p.kind[0] for p in checkpoint.result.state.parts))
    # a base after two deltas, then deltas on top of it
    assert kinds == ["d", "dd", "b", "bd", "bdd", "b"]
    assert_exact(rt)


def test_a_sinks_receipt_is_stored_with_the_epoch_and_shown_by_checkpoints(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that says where it holds the epoch (an Iceberg snapshot, a Kafka transaction)
    has it kept in sinks-committed.json and printed by ``sluice checkpoints``."""
    from rich.console import Console
    from sluice.contracts.layout import sinks_committed_key
    from sluice.report import checkpoint_rows, checkpoint_table

    commit = RowsSink.commit

    def commit_with_receipt(self: RowsSink, prepared: Any) -> str | None:
        commit(self, prepared)
        return f"part {prepared.epoch}" if self.name == "out" else None

    monkeypatch.setattr(RowsSink, "commit", commit_with_receipt)
    rt = pipeline(qos=2)
    run_until_drained(rt, max_units=PER_EPOCH)
    marker = rt.repo.sinks_committed(2)
    assert marker is not None and marker.published == {"out": "part 2"}
    assert "published" in rt.repo.store.get(sinks_committed_key(2)).decode()
    rows = checkpoint_rows(rt)
    assert [r["published"] for r in rows] == [{"out": f"part {e}"} for e in range(1, 7)]
    console = Console(width=400, record=True)
    console.print(checkpoint_table(rt, rows))
    assert "out: part 6" in console.export_text()
