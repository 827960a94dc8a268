"""Nexmark: a deterministic generator of the benchmark's Person / Auction / Bid events.

Event ``n`` is a pure function of ``(n, config)``, so any range can be (re)generated on its
own: the event number is a rewindable offset. See docs/nexmark.md.

>>> from sluice.nexmark import NexmarkConfig, generate, write_files
>>> tables = generate(0, 1_000_000, NexmarkConfig(seed=1))     # {"person", "auction", "bid"}
>>> write_files("s3://bucket/nexmark", 0, 1_000_000, format="parquet")

The generator and file writer (``generate``, ``write_files``, ``ARROW_SCHEMAS``...) load numpy
and pyarrow on first use; the model, config and range checks (what loading a spec needs) do not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sluice.nexmark.exceptions import (
    InvalidEventRange,
    InvalidFilesRequest,
    InvalidNexmarkConfig,
    NexmarkError,
)
from sluice.nexmark.model import (
    SPEC_SCHEMAS,
    Auction,
    Bid,
    EventKind,
    NexmarkConfig,
    Person,
    record_from_row,
)
from sluice.nexmark.ranges import DEFAULT_CONFIG, check_range, event_kind, event_time_us

if TYPE_CHECKING:
    from sluice.nexmark.files import write_files
    from sluice.nexmark.generator import (
        ARROW_SCHEMAS,
        event_times_us,
        generate,
        generate_rows,
        last_auction_id,
        last_person_id,
    )

__all__ = [
    "ARROW_SCHEMAS",
    "DEFAULT_CONFIG",
    "SPEC_SCHEMAS",
    "Auction",
    "Bid",
    "EventKind",
    "InvalidEventRange",
    "InvalidFilesRequest",
    "InvalidNexmarkConfig",
    "NexmarkConfig",
    "NexmarkError",
    "Person",
    "check_range",
    "event_kind",
    "event_time_us",
    "event_times_us",
    "generate",
    "generate_rows",
    "last_auction_id",
    "last_person_id",
    "record_from_row",
    "write_files",
]

_HEAVY = {
    "ARROW_SCHEMAS": "sluice.nexmark.generator",
    "event_times_us": "sluice.nexmark.generator",
    "generate": "sluice.nexmark.generator",
    "generate_rows": "sluice.nexmark.generator",
    "last_auction_id": "sluice.nexmark.generator",
    "last_person_id": "sluice.nexmark.generator",
    "write_files": "sluice.nexmark.files",
}


def __getattr__(name: str) -> Any:
    if name in _HEAVY:
        return getattr(importlib.import_module(_HEAVY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
