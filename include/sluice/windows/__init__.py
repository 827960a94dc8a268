"""Keyed event-time windows: watermarks, partial aggregates, one epoch's computation."""

from sluice.windows.tumbling import (
    EpochCounts,
    EpochFrames,
    compute_epoch,
    emitted_rows,
    open_state,
    window_keys,
)
from sluice.windows.watermarks import WatermarkState

__all__ = [
    "EpochCounts",
    "EpochFrames",
    "WatermarkState",
    "compute_epoch",
    "emitted_rows",
    "open_state",
    "window_keys",
]
