"""One epoch of a stream–stream join in event time (docs/joins.md, ``join:`` of a spec).

1. classify each side's records as every operator does (:func:`~sluice.operators.records.
   classify`, with the side's event time, bound and filter): dead letters, filtered, late by
   the side's watermark at the record's position, accepted. A record is late when a row it
   could match may already have left the state: behind the watermark (interval, regular), or
   every window of it closed (window join). The pass also gives each side's new watermark;
   the pipeline's is their minimum (:func:`pipeline_watermark`);
2. the accepted rows become state rows — side, join key, window start, event time, the
   watermark past which no row of the other side can match them (``_exp``), the record as a
   struct — and are joined with the other side's rows of the epoch and of ``S_k``: each pair
   is emitted by the epoch in which its later row arrives, whatever the cut;
3. ``S_{k+1}`` = the rows of ``S_k`` and of the epoch whose ``_exp`` the pipeline's new
   watermark has not passed (written whole, as a base). ``how: left``: a left row that leaves
   the state without ever having matched is emitted once, the right side's columns null.

Why the output does not depend on the cut: a row leaves the state only once the watermark
passes ``_exp``, and a record accepted later is at or above the watermark its epoch started
from (the classification's floor is the pipeline's watermark), so no accepted record can
match a row that already left; a record that could is late in every cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F

from sluice.contracts.operators import (
    ACCEPTED,
    LATE,
    POSITION,
    EpochCounts,
    EpochFacts,
    EpochInput,
    SourceInput,
    StateUpdate,
)
from sluice.contracts.records import WatermarkState
from sluice.contracts.sources import RECORD_COLUMNS, SPARK_TYPES
from sluice.joins.types import LEFT, RIGHT, JoinType, join_type
from sluice.jvm.udfs import SqlFunctions, select
from sluice.operators.base import JOIN_LATE_DDL, quoted, where_keys
from sluice.operators.records import (
    EXACT,
    SCAN,
    Classification,
    PassFacts,
    classify,
    dead_rows,
    with_records,
)
from sluice.operators.sqltext import col, lit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from sluice.contracts.records import StatePart
    from sluice.spec.model import JoinSide, JoinSpec, PipelineSpec

__all__ = [
    "JOIN_LATE_DDL",
    "JoinOperator",
    "join_state_columns",
    "pipeline_watermark",
    "side_input",
    "side_watermark",
]

_TAIL = ["_ws", "_ts", "_exp", "_matched", "_pos", "_l", "_r"]
_NUMERIC = {"int": 1, "long": 2, "float": 3, "double": 4}


def join_state_columns(join: JoinSpec) -> list[str]:
    """A state row: the side, one column per join key, then :data:`_TAIL`."""
    return ["_side", *[f"_k{i}" for i in range(len(join.on))], *_TAIL]


def _key_types(join: JoinSpec) -> list[str]:
    """Each key's Spark type: the left column's, or the wider numeric type of the two."""
    left, right = dict(join.left.source.schema), dict(join.right.source.schema)
    types = []
    for lcol, rcol in join.on:
        a, b = left[lcol], right[rcol]
        if a != b and a in _NUMERIC and b in _NUMERIC:
            a = a if _NUMERIC[a] >= _NUMERIC[b] else b
        types.append(SPARK_TYPES[a])
    return types


def _struct_ddl(join: JoinSpec, side: JoinSide) -> str:
    fields = ", ".join(f"{quoted(c)}: {SPARK_TYPES[t]}" for c, t in join.kept(side))
    return f"struct<{fields}>" if fields else "struct<`_`: boolean>"


class JoinOperator:
    """The ``join`` operator (:func:`sluice.pipeline.operator_for`)."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.join = spec.joining

    def key_columns(self) -> list[str]:
        """The join's key columns, as the left side names them."""
        return [left for left, _ in self.join.on]

    def view(self, frame: DataFrame, keys: Mapping[str, str] | None = None) -> DataFrame:
        """One row per record waiting for a match (``sluice state``): its ``side``, the key
        columns, ``window_start`` (a window join), ``event_time``, ``kept_until`` (the
        watermark past which no row of the other side can match it), ``matched`` and the
        columns the state keeps (``record``, JSON)."""
        join = self.join
        left, right = (side.name for side in join.sides)
        columns = [
            F.when(F.col("_side") == LEFT, F.lit(left)).otherwise(F.lit(right)).alias("side"),
            *[F.col(f"_k{i}").alias(name) for i, (name, _) in enumerate(join.on)],
        ]
        if join_type(join).assigner is not None:
            columns.append(F.timestamp_micros("_ws").alias("window_start"))
        columns += [
            F.timestamp_micros("_ts").alias("event_time"),
            F.timestamp_micros("_exp").alias("kept_until"),
            F.col("_matched").alias("matched"),
            F.when(F.col("_side") == LEFT, F.to_json("_l")).otherwise(F.to_json("_r"))
            .alias("record"),
        ]  # fmt: skip
        order = ["side", *[name for name, _ in join.on], "event_time"]
        view = frame.select(*columns).orderBy(*[F.col(f"`{c}`") for c in order])
        return where_keys(view, keys)

    def state_columns(self) -> list[str]:
        return join_state_columns(self.join)

    def align_state(
        self, frame: DataFrame, reset_aggregates: tuple[str, ...], reset_states: tuple[str, ...]
    ) -> DataFrame:
        return select(frame, *[quoted(c) for c in self.state_columns()])

    def current_state(self, state: Any) -> DataFrame | None:
        """The rows waiting for a match (``sluice state``)."""
        return state.frame()

    def run(self, inp: EpochInput) -> JoinEpoch:
        return JoinEpoch.start(inp, self.join)


def pipeline_watermark(
    join: JoinSpec, watermark: WatermarkState, sides: dict[str, int | None]
) -> int | None:
    """The pipeline's watermark: the minimum of the sides' (``sides``: each one's, with its
    own bound and idle rule). A side that has shown no event holds it back, as a partition
    does, unless it has an ``idle_timeout``; so does a side whose newest event is more than
    its idle timeout behind the other's newest, which then stops holding it back."""
    newest = {s.name: _newest(watermark, s.name) for s in join.sides}
    overall = max((v for v in newest.values() if v is not None), default=None)
    active: list[int] = []
    for side in join.sides:
        idle = side.event_time.idle_timeout_us
        mine = newest[side.name]
        if idle is not None and (mine is None or (overall is not None and overall - mine > idle)):
            continue
        value = sides[side.name]
        if value is None:
            return None
        active.append(value)
    return min(active) if active else None


def side_input(part: SourceInput, side: JoinSide) -> SourceInput:
    """A side's input with its partitions named ``<side>/<partition>`` (``persons/0``): the
    join's watermark state holds both sides' partitions, told apart by that name
    (:func:`side_watermark`); so do its dead and late letters. A side's name holds no ``/``."""
    prefix = side.name + "/"
    rest = [quoted(c) for c in (*RECORD_COLUMNS[1:], *(c for c, _ in side.source.schema))]
    return SourceInput(
        select(part.records, f"concat({lit(prefix)}, _partition) AS _partition", *rest),
        part.source_uri,
        tuple(prefix + p for p in part.waiting),
        {(prefix + p, major): bound for (p, major), bound in part.before_hints.items()},
    )


def _newest(watermark: WatermarkState, name: str) -> int | None:
    prefix = name + "/"
    values = [v for p, v in watermark.max_event_time_us.items() if p.startswith(prefix)]
    return max(values) if values else None


def side_watermark(watermark: WatermarkState, name: str) -> WatermarkState:
    """The part of the pipeline's watermark state of one side (partitions ``<name>/...``)."""
    prefix = name + "/"
    return WatermarkState(
        {p: v for p, v in watermark.max_event_time_us.items() if p.startswith(prefix)},
        tuple(p for p in watermark.pending if p.startswith(prefix)),
    )


@dataclass
class _Side:
    side: JoinSide
    index: int
    inp: EpochInput
    cls: Classification
    rows: DataFrame  # the accepted records as state rows (cached)
    facts: PassFacts


@dataclass
class JoinEpoch:
    inp: EpochInput
    join: JoinSpec
    sides: list[_Side]
    watermark: WatermarkState
    watermark_us: int | None
    pairs: DataFrame
    rows: DataFrame  # S_k and the epoch's rows, matches marked (how: left), before expiry
    cached: list[DataFrame]

    @property
    def horizon(self) -> int | None:
        return None

    def state_written(self, part: StatePart) -> None:
        """Nothing kept about the parts."""

    @classmethod
    def start(cls, inp: EpochInput, join: JoinSpec) -> JoinEpoch:
        floor = _floor(join, inp.carried)
        lateness = join_type(join)
        sides = [_side_pass(inp, join, s, i, lateness, floor) for i, s in enumerate(join.sides)]
        # one job runs both sides' passes (the ledgers fill); a side whose bounds were not
        # exact is classified again with exact watermarks
        both = sides[0].rows.unionByName(sides[1].rows)
        both.count()
        for n, s in enumerate(sides):
            s.facts = s.cls.facts()
            if not s.facts.exact:
                s.rows.unpersist()
                sides[n] = _side_pass(inp, join, s.side, s.index, lateness, floor, s.facts.runs)
                sides[n].rows.count()
                sides[n].facts = sides[n].cls.facts()
        maxima: dict[str, int] = {}
        pending: list[str] = []
        for s in sides:
            maxima.update(s.facts.watermark.max_event_time_us)
            pending += s.facts.watermark.pending
        watermark = WatermarkState(maxima, tuple(sorted(pending)))
        after = pipeline_watermark(join, watermark, {s.side.name: s.facts.after_us for s in sides})
        new = sides[0].rows.unionByName(sides[1].rows)
        old = inp.state.frame()
        pairs = _pairs(join, new, old)
        rows = new if old is None else old.unionByName(new)
        cached: list[DataFrame] = [s.rows for s in sides]
        if join.how == "left":
            pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
            rows = _mark_matched(rows, pairs).persist(StorageLevel.MEMORY_AND_DISK)
            cached += [pairs, rows]
        if after is not None:  # not a literal: the same generated code every epoch
            with SqlFunctions(inp.spark) as fns:
                rows = select(rows, "*", f"{fns.constant(after, 'join_watermark')} AS _now")
        return cls(inp, join, sides, watermark, after, pairs, rows, cached)

    @property
    def emitted(self) -> int | None:
        return None  # counted by the write

    @property
    def results(self) -> DataFrame:
        frames = [select(self.pairs, "_l", "_r", "_ws")]
        if self.join.how == "left" and self.watermark_us is not None:
            gone = self.rows.where(f"_side = {LEFT} AND NOT _matched AND _exp < _now")
            right = _struct_ddl(self.join, self.join.right)
            frames.append(select(gone, "_l", f"CAST(NULL AS {right}) AS _r", "_ws"))
        rows = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        return _output(rows, self.join, self.inp.epoch)

    def state_update(self) -> StateUpdate | None:
        kept = self.rows
        if self.watermark_us is not None:
            kept = kept.where("_exp >= _now")
        return StateUpdate(
            "base", select(kept, *[quoted(c) for c in join_state_columns(self.join)])
        )

    def finish(self, emitted: int | None, state_rows: int | None = None) -> EpochFacts:
        counts = [s.facts.counts for s in self.sides]
        total = EpochCounts(*[sum(getattr(c, f) for c in counts) for f in (
            "records_read", "accepted", "late", "dead", "filtered", "late_rows")])  # fmt: skip
        held = state_rows or 0
        return EpochFacts(total, self.watermark, self.watermark_us, emitted or 0, held, held)

    def late(self) -> DataFrame:
        frames = [_late_rows(s, self.join, self.inp.epoch) for s in self.sides]
        return frames[0].unionByName(frames[1])

    def dead(self) -> DataFrame:
        frames = [
            dead_rows(s.cls.records, s.inp.spec, s.inp.epoch, s.inp.source_uri) for s in self.sides
        ]
        return frames[0].unionByName(frames[1])

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()


def _floor(join: JoinSpec, carried: WatermarkState) -> int | None:
    """The pipeline's watermark the epoch starts from (every side's records are late below
    it: rows of the other side may have left the state there)."""
    sides = {
        s.name: side_watermark(carried, s.name).watermark_us(
            s.event_time.max_out_of_orderness_us, s.event_time.idle_timeout_us
        )
        for s in join.sides
    }
    return pipeline_watermark(join, carried, sides)


def _side_pass(
    inp: EpochInput,
    join: JoinSpec,
    side: JoinSide,
    index: int,
    lateness: JoinType,
    floor: int | None,
    runs: tuple[Any, ...] = (),
) -> _Side:
    """One side classified, its accepted records as state rows (cached, not yet run)."""
    side_inp = replace(
        inp, inputs={side.name: side_input(inp.inputs[side.name], side)},
        spec=inp.spec.side_spec(side), carried=side_watermark(inp.carried, side.name), tables={},
    )  # fmt: skip
    mode = EXACT if runs else SCAN
    cls = classify(side_inp, lateness, floor_us=floor, mode=mode, runs=runs)
    rows = _state_rows(cls.frame, join, side, index).persist(StorageLevel.MEMORY_AND_DISK)
    return _Side(
        side,
        index,
        side_inp,
        cls,
        rows,
        PassFacts(EpochCounts(0, 0, 0, 0), WatermarkState(), None, True),
    )


def _state_rows(classified: DataFrame, join: JoinSpec, side: JoinSide, index: int) -> DataFrame:
    """The accepted records of one side as state rows (columns of :func:`join_state_columns`)."""
    accepted = classified.where(f"_class = {ACCEPTED}")
    keys = [lc if index == LEFT else rc for lc, rc in join.on]
    types = _key_types(join)
    fields = [f"'{c}', {quoted(c)}" for c, _ in join.kept(side)] or ["'_', true"]
    struct = f"named_struct({', '.join(fields)})"
    left, right = _struct_ddl(join, join.left), _struct_ddl(join, join.right)
    mine = f"{struct}"
    kind = join_type(join)
    ws = "CAST(NULL AS BIGINT)"
    if kind.assigner is not None:
        accepted = select(accepted, "*", f"{kind.assigner.starts(col('_ts_us'))} AS _w")
        # a window the record's position watermark closed is one it missed (late for it)
        accepted = accepted.where(f"_wm IS NULL OR _w + {kind.assigner.size}L > _wm")
        ws = "_w"
    expiry = kind.expiry(ws, index)
    return select(
        accepted,
        f"CAST({index} AS TINYINT) AS _side",
        *[
            f"CAST({quoted(k)} AS {t}) AS _k{i}"
            for i, (k, t) in enumerate(zip(keys, types, strict=True))
        ],
        f"{ws} AS _ws",
        "_ts_us AS _ts",
        f"{expiry} AS _exp",
        "false AS _matched",
        "concat_ws(':', _epoch, _partition, _major, _line) AS _pos",
        f"{mine if index == LEFT else f'CAST(NULL AS {left})'} AS _l",
        f"{mine if index == RIGHT else f'CAST(NULL AS {right})'} AS _r",
    )


def _condition(join: JoinSpec) -> str:
    terms = [f"l._k{i} = r._k{i}" for i in range(len(join.on))]
    return " AND ".join([*terms, join_type(join).condition()])


def _pairs(join: JoinSpec, new: DataFrame, old: DataFrame | None) -> DataFrame:
    """Every pair whose later row arrived this epoch: new left rows with the right rows of
    the state and the epoch, the state's left rows with the epoch's right rows."""
    condition = F.expr(_condition(join))
    new_left, new_right = new.where(f"_side = {LEFT}"), new.where(f"_side = {RIGHT}")
    right = new_right if old is None else old.where(f"_side = {RIGHT}").unionByName(new_right)
    found = [new_left.alias("l").join(right.alias("r"), condition, "inner")]
    if old is not None:
        found.append(old.where(f"_side = {LEFT}").alias("l").join(new_right.alias("r"), condition))
    picked = [select(f, "l._l", "r._r", "l._ws", "l._pos AS _lpos") for f in found]
    return picked[0] if len(picked) == 1 else picked[0].unionByName(picked[1])


def _mark_matched(rows: DataFrame, pairs: DataFrame) -> DataFrame:
    """``_matched`` set on every left row with a pair this epoch."""
    hits = select(pairs, "_lpos AS _hpos", "_ws AS _hws").distinct()
    hits = select(hits, "*", "true AS _hit")
    cond = F.expr(f"_pos = _hpos AND _ws <=> _hws AND _side = {LEFT}")
    marked = rows.join(hits, cond, "left")
    matched = F.expr("_matched OR coalesce(_hit, false)")
    return marked.withColumn("_matched", matched).drop("_hpos", "_hws", "_hit")


def _output(rows: DataFrame, join: JoinSpec, epoch: int) -> DataFrame:
    """The result columns (``output:``'s expressions over the sides' records) + _op, _epoch."""
    window = []
    assigner = join_type(join).assigner
    if assigner is not None:
        window = [
            "timestamp_micros(_ws) AS window_start",
            f"timestamp_micros(_ws + {assigner.size}L) AS window_end",
        ]
    named = select(
        rows, f"_l AS {quoted(join.left.name)}", f"_r AS {quoted(join.right.name)}", *window
    )
    return select(
        named,
        *[f"{expression} AS {quoted(name)}" for name, expression in join.output],
        "'upsert' AS _op",
        f"{epoch}L AS _epoch",
    )


def _late_rows(side: _Side, join: JoinSpec, epoch: int) -> DataFrame:
    """The side's late records: the side's name, the record's columns as JSON, its last
    window (window joins), the watermark at its position and where it is in the source."""
    late = side.cls.frame.where(f"_class = {LATE}").select(*POSITION, "_ts_us", "_wm")
    rows = with_records(late, side.cls.records)
    record = (
        "to_json(named_struct("
        + ", ".join(f"'{c}', {quoted(c)}" for c, _ in side.side.source.schema)
        + "))"
    )
    window = ["CAST(NULL AS TIMESTAMP) AS window_start", "CAST(NULL AS TIMESTAMP) AS window_end"]
    assigner = join_type(join).assigner
    if assigner is not None:  # its last window
        start = assigner.last_start(col("_ts_us"))
        window = [f"timestamp_micros({start}) AS window_start",
                  f"timestamp_micros({start} + {assigner.size}L) AS window_end"]  # fmt: skip
    return select(
        rows,
        f"'{side.side.name}' AS side",
        f"{record} AS record",
        *window,
        "timestamp_micros(_wm) AS watermark",
        "_file AS source_file",
        "_line AS source_line",
        f"{epoch}L AS epoch",
    )
