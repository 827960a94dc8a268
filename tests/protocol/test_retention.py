"""Retention and savepoints (issue #7, parts 1-2), on a local directory and on real S3.

The click pipeline runs one input file per epoch with ``checkpoint.retained`` = 2. What is
stored is checked by listing the checkpoint store itself (on disk / on SeaweedFS), not through
the repository's filtered view; the output is checked against the independent reference, so
retention provably deletes nothing the pipeline still needs.

make test-extended runs this file (the fence, docs/testing.md):
tests/protocol/memory/test_retention.py runs the same cases without Spark in make test, and
test_crash_matrix.py kills a Spark pipeline inside retention there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sluice.contracts.layout import epoch_of, state_epoch_of
from sluice.demo import render_click_files
from sluice.protocol import (
    EpochRetired,
    Faults,
    InvalidRunRequest,
    RunRequest,
    SavepointError,
    commit_epoch,
    delete_savepoint,
    plan_epoch,
    process_epoch,
    run_until_drained,
    take_savepoint,
)

from tests.fixtures.pipelines import (
    click_reference,
    click_spec,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

pytestmark = pytest.mark.extended

FILES = render_click_files(files=7, events_per_file=60, seed=11)
REFERENCE = click_reference(FILES)


def _spec(ws: Any) -> Any:
    # a new state base every 2 deltas (sluice.state), so parts stop being needed as it runs
    checkpoint = {"storage": ws.uri("ckpt"), "retained": 2, "compact_every": 2}
    return click_spec(ws, checkpoint=checkpoint)


def _needed(rt: Any, epochs: list[int]) -> list[int]:
    """The epochs whose state parts the checkpoints of ``epochs`` read (a base and the
    deltas written since)."""
    needed: set[int] = set()
    for epoch in epochs:
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None
        needed.update(p.epoch for p in checkpoint.result.state.parts)
    return sorted(needed)


def _stored(rt: Any) -> dict[str, Any]:
    """What the checkpoint store holds, from a raw listing."""
    keys = [i.key for i in rt.repo.store.list()]
    return {
        "epochs": sorted({e for e in map(epoch_of, keys) if e is not None}),
        "state": sorted({e for e in map(state_epoch_of, keys) if e is not None}),
        "retired": sorted(k for k in keys if k.startswith("retired/")),
        "savepoints": sorted(k for k in keys if k.startswith("savepoints/")),
        "sources": sorted(k for k in keys if k.startswith("sources/")),
        "other": sorted(
            k
            for k in keys
            if not k.startswith(("epochs/", "state/", "retired/", "savepoints/", "sources/"))
        ),
    }


def _sets_named(rt: Any, epochs: list[int]) -> list[str]:
    """The objects of the sets of files read the checkpoints ``epochs`` end at (each base
    with its key index)."""
    named = set()
    for epoch in epochs:
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None
        read = rt.source.decode_offset(checkpoint.end_offset).read
        named.update(read.objects)
        if read.base:
            named.add(read.base.removesuffix(".json.gz") + ".keys")
    return sorted(named)


def _assert_output_exact(spec: Any, files: list[tuple[str, bytes]] = FILES) -> None:
    reference = REFERENCE if files is FILES else click_reference(files)
    rows = committed_rows(spec, "out")
    assert compare_rows(rows, reference.emitted, keys=["user", "window_start"]) == []


def test_retention_keeps_the_last_checkpoints_and_every_savepoint(
    spark: Any, workspace: Any
) -> None:
    workspace.put_files(FILES[:6])
    spec = _spec(workspace)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_epochs=2, max_units=1)
    saved = take_savepoint(rt, "before-upgrade", note="kept by hand")
    assert saved.epoch == 2
    run_until_drained(rt, spark, max_units=1)

    stored = _stored(rt)
    assert stored["epochs"] == [2, 5, 6]  # the savepoint's and the last two
    # exactly the state parts those read (each reads its base and the deltas since)
    assert stored["state"] == _needed(rt, [2, 5, 6])
    assert stored["retired"] == ["retired/000000000005.json"]
    assert stored["savepoints"] == ["savepoints/before-upgrade.json"]
    assert stored["other"] == []
    # the sets of files read those checkpoints end at, and nothing else
    assert stored["sources"] == _sets_named(rt, [2, 5, 6])
    for epoch in (2, 5, 6):
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None and checkpoint.result.state.uri is not None
        assert rt.repo.sinks_committed(epoch) is not None
    assert rt.repo.latest_epoch() == 6

    # deleting the savepoint lets the next commit retire epoch 2 as well
    delete_savepoint(rt, "before-upgrade")
    workspace.put_files(FILES[6:])
    run_until_drained(rt, spark, max_units=1)
    stored = _stored(rt)
    assert stored["epochs"] == [6, 7]
    assert stored["state"] == _needed(rt, [6, 7])
    assert stored["state"][0] >= 3  # parts of epochs 1 and 2 were deleted with the savepoint
    assert stored["retired"] == ["retired/000000000006.json"]
    assert stored["savepoints"] == []
    assert stored["sources"] == _sets_named(rt, [6, 7])
    _assert_output_exact(spec)


def test_a_stale_attempt_cannot_commit_an_epoch_retention_deleted(
    spark: Any, local_workspace: Any
) -> None:
    """A zombie prepared epoch 1 and stopped just before its put-if-absent of C(1). Meanwhile
    the pipeline committed epochs 1..4, so retention retired epoch 1 and deleted C(1). The
    zombie wakes: its put succeeds on the now-empty key, then it reads the mark and backs out.
    """
    local_workspace.put_files(FILES[:4])
    spec = _spec(local_workspace)
    live = runtime(spec, prefix="live")
    zombie = runtime(
        spec,
        prefix="zombie",
        faults=_Pause(
            "commit.before_checkpoint", lambda: run_until_drained(live, spark, max_units=1)
        ),
    )
    assert plan_epoch(zombie, max_units=1) is not None
    stale = process_epoch(zombie, spark, 1)

    with pytest.raises(EpochRetired, match="epoch 1 is retired"):
        commit_epoch(zombie, 1, stale.attempt)

    assert live.repo.latest_epoch() == 4
    assert live.repo.checkpoint(1) is None  # the zombie's checkpoint was deleted again
    stored = _stored(live)
    assert stored["epochs"] == [3, 4] and stored["state"] == _needed(live, [3, 4])
    assert [k for k in staged_keys(spec) if stale.attempt in k] == []
    _assert_output_exact(spec, FILES[:4])


class _Pause(Faults):
    """At ``point``, run ``meanwhile`` (what other processes do while this one sleeps)."""

    def __init__(self, point: str, meanwhile: Callable[[], Any]) -> None:
        super().__init__(point)
        object.__setattr__(self, "meanwhile", meanwhile)

    def hit(self, point: str, epoch: int) -> None:
        if point == self.point:
            self.meanwhile()  # type: ignore[attr-defined]


class _CrashAt(Faults):
    """Raise instead of SIGKILL, so the test process survives; nothing after the point runs."""

    def hit(self, point: str, epoch: int) -> None:
        if point == self.point:
            raise _Crash(point)


class _Crash(Exception):
    pass


@pytest.mark.parametrize(
    "point", [pytest.param("retention.after_mark", marks=pytest.mark.slow), "retention.mid_delete"]
)
def test_a_crash_inside_retention_is_finished_by_the_next_commit(
    spark: Any, local_workspace: Any, point: str
) -> None:
    local_workspace.put_files(FILES[:5])
    spec = _spec(local_workspace)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=3)  # epochs 1..3; 1 retired
    crashing = runtime(spec, faults=_CrashAt(point))
    with pytest.raises(_Crash):
        run_until_drained(crashing, spark, max_units=1, max_epochs=1)  # epoch 4 retires 2
    stored = _stored(rt)
    assert "retired/000000000003.json" in stored["retired"]
    if point == "retention.after_mark":
        assert stored["epochs"] == [2, 3, 4]  # the crash left epoch 2 behind...
        assert 2 not in rt.repo.epochs()  # ...but readers skip it: it is below the mark
    else:  # epoch 2 was deleted; the older mark was not
        assert stored["retired"] == ["retired/000000000002.json", "retired/000000000003.json"]
    assert rt.repo.latest_epoch() == 4

    run_until_drained(rt, spark, max_units=1)  # epoch 5's commit finishes the job
    stored = _stored(rt)
    assert stored["epochs"] == [4, 5]
    assert stored["state"] == _needed(rt, [4, 5])
    assert stored["retired"] == ["retired/000000000004.json"]
    _assert_output_exact(spec, FILES[:5])


def test_savepoint_names_epochs_and_errors(spark: Any, local_workspace: Any) -> None:
    local_workspace.put_files(FILES[:4])
    spec = _spec(local_workspace)
    rt = runtime(spec)
    with pytest.raises(SavepointError, match="nothing is committed yet"):
        take_savepoint(rt, "first")
    run_until_drained(rt, spark, max_units=1)  # epochs 1..4, 3 and 4 retained
    with pytest.raises(SavepointError, match=r"no committed checkpoint 1 \(retained .*3, 4"):
        take_savepoint(rt, "old", epoch=1)
    with pytest.raises(SavepointError, match="a name is"):
        take_savepoint(rt, "../escape")
    assert take_savepoint(rt, "v1", epoch=3).epoch == 3
    with pytest.raises(SavepointError, match="already exists"):
        take_savepoint(rt, "v1")
    assert [s.name for s in rt.repo.savepoints()] == ["v1"]
    with pytest.raises(SavepointError, match=r"no such savepoint \(savepoints: v1\)"):
        delete_savepoint(rt, "v2")


def test_run_requests_for_savepoints(spark: Any, local_workspace: Any) -> None:
    local_workspace.put_files(FILES[:3])
    spec = _spec(local_workspace)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)  # epochs 1..3
    take_savepoint(rt, "at-2", epoch=2)
    take_savepoint(rt, "at-3", epoch=3)

    def problems(conf: dict[str, Any]) -> list[str]:
        with pytest.raises(InvalidRunRequest) as caught:
            RunRequest.from_conf(rt.name, conf).resolve(rt)
        return caught.value.problems

    assert problems({"restore_from": "savepoint"}) == [
        "savepoint: required with restore_from=savepoint (a savepoint name)"
    ]
    assert problems({"savepoint": "at-3"}) == [
        "savepoint: only used with restore_from=savepoint, not 'latest'"
    ]
    assert "is not a savepoint name" in problems({"take_savepoint": "a/b"})[0]
    assert problems({"take_savepoint": "at-2"})[0].startswith(
        "take_savepoint: 'at-2' already exists (epoch 2)"
    )
    assert problems({"restore_from": "savepoint", "savepoint": "nope"}) == [
        "savepoint: no savepoint 'nope' (savepoints: at-2, at-3)"
    ]
    # the savepoint of an older checkpoint: a rewind (tests/protocol/test_rewind.py)
    older = RunRequest.from_conf(rt.name, {"restore_from": "savepoint", "savepoint": "at-2"})
    options = older.resolve(rt)
    assert options.rewind_to == 2
    assert options.restored_from is not None
    assert options.restored_from.to_dict() == {  # the plan's stored form
        "kind": "savepoint", "epoch": 2, "retract_after": 2, "rewound": [3], "savepoint": "at-2"
    }  # fmt: skip
    # the savepoint of the latest checkpoint: continue from it
    request = RunRequest.from_conf(rt.name, {"restore_from": "savepoint", "savepoint": "at-3"})
    assert request.resolve(rt).start is None
    retired = problems({"restore_from": "checkpoint", "epoch": 1})[0]
    assert "no committed checkpoint 1" in retired and "committed epochs are 2..3" in retired
