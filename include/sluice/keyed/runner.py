"""Run a keyed process function for one key of one epoch (plain Python, no Spark).

For one key the engine hands over the key's records of the epoch in source order (with the
event time ``_ts_us`` and the watermark at each record's position ``_wm``) and the key's
state row of the last checkpoint. :meth:`KeyedProgram.run_key`:

1. loads the declared states and the timers from the state row;
2. walks the records in order: timers the watermark has reached before a record fire first
   (``on_timer``), then the run of records up to the next such point goes to the function as
   one pandas batch;
3. fires the timers the epoch's final watermark reaches;
4. returns the emitted rows and the new state row (expired TTL entries dropped; None when
   the key has neither state nor timers left).

A function that raises stops the epoch with :class:`KeyedFunctionError`, naming the pipeline,
epoch, key and function (nothing of the epoch is committed; a retry replays it).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from sluice.keyed.context import NO_WATERMARK, KeyedContext, Timers
from sluice.keyed.exceptions import ERROR_MARK, KeyedFunctionError
from sluice.keyed.state import ListState, MapState, ReducingState, StateHandle, ValueState
from sluice.spec.model import StateSpec

__all__ = [
    "ERROR_MARK",
    "NO_WATERMARK",
    "KeyResult",
    "KeyedFunctionError",
    "KeyedProgram",
    "state_column",
]

TIMERS = "_timers"
_NO_TIMES: tuple[int, ...] = ()


def state_column(name: str) -> str:
    return f"_s_{name}"


def stamp_column(name: str) -> str:
    return f"_t_{name}"


@dataclass(frozen=True)
class KeyResult:
    rows: list[dict[str, Any]]
    state: dict[str, Any] | None  # the new state row (state columns + _timers), None: empty
    fired: int  # timers fired


@dataclass(frozen=True)
class KeyedProgram:
    """Everything one key's run needs; pickled to Spark's executors."""

    pipeline: str
    epoch: int
    function: Callable[..., Any]
    function_ref: str
    on_timer: Callable[..., Any] | None
    on_timer_ref: str | None
    states: tuple[StateSpec, ...]
    reducers: tuple[tuple[str, Callable[[Any, Any], Any]], ...]
    output: tuple[str, ...]  # output column names
    columns: tuple[str, ...]  # record columns the function sees
    end_watermark_us: int | None

    def run_key(self, key: Any, records: Any, state_row: Mapping[str, Any] | None) -> KeyResult:
        """``records``: a pandas DataFrame in source order with ``_ts_us`` and ``_wm``."""
        run = _KeyRun(self, key, state_row or {})
        n = len(records)
        wm = records["_wm"].to_numpy(dtype="int64") if n else _NO_TIMES
        ts = records["_ts_us"].astype("int64").to_numpy() if n else _NO_TIMES
        run.walk(records, ts, wm, exact=False)
        return run.finish()

    def run_frame(
        self,
        key: Any,
        records: Any,
        ts: Any,
        wm: Any,
        state_row: Mapping[str, Any] | None,
        tuples: Callable[[], list[Any]] | None = None,
    ) -> KeyResult:
        """:meth:`run_key` for records already in the function's shape: ``records`` holds
        exactly :attr:`columns` with the index 0..n-1 and is the key's own (a run without
        timer firings in between passes it to the function as it is); ``ts`` and ``wm``
        are its event times and position watermarks as int64 numpy arrays. ``tuples``, when
        given, makes the rows ``ctx.each(records)`` yields (what ``records.itertuples
        (index=False)`` gives, built from the whole batch's columns at once)."""
        run = _KeyRun(self, key, state_row or {})
        run.walk(records, ts, wm, exact=True, tuples=tuples)
        return run.finish()


def frame_slice(frame: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of a pandas DataFrame with the index 0..n-1, as ``frame.iloc[lo:hi]
    .reset_index(drop=True)`` gives them but without copying the data (half the cost; a
    key's slices never overlap another key's, so a function writing into its records
    changes nothing another key reads)."""
    import pandas as pd

    part = frame.iloc[lo:hi]
    part._is_copy = None  # the function's own frame: no SettingWithCopyWarning
    part.index = pd.RangeIndex(hi - lo)
    return part


def _sliced(tuples: Callable[[], list[Any]], i: int, j: int) -> Callable[[], list[Any]]:
    return lambda: tuples()[i:j]


class _KeyRun:
    def __init__(self, program: KeyedProgram, key: Any, row: Mapping[str, Any]) -> None:
        self.p = program
        self.key = key
        self.rows: list[dict[str, Any]] = []
        self.fired = 0
        self.timers = Timers(list(row.get(TIMERS) or []), enabled=program.on_timer is not None)
        self.ctx = KeyedContext(key, {}, self.timers, program.pipeline, program.epoch)
        self.ctx._fire = self.fire_due
        reducers = dict(program.reducers)
        self.ctx._states = {
            s.name: _handle(s, self.ctx, row, reducers.get(s.name)) for s in program.states
        }

    def walk(
        self,
        records: Any,
        ts: Any,
        wm: Any,
        *,
        exact: bool,
        tuples: Callable[[], list[Any]] | None = None,
    ) -> None:
        """``ts``, ``wm``: int64 arrays (``wm`` NO_WATERMARK: none yet); ``exact``: the frame
        has just the function's columns, index 0..n-1, and is this key's own."""
        import numpy as np

        n = len(ts)
        i = 0
        while i < n:
            self.fire_due(None if wm[i] == NO_WATERMARK else int(wm[i]))
            earliest = self.timers.earliest()
            j = n
            if earliest is not None:
                later = np.nonzero(wm[i + 1 :] >= earliest)[0]
                j = i + 1 + int(later[0]) if len(later) else n
            self.ctx.now_us = int(ts[i:j].max())
            self.ctx.watermark_us = None if wm[i] == NO_WATERMARK else int(wm[i])
            if not exact:
                batch = records.iloc[i:j][list(self.p.columns)].reset_index(drop=True)
            elif i == 0 and j == n:
                batch = records
            else:
                batch = frame_slice(records, i, j)
            self.ctx._times = (ts[i:j], wm[i:j])
            if tuples is not None:
                self.ctx._tuples = (batch, _sliced(tuples, i, j))
            self.collect(self.p.function_ref, partial(self.p.function, self.ctx, batch))
            i = j
        self.fire_due(self.p.end_watermark_us)

    def fire_due(self, watermark: int | None) -> None:
        now, current = self.ctx.now_us, self.ctx.watermark_us
        while (due := self.timers.next_due(watermark)) is not None:
            assert self.p.on_timer is not None and self.p.on_timer_ref is not None
            # the timer's own time is the watermark it sees: deterministic, whichever record
            # or epoch end moved the watermark past it
            self.ctx.now_us, self.ctx.watermark_us = due, due
            call = partial(self.p.on_timer, self.ctx, self.ctx.timestamp)
            self.collect(self.p.on_timer_ref, call)
            self.fired += 1
        self.ctx.now_us, self.ctx.watermark_us = now, current

    def collect(self, ref: str, call: Callable[[], Any]) -> None:
        try:
            self.rows.extend(_rows(call(), self.p.output))
        except KeyedFunctionError:
            raise
        except Exception as exc:
            tail = "".join(traceback.format_exception(exc)[-3:]).strip().replace("\n", " | ")
            raise KeyedFunctionError(
                self.p.pipeline,
                self.p.epoch,
                self.key,
                ref,
                f"{type(exc).__name__}: {exc} [{tail}]",
            ) from exc

    def finish(self) -> KeyResult:
        state: dict[str, Any] = {}
        alive = False
        for spec in self.p.states:
            value, stamps = self.ctx._states[spec.name].snapshot(self.p.end_watermark_us)
            state[state_column(spec.name)] = value
            if spec.ttl_us is not None:
                state[stamp_column(spec.name)] = stamps
            alive = alive or value is not None
        state[TIMERS] = self.timers.snapshot() or None
        alive = alive or state[TIMERS] is not None
        return KeyResult(self.rows, state if alive else None, self.fired)


def _handle(
    spec: StateSpec,
    ctx: KeyedContext,
    row: Mapping[str, Any],
    reduce: Callable[[Any, Any], Any] | None,
) -> StateHandle:
    value = row.get(state_column(spec.name))
    stamps = row.get(stamp_column(spec.name))
    if spec.kind == "value":
        return ValueState(spec.name, spec.ttl_us, ctx, value, stamps)
    if spec.kind == "reducing":
        assert reduce is not None
        return ReducingState(spec.name, spec.ttl_us, ctx, reduce, value, stamps)
    if spec.kind == "list":
        return ListState(spec.name, spec.ttl_us, ctx, value, stamps)
    return MapState(spec.name, spec.ttl_us, ctx, value, stamps)


def _rows(result: Any, columns: tuple[str, ...]) -> Iterable[dict[str, Any]]:
    """What a function returned (None, a pandas DataFrame, or rows as mappings or tuples) as
    dicts of the output columns."""
    if result is None:
        return []
    if hasattr(result, "to_dict") and hasattr(result, "columns"):  # pandas.DataFrame
        result = result.to_dict("records")
    rows = []
    for row in result:
        if isinstance(row, Mapping):
            unknown = sorted(set(row) - set(columns))
            if unknown:
                raise ValueError(f"emitted columns {unknown} not in process.output {list(columns)}")
            rows.append({c: row.get(c) for c in columns})
        elif not isinstance(row, tuple | list):
            raise ValueError(f"emitted {row!r}: a row must be a mapping or a tuple")
        else:
            values = tuple(row)
            if len(values) != len(columns):
                raise ValueError(
                    f"emitted {len(values)} values, process.output has {len(columns)} columns "
                    f"{list(columns)}"
                )
            rows.append(dict(zip(columns, values, strict=True)))
    return rows
