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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from sluice.jvm.udfs import helper_classes
from sluice.operators.base import quoted
from sluice.spark import context_cache

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame, SparkSession

    from sluice.protocol.model import StatePart

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
        before = self.root in self._all.seen
        self._all.seen.add(self.root)
        live = {p.key for p in state}
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
        indexes = self._all
        indexes.probes += 1
        wanted = {(self.root, p.key) for p in parts}
        missing = [p for p in parts if (self.root, p.key) not in indexes.parts]
        jvm = self._jvm()
        needed = sum(int(jvm.bytesFor(max(p.rows, 1))) for p in missing)
        if not indexes.make_room(needed, self._budget(), wanted):
            return None
        for part in missing:
            java = jvm.of(_hashes(read(part), keys)._jdf, part.rows)
            size = int(jvm.bytesFor(java.size()))
            indexes.parts[(self.root, part.key)] = _Entry(java, size, indexes.probes)
        probe = jvm.probe(_hashes(mine, keys)._jdf)
        for key in wanted:
            entry = indexes.parts[key]
            entry.used = indexes.probes
            probe.mark(entry.java)
        return Probe(probe, int(probe.found()))

    def written(self, probe: Probe, part: StatePart) -> None:
        """``part`` (a delta) holds exactly ``probe``'s windows: keep them as its index."""
        java = probe.java.index()
        size = int(self._jvm().bytesFor(max(int(java.size()), 1)))
        keep = {k for k in self._all.parts if k[0] == self.root}
        if self._all.make_room(size, self._budget(), keep):
            self._all.parts[(self.root, part.key)] = _Entry(java, size, self._all.probes)
