"""Which epochs an iceberg table holds, as the table itself records them: the snapshot
summaries of the sink's commits (``sluice.pipeline``, ``sluice.sink``, ``sluice.epoch``) and
the table property ``sluice.epoch.<pipeline>.<sink>`` (the highest epoch published, kept
through snapshot expiry); and, for a rewind, the snapshot that held the table as of an epoch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "EPOCH_KEY",
    "PIPELINE_KEY",
    "SINK_KEY",
    "base_snapshot",
    "epoch_of",
    "epoch_property",
    "published",
    "snapshots",
]

PIPELINE_KEY, SINK_KEY, EPOCH_KEY = "sluice.pipeline", "sluice.sink", "sluice.epoch"


def epoch_property(pipeline: str, sink: str) -> str:
    """The table property holding the highest epoch ``pipeline``'s ``sink`` published."""
    return f"sluice.epoch.{pipeline}.{sink}"


def epoch_of(snapshot: Snapshot, pipeline: str, sink: str) -> int | None:
    """The epoch ``snapshot`` published for ``pipeline``'s ``sink`` (None: not one of its)."""
    summary = snapshot.summary
    if summary is None or summary.get(PIPELINE_KEY) != pipeline:
        return None
    epoch = summary.get(EPOCH_KEY)
    if summary.get(SINK_KEY) != sink or epoch is None:
        return None
    return int(epoch)


def snapshots(table: Table, pipeline: str, sink: str) -> dict[int, int]:
    """Epoch -> the id of the snapshot that published it (those still in the metadata)."""
    found = {}
    for snapshot in table.metadata.snapshots:
        epoch = epoch_of(snapshot, pipeline, sink)
        if epoch is not None:
            found[epoch] = snapshot.snapshot_id
    return found


def published(table: Table | None, pipeline: str, sink: str) -> int | None:
    """The highest epoch ``pipeline``'s ``sink`` published into ``table`` (None: none)."""
    if table is None:
        return None
    marks = list(snapshots(table, pipeline, sink))
    fence = table.metadata.properties.get(epoch_property(pipeline, sink))
    if fence is not None:
        marks.append(int(fence))
    return max(marks, default=None)


def base_snapshot(
    table: Table, after: int, pipeline: str, sink: str, refuse: Callable[[str], Exception]
) -> int | bool | None:
    """The snapshot that held what was published when ``after`` was the last epoch: walk
    ``main`` back to the first snapshot of ours with an epoch ``<= after``; the table
    then was the parent of the oldest later one of ours (None: empty). False: nothing of
    ours after ``after`` (nothing to retract). Raises ``refuse(reason)`` when that snapshot
    is expired."""
    snapshot = table.current_snapshot()
    oldest_later: Snapshot | None = None
    while snapshot is not None:
        epoch = epoch_of(snapshot, pipeline, sink)
        if epoch is not None and epoch <= after:
            break
        if epoch is not None:
            oldest_later = snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    if oldest_later is None:
        return False
    base = oldest_later.parent_snapshot_id
    # a v2 table's first snapshot has sequence number 1: a later one without a parent had
    # its history expired (expiry drops the parent link)
    if base is None and (oldest_later.sequence_number or 0) <= 1:
        return None
    if base is None or table.metadata.snapshot_by_id(base) is None:
        later = epoch_of(oldest_later, pipeline, sink)
        raise refuse(
            f"the snapshot before epoch {later}'s (snapshot {oldest_later.snapshot_id}) is "
            f"expired, so the table as of epoch {after} cannot be restored nor the output "
            f"of the epochs after it retracted (keep snapshots as long as checkpoints: "
            "docs/iceberg.md)"
        )
    return base
