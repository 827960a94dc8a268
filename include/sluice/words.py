"""Counted nouns for what people read: ``1 file``, ``2 files`` (pages, CLI, log lines)."""

from __future__ import annotations

__all__ = ["count", "noun"]


def noun(n: int | float | None, plural: str) -> str:
    """``plural`` as it goes with ``n``: singular for exactly 1 (the plural without its final
    ``s``: files, records, events, rows, epochs, seconds), else as given (None: as given)."""
    return plural.removesuffix("s") if n == 1 else plural


def count(n: int, plural: str) -> str:
    """``n`` (thousands separated) and its noun: ``count(1, "files")`` is ``1 file``,
    ``count(1200, "records")`` ``1,200 records``."""
    return f"{n:,} {noun(n, plural)}"
