"""Fixtures of the in-memory protocol suite (sluice.testing.memory): no Spark, no S3."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sluice.contracts.layout import STATE
from sluice.contracts.records import AttemptStatus
from sluice.protocol import Runtime
from sluice.testing.memory import (
    SINKS,
    Record,
    dead_positions,
    expected_output,
    memory_runtime,
    sink_of,
    sink_rows,
    source_of,
)

# 12 records, two of them dead letters; read two an epoch, epoch 2 holds results and a dead one
RECORDS: list[Record] = [
    ("a", 1), ("b", 2), ("a", 3), ("x", "oops"), ("c", 4), ("a", 5),
    ("b", 6), ("d", None), ("c", 7), ("a", 8), ("d", 9), ("b", 10),
]  # fmt: skip
PER_EPOCH = 2


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder on tmpfs where there is one: the local store fsyncs every write, which costs
    ~5 ms on a disk and nothing in memory."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="sluice-memory-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pipeline(root: Path) -> Callable[..., Runtime]:
    """``pipeline(**options)``: a runtime of the pipeline under ``root`` holding ``RECORDS``
    (options: those of :func:`memory_runtime`); every call opens the same pipeline, as
    another process would."""

    def make(**options: Any) -> Runtime:
        options.setdefault("records", RECORDS)
        return memory_runtime(root, **options)

    return make


def dead_lines(rt: Runtime) -> list[int]:
    return [row["line"] for row in sink_rows(rt, "dead")]


def state_folders(rt: Runtime) -> set[str]:
    """``state/<epoch>-<attempt>`` of every state part stored."""
    return {i.key[: i.key.index("/", len(STATE))] for i in rt.repo.store.list(STATE)}


def referenced_parts(rt: Runtime, epochs: list[int] | None = None) -> set[str]:
    """The state parts the checkpoints of ``epochs`` (default: every retained one) read."""
    found: set[str] = set()
    for epoch in rt.repo.committed_epochs() if epochs is None else epochs:
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None, epoch
        found.update(p.key for p in checkpoint.result.state.parts)
    return found


def assert_settled(rt: Runtime) -> None:
    """Nothing staged in any sink, every retained epoch committed with its sinks, one winner
    per epoch, no losing attempt's state."""
    assert {name: sink_of(rt, name).staged() for name in SINKS} == {n: [] for n in SINKS}
    for epoch in rt.repo.committed_epochs():
        checkpoint = rt.repo.checkpoint(epoch)
        assert checkpoint is not None and rt.repo.sinks_committed(epoch) is not None, epoch
        statuses = {a.attempt: a.status for a in rt.repo.attempts(epoch)}
        if checkpoint.extra.get("void"):  # its attempts are settled (one may have committed
            live = {AttemptStatus.STARTED, AttemptStatus.PREPARED}  # before the damage)
            assert not live & set(statuses.values()), (epoch, statuses)
            continue
        assert statuses.pop(checkpoint.attempt) == AttemptStatus.COMMITTED, epoch
        assert set(statuses.values()) <= {AttemptStatus.ABORTED, AttemptStatus.FAILED}, epoch
    assert state_folders(rt) == referenced_parts(rt)


def assert_exact(rt: Runtime, records: list[Record] = RECORDS) -> None:
    """The sinks hold the oracle's output of every record exactly once."""
    assert sink_rows(rt, "out") == expected_output(records, PER_EPOCH)
    assert dead_lines(rt) == dead_positions(records)
    assert sink_rows(rt, "late") == []
    assert_settled(rt)
    assert source_of(rt).records == records
