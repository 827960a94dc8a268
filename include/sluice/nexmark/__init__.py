"""Nexmark: a deterministic generator of the benchmark's Person / Auction / Bid events.

Event ``n`` is a pure function of ``(n, config)``, so any range can be (re)generated on its
own: the event number is a rewindable offset. See docs/nexmark.md.

>>> from sluice.nexmark import NexmarkConfig, generate, write_files
>>> tables = generate(0, 1_000_000, NexmarkConfig(seed=1))     # {"person", "auction", "bid"}
>>> write_files("s3://bucket/nexmark", 0, 1_000_000, format="parquet")
"""

from __future__ import annotations

from sluice.nexmark.exceptions import (
    InvalidEventRange,
    InvalidFilesRequest,
    InvalidNexmarkConfig,
    NexmarkError,
)
from sluice.nexmark.files import write_files
from sluice.nexmark.generator import (
    DEFAULT_CONFIG,
    check_range,
    event_kind,
    event_time_us,
    event_times_us,
    generate,
    generate_rows,
    last_auction_id,
    last_person_id,
)
from sluice.nexmark.model import (
    ARROW_SCHEMAS,
    SPEC_SCHEMAS,
    Auction,
    Bid,
    EventKind,
    NexmarkConfig,
    Person,
    record_from_row,
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
