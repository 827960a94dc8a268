"""A SIGKILL at every named fault point (sluice.protocol.faults, in a forked child), then a
resume in this process: what each qos level promises, row by row.

* qos 2: every sink ends exactly as the oracle;
* qos 1: nothing is lost; the epoch a crash interrupted after its direct write is written
  again by the attempt that replays it (duplicates, exactly those below);
* qos 0: nothing is duplicated; a crash after the checkpoint and before a sink's write loses
  that sink's rows of the epoch (exactly those below).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from sluice.protocol import ALL_FAULT_POINTS, FAULT_POINTS, Runtime
from sluice.protocol.faults import COMPACTION_FAULT_POINTS, RELEASE_FAULT_POINTS
from sluice.testing.memory import (
    crashed,
    dead_positions,
    expected_epochs,
    run_epoch,
    run_until_drained,
    sink_rows,
)

from tests.protocol.memory.conftest import (
    PER_EPOCH,
    RECORDS,
    assert_exact,
    assert_settled,
    dead_lines,
)

Pipeline = Callable[..., Runtime]
CRASH_EPOCH = 2  # records 2 and 3: one result row, one dead letter
KILLED = -signal.SIGKILL

# sinks whose epoch-2 rows show twice after a qos-1 crash at the point (written directly,
# then again by the replaying attempt); the late sink never has rows here
DUPLICATED = {
    "process.after_state": {"out"},  # the results are written beside the state, before it
    "process.after_prepare": {"out", "dead"},
    "process.after_attempt": {"out", "dead"},
    "commit.before_checkpoint": {"out", "dead"},  # no checkpoint: the epoch is processed again
}
# sinks whose epoch-2 rows a qos-0 crash at the point loses (checkpoint written, not the rows)
LOST = {
    "commit.after_checkpoint": {"out", "dead"},
    "commit.mid_sinks": {"dead"},  # the first sink (results) was written
}
# the qos-0 resume cannot know whether the dead process wrote the rows: it records "lost"
REPORTED_LOST = {"commit.after_checkpoint", "commit.mid_sinks", "commit.after_sinks"}


def _expected(sink: str, qos: int, point: str) -> list[object]:
    """The sink's rows after the crash and the resume, from the oracle."""
    if sink == "out":
        epochs: list[list[object]] = [list(e) for e in expected_epochs(RECORDS, PER_EPOCH)]
    else:
        bad = dead_positions(RECORDS)
        epochs = [[p for p in bad if p // PER_EPOCH == e] for e in range(len(RECORDS) // 2)]
    crash = epochs[CRASH_EPOCH - 1]
    if qos == 1 and sink in DUPLICATED.get(point, set()):
        epochs[CRASH_EPOCH - 1] = crash + crash
    if qos == 0 and sink in LOST.get(point, set()):
        epochs[CRASH_EPOCH - 1] = []
    return [row for rows in epochs for row in rows]


@pytest.mark.parametrize("point", FAULT_POINTS)
@pytest.mark.parametrize("qos", [2, 1, 0])
def test_a_sigkill_at_each_fault_point_then_resume(
    pipeline: Pipeline, qos: int, point: str
) -> None:
    rt = pipeline(qos=qos)
    code = crashed(rt, point, CRASH_EPOCH, lambda r: run_until_drained(r, max_units=PER_EPOCH))
    assert code == KILLED, (point, code)
    # it died inside epoch 2: epoch 1 is committed, epoch 3 was never planned
    assert rt.repo.checkpoint(1) is not None and rt.repo.plan(3) is None
    committed = rt.repo.checkpoint(CRASH_EPOCH) is not None
    in_commit = point.startswith("commit.") and point != "commit.before_checkpoint"
    assert committed == in_commit

    resumed = run_until_drained(pipeline(qos=qos), max_units=PER_EPOCH)

    assert [o.checkpoint.epoch for o in resumed] == list(range(CRASH_EPOCH + committed, 7))
    assert sink_rows(rt, "out") == _expected("out", qos, point)
    assert dead_lines(rt) == _expected("dead", qos, point)
    assert sink_rows(rt, "late") == []
    if qos == 2:
        assert_exact(rt)
    assert_settled(rt)
    marker = rt.repo.sinks_committed(CRASH_EPOCH)
    assert marker is not None
    lost = qos == 0 and point in REPORTED_LOST
    assert marker.output == (
        "lost" if lost else {0: "committed", 1: "written", 2: "committed"}[qos]
    )


def test_a_sigkill_at_every_point_of_one_pipeline(pipeline: Pipeline) -> None:
    """One pipeline (one record an epoch, ``retained: 3`` so every commit retires an epoch,
    a base every 2 deltas) lives through every point, retention and compaction included.

    The release points are not here: the memory source has no input to release (only a files
    source with ``clean_source`` moves its files); the files crash matrix and
    tests/integration/test_clean_source.py kill at them."""
    assert not pipeline().source.releases_input
    points = [p for p in ALL_FAULT_POINTS if p not in RELEASE_FAULT_POINTS]
    records = [(f"k{i % 3}", i) for i in range(3 * len(points) + 4)]
    rt = pipeline(records=records, retained=3, compact_every=2)
    run_until_drained(rt, max_units=1, max_epochs=3)
    for point in points:
        while point in COMPACTION_FAULT_POINTS and not _compacts_next(rt):
            run_epoch(rt, max_units=1)
        epoch = rt.repo.latest_epoch() + 1
        code = crashed(rt, point, epoch, lambda r: run_epoch(r, max_units=1))
        assert code == KILLED, (point, code)
        assert run_epoch(pipeline(records=records, retained=3, compact_every=2), max_units=1)
    run_until_drained(rt, max_units=1)

    assert sink_rows(rt, "out") == [row for e in expected_epochs(records, 1) for row in e]
    assert rt.repo.committed_epochs() == [len(records) - 2, len(records) - 1, len(records)]
    assert_settled(rt)


def _compacts_next(rt: Runtime) -> bool:
    latest = rt.repo.latest_checkpoint()
    assert latest is not None
    return latest.result.state.deltas >= 2
