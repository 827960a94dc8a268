"""One epoch of keyed windows, in as few Spark jobs as the semantics allow.

1. **The pass** (one job): read and classify the records (:mod:`sluice.operators.records`),
   fold the accepted ones into this epoch's partials ``P`` (one row per window the epoch
   touched; sessions: per session inside the epoch), cache ``P`` (small) and count its rows
   per window end. The ledgers then give the counts and the new watermark ``A``; if the
   bounds the pass took could have changed a class, the pass runs again, exactly.
2. **Results** (one job): windows that close at ``A`` (``end + allowed lateness <= A``) are
   ``P``'s closing rows merged with the state's rows of the same windows (only the state
   parts whose window ends can close are read); ``on_update`` emits every window ``P``
   touched, merged with its state rows.
3. **State** (one job): the epoch writes a *delta* — ``P``'s rows of windows still open
   (sessions: all of ``P``) — not the whole state. Readers fold a window's rows from every
   part (:mod:`sluice.state`); rows of windows that closed at or before the state's
   ``horizon`` are skipped. Every ``compact_every`` deltas, after a schema change, or when the
   watermark moved back (an idle partition returned), the epoch writes a full *base* instead.

What differs between window kinds is asked of the kind's strategy (:mod:`sluice.windows.kinds`):
kinds that merge windows across epochs (sessions) fold the state's fragments each epoch (all
of a key's fragments are needed to merge); kinds that are not incremental (count windows,
sessions with ``max_duration``) keep a full snapshot each epoch
(:mod:`sluice.windows.snapshot`). The exact rules are in docs/windows-and-watermarks.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F

from sluice.contracts.operators import EpochFacts, EpochInput, StateInput, StateUpdate
from sluice.jvm.udfs import Ledger, SqlFunctions, aggregate, counted, counting, select
from sluice.operators.base import quoted, where_keys
from sluice.operators.records import EXACT, Classification, PassFacts, classify, dead_rows
from sluice.windows.common import align_window_state, late_rows, operator_columns, result_rows
from sluice.windows.index import Probe, WindowIndexes
from sluice.windows.kinds import kind_of
from sluice.windows.snapshot import snapshot_epoch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.contracts.records import StatePart
    from sluice.spec.model import PipelineSpec
    from sluice.windows.strategy import WindowKind

__all__ = ["WindowOperator"]

OPEN, CLOSING, GONE = 0, 1, 2  # a merged window's fate this epoch (counted per code)
# Up to this many open windows in an epoch's partials, the stored state is matched against
# them broadcast (a scan of the state); above, both sides are shuffled.
BROADCAST_OPEN_ROWS = 1_000_000


class WindowOperator:
    """The ``windows`` operator (:func:`sluice.pipeline.operator_for`)."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.kind = kind_of(spec)

    def state_columns(self) -> list[str]:
        return self.kind.state_columns()

    def key_columns(self) -> list[str]:
        return list(self.spec.key_by)

    def view(self, frame: DataFrame, keys: Mapping[str, str] | None = None) -> DataFrame:
        """One row per open window of a key (``sluice state``): the key columns, the window's
        bounds (count windows: its index and records so far) and every aggregate *so far*,
        finalised by the expressions that produce the output rows."""
        from sluice.windows.aggregates import finalize_columns

        frame = where_keys(frame, keys)
        dtypes = dict(frame.dtypes)
        # a sum is integral exactly when its partial is (that is how the partial was chosen)
        types = {
            a.column: ("bigint" if dtypes.get(f"_p_{a.name}_s") == "bigint" else "double")
            for a in self.spec.aggregates
            if a.column is not None
        }
        return self.kind.view(frame, finalize_columns(self.spec.aggregates, types))

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame:
        return align_window_state(self.kind, frame, reset_aggregates)

    def current_state(self, state: StateInput) -> DataFrame | None:
        """The state's rows as one snapshot (``sluice state``): every part folded per window,
        windows emitted before the horizon left out."""
        frame = state.frame()
        if frame is None:
            return None
        if not self.kind.incremental:  # a snapshot already
            return frame
        lateness = self.spec.event_time.allowed_lateness_us
        horizon = state.horizon_us
        merged = self.kind.merge(_flagged(frame, new=False), {c: t for c, t in frame.dtypes})
        if horizon is not None:
            merged = merged.where(f"_we + {lateness} > {horizon}L")
        return merged.select(*self.kind.state_columns())

    def run(self, inp: EpochInput) -> Any:
        if self.kind.incremental:
            return self._incremental(inp)
        return snapshot_epoch(self.spec, self.kind, inp)

    def _incremental(self, inp: EpochInput) -> IncrementalEpoch:
        lateness = self.kind.lateness()
        indexes = self._indexes(inp)
        first = classify(inp, lateness, self._columns())
        epoch = IncrementalEpoch.start(self.kind, inp, first, indexes)
        if not epoch.facts.exact:
            epoch.release()
            exact = classify(inp, lateness, self._columns(), mode=EXACT, runs=epoch.facts.runs)
            epoch = IncrementalEpoch.start(self.kind, inp, exact, indexes)
        return epoch

    def _indexes(self, inp: EpochInput) -> WindowIndexes | None:
        """The windows indexes (:mod:`sluice.windows.index`) if an epoch of this pipeline
        ran in this Spark context before (kinds that use them: on_close tumbling and hopping
        windows)."""
        state = inp.state
        if not self.kind.uses_window_index or state.location is None:
            return None
        indexes = WindowIndexes(inp.spark, state.location)
        return indexes if indexes.visit(state.parts) else None

    def _columns(self) -> tuple[str, ...]:
        return operator_columns(self.spec)


# the roles of IncrementalEpoch._params' SQL functions (sluice_after(), sluice_horizon())
_AFTER, _HORIZON = "after", "horizon"


def _flagged(frame: DataFrame, new: bool) -> DataFrame:
    return select(frame, "*", f"{str(new).lower()} AS _new", f"{str(not new).lower()} AS _old")


@dataclass
class IncrementalEpoch:
    """One epoch of tumbling, hopping or session windows with an incremental state."""

    kind: WindowKind[Any]
    inp: EpochInput
    cls: Classification
    partials: DataFrame  # P, cached
    ends: dict[int, int]  # P's rows per window end
    facts: PassFacts
    cached: list[DataFrame] = field(default_factory=list)
    _results: DataFrame | None = None
    _tally: Ledger | None = None
    _merged_cache: DataFrame | None = None
    _fates: Ledger | None = None
    indexes: WindowIndexes | None = None  # a process that ran this pipeline before: its own
    _probe: Probe | None = None
    _delta: StatePart | None = None
    emitted: int | None = None

    @classmethod
    def start(
        cls,
        kind: WindowKind[Any],
        inp: EpochInput,
        classified: Classification,
        indexes: WindowIndexes | None = None,
    ) -> IncrementalEpoch:
        """Run the pass: P cached, its rows per window end collected, the ledgers read."""
        partials = kind.epoch_partials(classified.frame, classified.types)
        partials = select(partials, *[quoted(c) for c in kind.state_columns()])
        partials = partials.persist(StorageLevel.MEMORY_AND_DISK)
        counts = aggregate(partials, ["_we"], ["count(1)"]).collect()
        ends = {int(r[0]): int(r[1]) for r in counts}
        epoch = cls(kind, inp, classified, partials, ends, classified.facts(), [partials])
        epoch.indexes = indexes
        epoch._prepare()
        return epoch

    # -- the decisions after the pass ---------------------------------------------------------

    @property
    def spec(self) -> PipelineSpec:
        return self.inp.spec

    @property
    def after(self) -> int | None:
        return self.facts.after_us

    @property
    def lateness_us(self) -> int:
        return self.spec.event_time.allowed_lateness_us

    def closes(self, end: int) -> bool:
        return self.after is not None and end + self.lateness_us <= self.after

    def _closing(self, we: str = "_we", *, scan: bool = False) -> str:
        """Windows that close at the watermark after the epoch. The watermark is a function
        call (for a plan built under :meth:`_params`), or with ``scan`` a literal: a filter
        on a state scan, which Spark pushes into the Parquet reader."""
        if self.after is None:
            return "false"
        bound = f"{self.after}L" if scan else f"{SqlFunctions.name(_AFTER)}()"
        return f"({we} + {self.lateness_us} <= {bound})"

    def _gone(self, we: str = "_we", *, scan: bool = False) -> str:
        """Windows the state's horizon says were emitted before this epoch (the horizon as
        a function call, or with ``scan`` a literal, as :meth:`_closing`)."""
        horizon = self.inp.state.horizon_us
        if horizon is None:
            return "false"
        bound = f"{horizon}L" if scan else f"{SqlFunctions.name(_HORIZON)}()"
        return f"({we} + {self.lateness_us} <= {bound})"

    @contextmanager
    def _params(self) -> Iterator[None]:
        """Plans built in this block may call the watermark after the epoch and the state's
        horizon as SQL functions (:meth:`sluice.jvm.udfs.SqlFunctions.constant`: generated
        code that is the same every epoch; with literals, every epoch's stages would be
        compiled anew and run cold)."""
        horizon = self.inp.state.horizon_us
        with SqlFunctions(self.inp.spark) as fns:
            if self.after is not None:
                fns.constant(self.after, _AFTER)
            if horizon is not None:
                fns.constant(horizon, _HORIZON)
            yield

    def _where(self, frame: DataFrame, condition: str) -> DataFrame:
        with self._params():
            return frame.where(condition)

    def _state_sql(self) -> list[str]:
        return [quoted(c) for c in self.kind.state_columns()]

    @property
    def compact(self) -> bool:
        """Write a full base: asked for, or the watermark moved back below the horizon (rows
        of windows between the two would otherwise read as emitted)."""
        horizon = self.inp.state.horizon_us
        moved_back = self.after is not None and horizon is not None and self.after < horizon
        return self.inp.compact or moved_back

    @property
    def horizon(self) -> int | None:
        return self.after if self.after is not None else self.inp.state.horizon_us

    def _prepare(self) -> None:
        if self.kind.reads_only_closing_state and not self.compact:
            self._results, self.emitted = self._closing_windows()
        else:
            self._results, self._tally = self._merged_results()

    # -- state ---------------------------------------------------------------------------------

    def _state(self, keep: Any = None, where: str | None = None) -> DataFrame | None:
        frame = self.inp.state.frame(keep, where)
        return None if frame is None else _flagged(frame, new=False)

    def _live_state(self) -> DataFrame | None:
        """Every state row of a window not emitted yet (kinds that merge across epochs:
        every fragment; a session's fate is known once its fragments are merged)."""
        if self.kind.merges_across_epochs:
            return self._state()
        return self._state(where=f"NOT {self._gone(scan=True)}")

    def state_update(self) -> StateUpdate | None:
        if self.compact:
            merged = self._merged()
            base = select(merged.where(f"_fate = {OPEN}"), *self._state_sql())
            return StateUpdate("base", base, None)
        merging = self.kind.merges_across_epochs  # every fragment stays until merged
        if merging:
            rows = sum(self.ends.values())
            frame = self.partials
        else:
            rows = sum(n for end, n in self.ends.items() if not self.closes(end))
            frame = self._where(self.partials, f"NOT {self._closing()}")
        if rows == 0:
            return None
        open_ends = [e for e in self.ends if merging or not self.closes(e)]
        return StateUpdate("delta", frame, rows, {"_we": (min(open_ends), max(open_ends))})

    # -- results -------------------------------------------------------------------------------

    @property
    def results(self) -> DataFrame:
        assert self._results is not None
        return self._results

    def _closing_windows(self) -> tuple[DataFrame, int | None]:
        """on_close, tumbling/hopping: P's closing windows merged with the state's rows of
        closing windows (only the parts whose window ends reach the closing range)."""
        kind, types = self.kind, self.cls.types
        mine = _flagged(self._where(self.partials, self._closing()), new=True)
        theirs = None
        if self.after is not None:
            where = f"{self._closing(scan=True)} AND NOT {self._gone(scan=True)}"
            theirs = self._state(self._may_close, where)
        if theirs is None:  # P's rows are one per window: their count is the result's
            rows = sum(n for end, n in self.ends.items() if self.closes(end))
            return result_rows(kind, mine, types, self.inp.epoch), rows
        merged = self.kind.merge(mine.unionByName(theirs), types)
        frame, ledger = counting(
            self.inp.spark, merged, "results", "CASE WHEN _old THEN 1 ELSE 0 END"
        )
        self._tally = ledger
        return result_rows(kind, frame, types, self.inp.epoch), None

    def _may_close(self, part: StatePart) -> bool:
        span = part.bound("_we")
        horizon = self.inp.state.horizon_us
        if span is None or self.after is None:
            return True
        low, high = span
        beyond = horizon is not None and high + self.lateness_us <= horizon
        return low + self.lateness_us <= self.after and not beyond

    def _merged(self) -> DataFrame:
        """Every window of the state and P, folded, with ``_fate`` (cached: the results and a
        base both read it)."""
        if self._merged_cache is not None:
            return self._merged_cache
        types = self.cls.types
        rows = _flagged(self.partials, new=True)
        state = self._live_state()
        if state is not None and self.kind.deletes_replaced:
            state = self._sessions_of(state)
        if state is not None:
            rows = rows.unionByName(state)
        merged = self.kind.merge(rows, types)
        fate = (
            f"CASE WHEN {self._gone()} AND NOT _new THEN {GONE} "
            f"WHEN {self._closing()} THEN {CLOSING} ELSE {OPEN} END"
        )
        with self._params():
            merged = select(merged, "*", f"{fate} AS _fate")
        merged, ledger = counting(self.inp.spark, merged, "windows", "_fate")
        self._fates = ledger
        merged = merged.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(merged)
        self._merged_cache = merged
        return merged

    def _sessions_of(self, fragments: DataFrame) -> DataFrame:
        """The state's fragments as the windows last emitted (on_update deletes name them)."""
        merged = self.kind.merge(fragments, self.cls.types)
        merged = self._where(merged, f"NOT {self._gone()}")
        return select(merged, *self._state_sql(), "_new", "_old")

    def _merged_results(self) -> tuple[DataFrame, Ledger | None]:
        kind, types, epoch = self.kind, self.cls.types, self.inp.epoch
        merged = self._merged()
        if self.spec.emit == "on_close":
            return result_rows(kind, merged.where(f"_fate = {CLOSING}"), types, epoch), None
        deletes = self._deletes(merged) if kind.deletes_replaced else None
        touched = merged.where("_new")
        return result_rows(kind, touched, types, epoch, deletes), None

    def _deletes(self, merged: DataFrame) -> DataFrame | None:
        """on_update windows that merge across epochs (sessions): the windows emitted before
        that this epoch's merges replaced."""
        state = self._live_state()
        if state is None:
            return None
        keys = self.kind.keys
        old = self._sessions_of(state).select(
            *[F.col(quoted(k)).alias(f"_o_{k}") for k in keys], "_ws", "_we"
        )
        now = merged.where(F.col("_new")).select(
            *keys, F.col("_ws").alias("_nws"), F.col("_we").alias("_nwe")
        )
        cond = F.col("_ws") >= F.col("_nws")
        cond = cond & (F.col("_we") <= F.col("_nwe"))
        for k in keys:
            cond = cond & F.col(quoted(f"_o_{k}")).eqNullSafe(F.col(quoted(k)))
        changed = (F.col("_ws") != F.col("_nws")) | (F.col("_we") != F.col("_nwe"))
        joined = old.join(now, cond, "inner").where(changed)
        return joined.select(*[F.col(quoted(f"_o_{k}")).alias(k) for k in keys], "_ws", "_we")

    # -- facts ---------------------------------------------------------------------------------

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        facts = self.facts
        emitted_rows = emitted if emitted is not None else (self.emitted or 0)
        still_open = self._still_open(state_rows)
        return EpochFacts(facts.counts, facts.watermark, facts.after_us, emitted_rows,
                          still_open, still_open)  # fmt: skip

    def _still_open(self, state_rows: int | None) -> int:
        if self.compact:
            assert state_rows is not None
            return state_rows
        if self._fates is not None:  # every window was folded
            return counted(self._fates, OPEN)
        closed_before = counted(self._tally, 1) if self._tally is not None else 0
        open_rows = sum(n for end, n in self.ends.items() if not self.closes(end))
        return self.inp.state.rows - closed_before + open_rows - self._already_open()

    def _already_open(self) -> int:
        """P's open windows the state already had: from the windows indexes of a process that
        ran this pipeline before (:mod:`sluice.windows.index`), else one job, only when the
        state holds windows ending where P's open windows end."""
        open_ends = [e for e in self.ends if not self.closes(e)]
        state_in = self.inp.state
        if not open_ends or state_in.empty:
            return 0
        low, high = min(open_ends), max(open_ends)

        def overlaps(part: StatePart) -> bool:
            span = part.bound("_we")
            return span is None or (span[0] <= high and low <= span[1])

        keys = self.kind.window_keys()
        open_rows = self._where(self.partials, f"NOT {self._closing()}")
        if self.indexes is not None:
            # a P window found in a part is not gone: it ends where it does in P, after the
            # watermark, and the horizon is at most the watermark (else the epoch compacts)
            chosen = [p for p in state_in.parts if overlaps(p)]
            if not chosen:
                return 0
            probe = self.indexes.probe(chosen, self._part_rows, open_rows, keys)
            if probe is not None:
                self._probe = probe
                self._index_delta()
                return probe.found
        state = state_in.frame(overlaps, f"_we BETWEEN {low}L AND {high}L")
        if state is None:
            return 0
        theirs = state.where(f"NOT {self._gone(scan=True)}").select(*[quoted(k) for k in keys])
        mine = open_rows.select(*[F.col(quoted(k)).alias(f"_m_{k}") for k in keys])
        cond = [theirs[quoted(k)].eqNullSafe(mine[quoted(f"_m_{k}")]) for k in keys]
        if sum(n for e, n in self.ends.items() if not self.closes(e)) <= BROADCAST_OPEN_ROWS:
            # the state (any size) probes P's few open windows: a scan, no shuffle of it;
            # a window stored in several parts (base and deltas) is counted once
            found = theirs.join(F.broadcast(mine), cond, "left_semi").distinct()
            return int(found.count())
        return int(mine.join(theirs, cond, "left_semi").count())

    def _part_rows(self, part: StatePart) -> DataFrame:
        frame = self.inp.state.frame(lambda p: p.key == part.key)
        assert frame is not None
        return frame

    def state_written(self, part: StatePart) -> None:
        """The state update was written as ``part``: a delta holds P's open windows, which
        the epoch's probe hashes (:meth:`_already_open`): they become the delta's index."""
        if part.kind == "delta":
            self._delta = part
            self._index_delta()

    def _index_delta(self) -> None:
        if self.indexes is not None and self._probe is not None and self._delta is not None:
            self.indexes.written(self._probe, self._delta)
            self._delta = None

    # -- side outputs --------------------------------------------------------------------------

    def late(self) -> DataFrame:
        missed = self.kind.missed_windows(self.cls.frame)
        return late_rows(missed, self.cls.records, self.spec, self.inp.epoch)

    def dead(self) -> DataFrame:
        return dead_rows(self.cls.records, self.spec, self.inp.epoch, self.inp.source_uri)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()
