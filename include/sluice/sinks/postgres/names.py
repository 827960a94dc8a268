"""The names the postgres sink gives its tables and columns: the fence table, the staging
tables (deterministic, short enough for PostgreSQL's 63-byte identifiers, their prefixes
encoding (pipeline) and (pipeline, sink, epoch)) and the undo tables (docs/sinks.md)."""

from __future__ import annotations

import hashlib

__all__ = [
    "EPOCH_COLUMN",
    "FENCE_SCHEMA",
    "FENCE_TABLE",
    "STAGING_SCHEMA",
    "split_table",
    "staging_name",
    "staging_prefix",
    "undo_name",
]

FENCE_SCHEMA = "sluice"
FENCE_TABLE = f"{FENCE_SCHEMA}.commits"
STAGING_SCHEMA = "sluice_staging"
EPOCH_COLUMN = "_sluice_epoch"  # append targets: the epoch that wrote the row


def split_table(table: str) -> tuple[str, str]:
    """``schema.table`` or ``table`` (schema ``public``) as (schema, table)."""
    schema, _, name = table.rpartition(".")
    return schema or "public", name


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def staging_prefix(pipeline: str, sink: str | None = None, epoch: int | None = None) -> str:
    """The start of every staging table name of ``pipeline`` (and ``sink``, and ``epoch``)."""
    prefix = f"s{_digest(pipeline)[:12]}_"
    if sink is not None:
        prefix += f"{_digest(pipeline, sink)[:8]}_"
        if epoch is not None:
            prefix += f"e{epoch}_"
    return prefix


def undo_name(pipeline: str, sink: str) -> str:
    """The undo table of an upsert sink, in the fence's schema."""
    return f"undo_{_digest(pipeline, sink)[:16]}"


def staging_name(pipeline: str, sink: str, epoch: int, attempt: str) -> str:
    """At most 56 characters of ``[a-z0-9_]`` (PostgreSQL allows 63)."""
    return staging_prefix(pipeline, sink, epoch) + _digest(pipeline, sink, epoch, attempt)[:12]
