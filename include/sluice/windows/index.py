"""Which of an epoch's open windows the stored state already holds, without reading it again.

An on_close epoch of tumbling or hopping windows writes only its own partials (a delta), but
the checkpoint records how many windows stay open, so it must know how many of its open
windows the state already had. Read from the state, that is a scan of every stored window
whose end is in the epoch's range: with 10k windows touched, 0.1 s at 10k stored windows and
about 1 s at 10M (bench/nexmark.py ``scaling``). A process that runs epoch after epoch (a
warm ``sluice serve``, an in-process loop) keeps instead, per stored part, the set of its
windows' key hashes in the driver's memory (:class:`io.sluice.spark.WindowIndex`, as Structured
Streaming keeps its state store's maps in memory): a part is immutable, so its set is built
once, when an epoch first needs it; the delta an epoch writes gets the set of the windows it
already hashed. Then an epoch costs the same at any state size.

The sets are 128-bit hashes of the window's key columns (with their null flags); each takes
16-32 bytes per window, and all of a Spark context's together at most
:data:`HEAP_SHARE` of the driver's heap (the least recently used sets of other pipelines make
room first): beyond, or in the first epoch a process runs for a pipeline (a cold
``spark-submit`` runs one), the epoch scans the state as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.jvm.context import context_cache
from sluice.jvm.udfs import helper_classes
from sluice.operators.base import quoted

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame, SparkSession

    from sluice.contracts.records import StatePart

__all__ = ["HEAP_SHARE", "Probe", "WindowIndexes"]

HEAP_SHARE = 1 / 8  # of the driver JVM's maximum heap, for every index of one Spark context
_SALT = "sluice-window-index"


def _hashes(frame: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Two independent 64-bit hashes of each row's ``keys`` (a null and a value never hash
    alike: the null flags are hashed too)."""
    columns = [F.col(quoted(k)) for k in keys]
    flags = [c.isNull() for c in columns]
    return frame.select(
        F.xxhash64(*flags, *columns).alias("_h1"),
        F.xxhash64(F.lit(_SALT), *flags, *columns).alias("_h2"),
    )


@dataclass
class _Entry:
    java: Any
    bytes: int
    used: int  # the probe that last used it (the least recently used go first)


@dataclass
class _Indexes:
    seen: set[str] = field(default_factory=set)  # pipelines (state roots) run in this context
    parts: dict[tuple[str, str], _Entry] = field(default_factory=dict)  # (root, part key)
    probes: int = 0
    # ``sluice serve`` runs several pipelines' epochs at once in one context: every read or
    # change of the dict above holds it (never a Spark job)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def used(self) -> int:
        return sum(e.bytes for e in self.parts.values())

    def make_room(self, needed: int, budget: int, keep: set[tuple[str, str]]) -> bool:
        """Drop the least recently used sets (not those in ``keep``) until ``needed`` more
        bytes fit in ``budget`` (a server running many pipelines, one of them gone quiet);
        False if they cannot."""
        spare = sorted((e.used, k) for k, e in self.parts.items() if k not in keep)
        while self.used() + needed > budget and spare:
            del self.parts[spare.pop(0)[1]]
        return self.used() + needed <= budget


@dataclass
class Probe:
    """An epoch's open windows, hashed and counted against the indexes of the state's parts;
    :meth:`WindowIndexes.written` keeps them as the index of the delta they are written to."""

    java: Any
    found: int


class WindowIndexes:
    """The indexes of one Spark context, for the pipeline whose state lives under ``root``."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark, self.root = spark, root
        cache = context_cache(spark, "window indexes")
        self._all: _Indexes = cache.setdefault("indexes", _Indexes())

    def _budget(self) -> int:
        return int(self._jvm().maxHeap() * HEAP_SHARE)

    def _jvm(self) -> Any:
        return helper_classes(self.spark).WindowIndex

    def visit(self, state: Sequence[StatePart]) -> bool:
        """Note an epoch of this pipeline (``state``: every part of its state now), forget
        the indexes of parts it no longer has; True if an epoch of it ran here before."""
        live = {p.key for p in state}
        with self._all.lock:
            before = self.root in self._all.seen
            self._all.seen.add(self.root)
            for key in [k for k in self._all.parts if k[0] == self.root and k[1] not in live]:
                del self._all.parts[key]
        return before

    def probe(
        self,
        parts: Sequence[StatePart],
        read: Callable[[StatePart], DataFrame],
        mine: DataFrame,
        keys: Sequence[str],
    ) -> Probe | None:
        """``mine``'s windows (distinct) counted as found in ``parts``; None: not answerable
        from memory (over the budget): scan instead."""
        indexes, jvm, budget = self._all, self._jvm(), self._budget()
        sizes = {p.key: int(jvm.bytesFor(max(p.rows, 1))) for p in parts}
        with indexes.lock:
            indexes.probes += 1
            now = indexes.probes
            held = {p.key: indexes.parts.get((self.root, p.key)) for p in parts}
            for entry in held.values():
                if entry is not None:
                    entry.used = now
            missing = [p for p in parts if held[p.key] is None]
            wanted = {(self.root, p.key) for p in parts}
            if not indexes.make_room(sum(sizes[p.key] for p in missing), budget, wanted):
                return None
        sets = [e.java for e in held.values() if e is not None]  # kept even if evicted now
        for part in missing:  # one job each, outside the lock
            java = jvm.of(_hashes(read(part), keys)._jdf, part.rows)
            sets.append(java)
            with indexes.lock:
                indexes.parts[(self.root, part.key)] = _Entry(java, sizes[part.key], now)
        probe = jvm.probe(_hashes(mine, keys)._jdf)
        for java in sets:
            probe.mark(java)
        return Probe(probe, int(probe.found()))

    def written(self, probe: Probe, part: StatePart) -> None:
        """``part`` (a delta) holds exactly ``probe``'s windows: keep them as its index."""
        java = probe.java.index()
        size, budget = int(self._jvm().bytesFor(max(int(java.size()), 1))), self._budget()
        with self._all.lock:
            keep = {k for k in self._all.parts if k[0] == self.root}
            if self._all.make_room(size, budget, keep):
                self._all.parts[(self.root, part.key)] = _Entry(java, size, self._all.probes)
