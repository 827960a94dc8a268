"""Keyed event-time windows: watermarks, partial aggregates, one epoch's computation."""

from sluice.windows.operator import (
    EpochCounts,
    EpochFrames,
    InvalidExpression,
    compute_epoch,
    emitted_rows,
    open_state,
    state_columns,
    window_keys,
    window_output,
)
from sluice.windows.watermarks import WatermarkState

__all__ = [
    "EpochCounts",
    "EpochFrames",
    "InvalidExpression",
    "WatermarkState",
    "compute_epoch",
    "emitted_rows",
    "open_state",
    "state_columns",
    "window_keys",
    "window_output",
]
