"""Retention and savepoints: the last ``retained`` checkpoints and every savepoint's are kept
with exactly the state parts they read; the rest goes, also after a crash inside retention,
and a stale attempt cannot bring a retired epoch back."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sluice.contracts.layout import epoch_of, state_epoch_of
from sluice.protocol import (
    EpochRetired,
    Faults,
    Runtime,
    SavepointError,
    commit_epoch,
    delete_savepoint,
    plan_epoch,
    take_savepoint,
)
from sluice.protocol.process import process_attempt
from sluice.storage.local import FINGERPRINT_MEMO
from sluice.testing.memory import (
    STATE_FILE,
    MemoryCompute,
    crashed,
    dead_positions,
    expected_output,
    run_until_drained,
    sink_rows,
    source_of,
)

from tests.protocol.memory.conftest import (
    PER_EPOCH,
    RECORDS,
    assert_exact,
    dead_lines,
    referenced_parts,
    state_folders,
)

Pipeline = Callable[..., Runtime]


def _stored(rt: Runtime) -> dict[str, list[Any]]:
    """What the checkpoint store holds, from a raw listing."""
    keys = [i.key for i in rt.repo.store.list()]
    return {
        "epochs": sorted({e for e in map(epoch_of, keys) if e is not None}),
        "retired": sorted(k for k in keys if k.startswith("retired/")),
        "savepoints": sorted(k for k in keys if k.startswith("savepoints/")),
        "other": sorted(k for k in keys if not k.startswith(("epochs/", "state/", "retired/",
                                                             "savepoints/"))),
    }  # fmt: skip


def test_retention_keeps_the_last_checkpoints_and_every_savepoint(pipeline: Pipeline) -> None:
    rt = pipeline(records=RECORDS[:8], retained=2, compact_every=3)
    run_until_drained(rt, max_units=1, max_epochs=2)
    saved = take_savepoint(rt, "before-upgrade", note="kept by hand")
    assert saved.epoch == 2
    run_until_drained(rt, max_units=1)

    assert _stored(rt) == {
        "epochs": [2, 7, 8], "retired": ["retired/000000000007.json"],
        "savepoints": ["savepoints/before-upgrade.json"], "other": [],
    }  # fmt: skip
    # exactly the parts those checkpoints read: a kept checkpoint's base may be older than it
    assert state_folders(rt) == referenced_parts(rt, [2, 7, 8])
    assert min(state_epoch_of(f + "/") or 0 for f in referenced_parts(rt, [7, 8])) < 7
    assert rt.repo.committed_epochs() == [2, 7, 8]

    delete_savepoint(rt, "before-upgrade")
    source_of(rt).append(*RECORDS[8:])
    run_until_drained(rt, max_units=1)
    assert _stored(rt) == {"epochs": [11, 12], "retired": ["retired/000000000011.json"],
                           "savepoints": [], "other": []}  # fmt: skip
    assert state_folders(rt) == referenced_parts(rt, [11, 12])
    assert all((state_epoch_of(f + "/") or 0) > 2 for f in state_folders(rt))
    assert sink_rows(rt) == expected_output(RECORDS, 1)  # retention never touches output
    assert dead_lines(rt) == dead_positions(RECORDS)


def test_retention_deletes_each_part_folder_whole(pipeline: Pipeline, root: Path) -> None:
    """On disk, with the hidden files kept there (the store's fingerprint memo, Spark's .crc
    files): a retired part leaves no folder behind."""
    rt = pipeline(records=RECORDS[:8], retained=2, compact_every=3)
    folder = root / "checkpoints" / rt.name / "state"
    crc = f".{STATE_FILE}.crc"
    created: set[str] = set()
    while run_until_drained(rt, max_units=1, max_epochs=1):
        for part in folder.iterdir():  # what Spark leaves next to its files
            (part / crc).touch()
            created.add(part.name)

    kept = sorted(p.name for p in folder.iterdir())
    assert kept == sorted(f.removeprefix("state/") for f in referenced_parts(rt))
    assert len(created) == 8 and len(kept) < 8
    for name in kept:
        assert sorted(p.name for p in (folder / name).iterdir()) == [
            crc,
            FINGERPRINT_MEMO,
            STATE_FILE,
        ]


class _Meanwhile(Faults):
    """At ``point``, run ``meanwhile`` (what other processes do while this one sleeps)."""

    def __init__(self, point: str, meanwhile: Callable[[], object]) -> None:
        super().__init__(point)
        object.__setattr__(self, "meanwhile", meanwhile)

    def hit(self, point: str, epoch: int) -> None:
        if point == self.point:
            self.meanwhile()  # type: ignore[attr-defined]


def test_a_stale_attempt_cannot_commit_an_epoch_retention_deleted(pipeline: Pipeline) -> None:
    """A zombie prepared epoch 1 and stopped just before its put-if-absent of C(1); meanwhile
    the pipeline committed every epoch, so retention retired epoch 1 and deleted C(1). The
    zombie wakes: its put succeeds on the empty key, then it reads the mark and backs out."""
    live = pipeline(retained=2)
    zombie = pipeline(
        retained=2,
        faults=_Meanwhile("commit.before_checkpoint",
                          lambda: run_until_drained(live, max_units=PER_EPOCH)),
    )  # fmt: skip
    assert plan_epoch(zombie, max_units=PER_EPOCH) is not None
    stale = process_attempt(zombie, MemoryCompute(), 1)

    with pytest.raises(EpochRetired, match="epoch 1 is retired"):
        commit_epoch(zombie, 1, stale.attempt)

    assert live.repo.latest_epoch() == 6
    assert live.repo.checkpoint(1) is None  # the zombie's checkpoint was deleted again
    assert _stored(live)["epochs"] == [5, 6]
    assert not [f for f in state_folders(live) if stale.attempt in f]
    assert_exact(live)


@pytest.mark.parametrize("point", ["retention.after_mark", "retention.mid_delete"])
def test_a_crash_inside_retention_is_finished_by_the_next_commit(
    pipeline: Pipeline, point: str
) -> None:
    rt = pipeline(retained=2)
    run_until_drained(rt, max_units=PER_EPOCH, max_epochs=3)  # epochs 1..3: 1 retired
    code = crashed(rt, point, 4, lambda r: run_until_drained(r, max_units=PER_EPOCH))
    assert code == -signal.SIGKILL  # epoch 4's commit died retiring epoch 2
    stored = _stored(rt)
    assert "retired/000000000003.json" in stored["retired"]
    if point == "retention.after_mark":
        assert stored["epochs"] == [2, 3, 4]  # the crash left epoch 2 behind...
        assert 2 not in rt.repo.epochs()  # ...but readers skip it: it is below the mark
    else:  # epoch 2 was deleted; the older mark was not
        assert stored["retired"] == ["retired/000000000002.json", "retired/000000000003.json"]

    run_until_drained(rt, max_units=PER_EPOCH)  # the next commits finish the job
    assert _stored(rt) == {"epochs": [5, 6], "retired": ["retired/000000000005.json"],
                           "savepoints": [], "other": []}  # fmt: skip
    assert_exact(rt)


def test_savepoints_name_retained_epochs_only(pipeline: Pipeline) -> None:
    rt = pipeline(retained=2)
    with pytest.raises(SavepointError, match="nothing is committed yet"):
        take_savepoint(rt, "early")
    run_until_drained(rt, max_units=PER_EPOCH)
    with pytest.raises(
        SavepointError, match=r"no committed checkpoint 3 \(retained checkpoints: 5, 6\)"
    ):
        take_savepoint(rt, "late", 3)
    with pytest.raises(SavepointError, match="a name is 1-100 letters"):
        take_savepoint(rt, "../escape")
    take_savepoint(rt, "kept", 5)
    with pytest.raises(SavepointError, match=r"already exists \(epoch 5\)"):
        take_savepoint(rt, "kept")
    assert [s.name for s in rt.repo.savepoints()] == ["kept"]
