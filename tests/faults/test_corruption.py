"""Corrupted checkpoint storage is reported, never trusted and never overwritten.

After two committed epochs: a truncated checkpoint, a checkpoint with one byte changed inside
its body, and a corrupted plan of an uncommitted epoch must each make the next step raise
CorruptObject naming the damaged key, leave the damaged bytes exactly as they were, and make
``sluice checkpoints`` exit non-zero with the key on stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.contracts.layout import checkpoint_key, plan_key
from sluice.demo import render_click_files
from sluice.protocol import plan_epoch, process_epoch, run_until_drained
from sluice.protocol.restore import QUARANTINE, restore_after_damage
from sluice.spec import parse_spec
from sluice.storage import CorruptObject, LocalObjectStore
from sluice.storage.local import FINGERPRINT_MEMO

from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=60, seed=9)
REFERENCE = click_reference(FILES)


def _two_epochs(spark: Any, workspace: Any, tmp_path: Path) -> tuple[Any, Any, Path]:
    workspace.put_files(FILES)
    body = click_spec_dict(workspace)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    assert len(run_until_drained(rt, spark, max_epochs=2, max_units=2)) == 2
    return spec, rt, spec_path


def _flip_body_byte(data: bytes) -> bytes:
    """Change one digit of ``committed_at`` (or ``created_at``): valid JSON, wrong checksum."""
    match = re.search(rb'"(committed_at|created_at)": (\d)', data)
    assert match is not None
    pos = match.start(2)
    flipped = b"7" if data[pos : pos + 1] != b"7" else b"3"
    return data[:pos] + flipped + data[pos + 1 :]


def _cli_checkpoints(spec_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="1000")
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli", "checkpoints", str(spec_path)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _assert_reported(spec_path: Path, rt: Any, key: str, damaged: bytes, *steps: Any) -> None:
    for step in steps:
        with pytest.raises(CorruptObject) as caught:
            step()
        assert key in str(caught.value), str(caught.value)
        assert caught.value.uri == rt.repo.store.uri(key)
        assert rt.repo.store.get(key) == damaged  # nothing overwritten
    proc = _cli_checkpoints(spec_path)
    assert proc.returncode != 0, proc.stdout
    assert key in " ".join(proc.stderr.split()), proc.stderr
    assert rt.repo.store.get(key) == damaged


def test_truncated_checkpoint(spark: Any, workspace: Any, tmp_path: Path) -> None:
    spec, rt, spec_path = _two_epochs(spark, workspace, tmp_path)
    key = checkpoint_key(2)
    original = rt.repo.store.get(key)
    damaged = original[: len(original) // 2]
    rt.repo.store.put(key, damaged)

    fresh = runtime(spec)
    _assert_reported(
        spec_path, rt, key, damaged,
        lambda: plan_epoch(fresh, max_units=2),
        lambda: run_until_drained(fresh, spark, max_units=2),
    )  # fmt: skip
    assert fresh.repo.plan(3) is None  # no epoch was planned on top of a corrupt commit point


def test_flipped_byte_in_checkpoint_body(spark: Any, workspace: Any, tmp_path: Path) -> None:
    spec, rt, spec_path = _two_epochs(spark, workspace, tmp_path)
    key = checkpoint_key(2)
    damaged = _flip_body_byte(rt.repo.store.get(key))
    rt.repo.store.put(key, damaged)

    fresh = runtime(spec)
    with pytest.raises(CorruptObject, match="checksum mismatch") as caught:
        plan_epoch(fresh, max_units=2)
    assert key in str(caught.value)
    _assert_reported(spec_path, rt, key, damaged,
                     lambda: run_until_drained(fresh, spark, max_units=2))  # fmt: skip
    assert fresh.repo.plan(3) is None


def test_corrupt_plan_of_uncommitted_epoch(spark: Any, workspace: Any, tmp_path: Path) -> None:
    spec, rt, spec_path = _two_epochs(spark, workspace, tmp_path)
    plan = plan_epoch(rt, max_units=2)
    assert plan is not None and plan.epoch == 3
    key = plan_key(3)
    damaged = _flip_body_byte(rt.repo.store.get(key))
    rt.repo.store.put(key, damaged)

    fresh = runtime(spec)
    _assert_reported(
        spec_path, rt, key, damaged,
        lambda: plan_epoch(fresh, max_units=2),
        lambda: process_epoch(fresh, spark, 3),
        lambda: run_until_drained(fresh, spark, max_units=2),
    )  # fmt: skip
    assert fresh.repo.checkpoint(3) is None


def _state_data_key(state: Any) -> str:
    """A Parquet data file of the newest state part: the one the next epoch reads last."""
    assert state.parts, state
    part = state.parts[-1]
    return next(f"{part.key}/{name}" for name, _ in part.files if "part-" in name)


# S3 fingerprints are the server's ETags, local ones SHA-256: one damage on each in make test.
STATE_DAMAGE = [
    pytest.param("s3", "truncated", id="s3-truncated"),
    pytest.param("local", "altered", id="local-altered"),
    pytest.param("local", "missing", id="local-missing", marks=pytest.mark.slow),
    pytest.param("s3", "altered", id="s3-altered", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("workspace", "damage"), STATE_DAMAGE, indirect=["workspace"])
def test_damaged_state_file(spark: Any, workspace: Any, tmp_path: Path, damage: str) -> None:
    """The state snapshot of checkpoint 2 is Parquet written by Spark; the checkpoint records
    each file's size and digest, so the next epoch refuses to read a damaged one. On local disk
    the store remembers the digests from the write (its memo): a byte altered in place, the
    size and mtime kept, is still found."""
    spec, rt, spec_path = _two_epochs(spark, workspace, tmp_path)
    checkpoint = rt.repo.checkpoint(2)
    assert checkpoint is not None
    key = _state_data_key(checkpoint.result.state)
    original = rt.repo.store.get(key)
    store = rt.repo.store
    if isinstance(store, LocalObjectStore):  # its digests are remembered since the write
        assert (store.root / key).parent.joinpath(FINGERPRINT_MEMO).is_file()
    if damage == "truncated":
        rt.repo.store.put(key, original[: len(original) - 100])
    elif damage == "altered" and isinstance(store, LocalObjectStore):
        path = store.root / key  # same size, same file, same mtime, one byte changed
        before = path.stat()
        with path.open("r+b") as f:
            f.seek(len(original) // 2)
            f.write(bytes([original[len(original) // 2] ^ 1]))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif damage == "altered":  # same size, one byte changed
        pos = len(original) // 2
        rt.repo.store.put(key, original[:pos] + bytes([original[pos] ^ 1]) + original[pos + 1 :])
    else:
        rt.repo.store.delete(key)

    fresh = runtime(spec)
    assert plan_epoch(fresh, max_units=2) is not None  # the plan only refers to the snapshot
    with pytest.raises(CorruptObject, match="corrupt state: state file") as caught:
        process_epoch(fresh, spark, 3)
    assert caught.value.uri == rt.repo.store.uri(key)
    assert fresh.repo.checkpoint(3) is None
    if damage != "truncated":
        return  # the CLI's report (a new JVM, ~20 s) is checked once
    env = dict(os.environ, COLUMNS="1000", SLUICE_SPARK_MASTER="local[1]")
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    assert key in " ".join(proc.stderr.split()), proc.stderr[-3000:]
    assert fresh.repo.checkpoint(3) is None


# -- the operator's way out: sluice restore SPEC --epoch N ------------------------------------


def _assert_reference_after_restore(spark: Any, spec: Any, restored_to: int) -> None:
    """Drain from the rewind; the whole output is what one clean run gives."""
    fresh = runtime(spec, prefix="after")
    run_until_drained(fresh, spark, max_units=2)
    assert compare_rows(committed_rows(spec, "out"), REFERENCE.emitted,
                        keys=["user", "window_start"]) == []  # fmt: skip
    late = [(r["source_file"], r["source_line"]) for r in committed_rows(spec, "late_records")]
    assert sorted(late) == sorted(REFERENCE.late)
    dead = [(r["file"], r["line"]) for r in committed_rows(spec, "dead_letters")]
    assert sorted(dead) == sorted((f, n) for f, n, _ in REFERENCE.dead)
    assert restored_to in fresh.repo.rewinds().values()


def test_restore_past_a_damaged_state_with_a_pending_plan(
    spark: Any, local_workspace: Any, tmp_path: Path
) -> None:
    """The usual case: epoch 3 was planned on checkpoint 2, whose state is damaged, so it can
    never commit; a rewind is refused while it is pending. ``restore`` voids it (fencing any
    attempt still running) and rewinds to checkpoint 1."""
    spec, rt, _ = _two_epochs(spark, local_workspace, tmp_path)
    key = _state_data_key(rt.repo.checkpoint(2).result.state)
    rt.repo.store.put(key, rt.repo.store.get(key)[:-50])
    assert plan_epoch(rt, max_units=2) is not None
    with pytest.raises(CorruptObject):
        process_epoch(rt, spark, 3)

    report = restore_after_damage(runtime(spec, prefix="op"), 1, max_units=2)

    assert report.voided == [3] and report.quarantined == []
    assert report.plan is not None and report.plan.epoch == 4
    assert report.plan.retract_after == 1
    void = rt.repo.checkpoint(3)
    assert void is not None and void.void is not None and void.void.restore_to == 1
    assert void.extra["void"]["restore_to"] == 1  # the stored form
    assert void.result.stats.records_read == 0
    again = restore_after_damage(runtime(spec, prefix="op2"), 1, max_units=2)
    assert again.voided == [] and again.plan == report.plan  # idempotent
    _assert_reference_after_restore(spark, spec, 1)


def test_restore_past_a_corrupt_checkpoint_from_the_cli(
    spark: Any, local_workspace: Any, tmp_path: Path
) -> None:
    spec, rt, spec_path = _two_epochs(spark, local_workspace, tmp_path)
    key = checkpoint_key(2)
    damaged = _flip_body_byte(rt.repo.store.get(key))
    rt.repo.store.put(key, damaged)
    with pytest.raises(CorruptObject):
        plan_epoch(runtime(spec), max_units=2)

    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "restore", str(spec_path), "--epoch", "1",
         "--max-files", "2"],
        env=dict(os.environ, COLUMNS="1000"), capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = " ".join(proc.stdout.split())
    assert "quarantined" in out and key in out and "epoch 2: void" in out, out
    assert "epoch 3 rewinds to checkpoint 1" in out, out
    assert rt.repo.store.get(QUARANTINE + key) == damaged  # the evidence is kept
    voided = rt.repo.checkpoint(2)
    assert voided is not None and voided.void is not None and voided.void.quarantined == (key,)
    _assert_reference_after_restore(spark, spec, 1)


@pytest.mark.slow
def test_restore_past_a_corrupt_plan(spark: Any, local_workspace: Any, tmp_path: Path) -> None:
    spec, rt, _ = _two_epochs(spark, local_workspace, tmp_path)
    assert plan_epoch(rt, max_units=2) is not None
    key = plan_key(3)
    damaged = _flip_body_byte(rt.repo.store.get(key))
    rt.repo.store.put(key, damaged)

    report = restore_after_damage(runtime(spec, prefix="op"), 2, max_units=2)

    assert report.quarantined == [key] and report.voided == [3]
    assert rt.repo.store.get(QUARANTINE + key) == damaged
    assert report.plan is not None and report.plan.epoch == 4
    _assert_reference_after_restore(spark, spec, 2)
