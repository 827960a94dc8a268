"""Run a keyed process function for many keys per Arrow batch (``mapInArrow``).

The operator hands Spark one frame: the epoch's records and the touched keys' state rows,
told apart by :data:`SIDE`, hash-partitioned by key and sorted by key, side (the state row
first) and source order. :class:`KeyBatches` walks a partition's Arrow record batches:

* it cuts each batch at key boundaries (null is a key like any other, NaN equals NaN, as in
  Spark's grouping); the last key of a batch may go on in the next one, so its rows are
  carried over until the key changes;
* per batch it converts the records to pandas once (the function's columns) and the state
  rows to Python once, then runs :meth:`KeyedProgram.run_frame` per key on a slice of that
  frame;
* it yields one output batch per input batch: one row per key (key columns, new state,
  ``_out``, ``_alive``, ``_fired``), each column built once for all its keys.

What the function sees is what a per-key conversion gives: the key's records in source
order as a pandas DataFrame with the index 0..n-1, including the dtype pandas picks for
integer and boolean columns from the key's own nulls (not the batch's).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sluice.keyed.context import row_tuples
from sluice.keyed.runner import KeyedFunctionError, KeyedProgram, frame_slice

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["RECORD", "SIDE", "STATE", "KeyBatches", "key_starts"]

SIDE = "_side"  # which input a row comes from: STATE sorts before RECORD within a key
STATE, RECORD = 0, 1


class KeyBatches:
    """``mapInArrow``'s function (pickled to the executors): Arrow batches of state rows and
    records sorted by key in, one row per key out."""

    def __init__(
        self,
        program: KeyedProgram,
        keys: list[str],
        keyed: bool,
        state_arrow: dict[str, pa.DataType],
        out_arrow: pa.DataType,
    ) -> None:
        self.program, self.keys, self.keyed = program, keys, keyed
        self.state_arrow, self.out_arrow = state_arrow, out_arrow

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow as pa

        first = np.zeros(1, dtype=np.int64)
        tail: list[pa.RecordBatch] = []  # the rows so far of the last key seen
        for batch in batches:
            if not batch.num_rows:
                continue
            starts = key_starts(batch, self.keys)
            if tail and _same_key(tail[-1], batch, self.keys):
                cut = int(starts[1]) if len(starts) > 1 else batch.num_rows
                tail.append(batch.slice(0, cut))
                if cut == batch.num_rows:
                    continue
                batch, starts = batch.slice(cut), starts[1:] - cut
            if tail:  # the carried key is complete
                yield self._unit(pa.concat_batches(tail), first)
            last = int(starts[-1])
            if last:
                yield self._unit(batch.slice(0, last), starts[:-1])
            tail = [batch.slice(last)]
        if tail:
            yield self._unit(pa.concat_batches(tail), first)

    def _unit(self, data: pa.RecordBatch, starts: np.ndarray) -> pa.RecordBatch:
        """Run the keys of ``data`` (complete keys beginning at ``starts``)."""
        import numpy as np
        import pyarrow as pa

        program = self.program
        n = data.num_rows
        is_state = data.column(SIDE).to_numpy(zero_copy_only=False) == STATE
        before = np.zeros(n + 1, dtype=np.int64)  # state rows before each position
        np.cumsum(is_state, out=before[1:])
        ends = np.append(starts[1:], n)
        lows, highs = starts - before[starts], ends - before[ends]  # the keys' records
        has_state = is_state[starts]
        if has_state.any():
            rows = data.filter(pa.array(is_state)).select(list(self.state_arrow)).to_pylist()
            records = data.filter(pa.array(~is_state))
        else:
            rows, records = [], data
        frame = records.select(list(program.columns)).to_pandas()
        ts = records.column("_ts_us").to_numpy(zero_copy_only=False).astype("int64")
        wm = records.column("_wm").to_numpy(zero_copy_only=False).astype("int64")
        # pandas gives an integer or boolean column with nulls another dtype (float64,
        # object): the batch's nulls must not decide it for a key without any
        nullable = [
            (c, records.column(c))
            for c in program.columns
            if records.column(c).null_count
            and (pa.types.is_integer(records.schema.field(c).type) or
                 pa.types.is_boolean(records.schema.field(c).type))
        ]  # fmt: skip
        key_arrays = [data.column(k).take(pa.array(starts)) for k in self.keys]
        key_values = [a.to_pylist() for a in key_arrays]
        user_keys: list[Any] = [None] * len(starts)
        if self.keyed:
            user_keys = list(
                key_values[0] if len(key_values) == 1 else zip(*key_values, strict=True)
            )
        no_records = frame.iloc[0:0]  # for keys with state only (the function is not called)
        names = tuple(frame.columns)
        values: list[list[Any]] = []  # each column's Python values, made on first use

        def tuples_of(own: Any, lo: int, hi: int, replaced: tuple[str, ...]) -> Any:
            """The rows ``ctx.each`` yields for records ``lo:hi`` (``own``: the key's frame,
            whose ``replaced`` columns have the key's own dtype)."""

            def make() -> list[Any]:
                if not values:
                    values.extend(frame._ixs(k, axis=1).tolist() for k in range(len(names)))
                arrays = [
                    own[c].tolist() if c in replaced else column[lo:hi]
                    for c, column in zip(names, values, strict=True)
                ]
                return list(row_tuples(names, arrays))

            return make

        row_at = before[starts].tolist()  # the key's state row (if it has one) in rows
        states: dict[str, list[Any]] = {c: [] for c in self.state_arrow}
        out, alive, fired = [], [], []
        for key, lo, hi, stated, at in zip(
            user_keys, lows.tolist(), highs.tolist(), has_state.tolist(), row_at, strict=True
        ):
            tuples = None
            if hi > lo:
                records_of_key = frame_slice(frame, lo, hi)
                replaced = []
                for column, arrow_values in nullable:
                    piece = arrow_values.slice(lo, hi - lo)
                    if not piece.null_count:
                        records_of_key[column] = piece.to_numpy(zero_copy_only=False)
                        replaced.append(column)
                tuples = tuples_of(records_of_key, lo, hi, tuple(replaced))
            else:
                records_of_key = no_records
            row = rows[at] if stated else None
            result = program.run_frame(key, records_of_key, ts[lo:hi], wm[lo:hi], row, tuples)
            state = result.state or {}
            for column, values_of in states.items():
                values_of.append(state.get(column))
            out.append(result.rows)
            alive.append(result.state is not None)
            fired.append(result.fired)
        arrays = [*key_arrays]
        for column, kind in self.state_arrow.items():
            arrays.append(self._array(column, states[column], kind, user_keys))
        arrays.append(self._array("process.output", out, self.out_arrow, user_keys))
        arrays.append(pa.array(alive, type=pa.bool_()))
        arrays.append(pa.array(fired, type=pa.int64()))
        out_names = [*self.keys, *self.state_arrow, "_out", "_alive", "_fired"]
        return pa.RecordBatch.from_arrays(arrays, names=out_names)

    def _array(self, what: str, values: list[Any], kind: pa.DataType, keys: list[Any]) -> pa.Array:
        """One output column for all the keys; a value that does not fit names its key."""
        import pyarrow as pa

        errors = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError)
        try:
            return pa.array(values, type=kind)
        except errors:
            pass
        for key, value in zip(keys, values, strict=True):
            try:
                pa.array([value], type=kind)
            except errors as exc:
                raise KeyedFunctionError(
                    self.program.pipeline, self.program.epoch, key, self.program.function_ref,
                    f"{what}: a value does not fit the declared type {kind}: {exc}",
                ) from exc  # fmt: skip
        return pa.array(values, type=kind)  # fits key by key: raise what it raises together


def key_starts(data: pa.RecordBatch, keys: list[str]) -> np.ndarray:
    """The positions where a key begins in ``data`` (sorted by ``keys``): 0 and each row
    whose key differs from the row before."""
    import numpy as np

    n = data.num_rows
    new = np.zeros(n, dtype=bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= _changes(data.column(k))
    return np.flatnonzero(new)


def _same_key(before: pa.RecordBatch, after: pa.RecordBatch, keys: list[str]) -> bool:
    """Whether ``after`` begins with the key ``before`` ends with."""
    import pyarrow as pa

    last = before.num_rows - 1
    return not any(
        _changes(pa.concat_arrays([before.column(k).slice(last), after.column(k).slice(0, 1)]))[0]
        for k in keys
    )


def _changes(values: pa.Array) -> np.ndarray:
    """Per row after the first: whether its value differs from the row before (null equals
    null, NaN equals NaN, -0.0 equals 0.0: Spark's grouping equality)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    if n < 2:
        return np.zeros(0, dtype=bool)
    kind = values.type
    if pa.types.is_null(kind):
        return np.zeros(n - 1, dtype=bool)
    if not (
        pa.types.is_primitive(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_decimal(kind)
    ):  # nested keys (a struct or an array from select:): compared as Python values
        python = values.to_pylist()
        return np.fromiter((a != b for a, b in zip(python[1:], python, strict=False)), bool, n - 1)
    before, after = values.slice(0, n - 1), values.slice(1)
    differs = pc.not_equal(after, before).fill_null(False).to_numpy(zero_copy_only=False)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    both = valid[1:] & valid[:-1]
    changed = np.where(both, differs, valid[1:] != valid[:-1])
    if pa.types.is_floating(kind):
        nan = pc.is_nan(values).fill_null(False).to_numpy(zero_copy_only=False)
        changed &= ~(nan[1:] & nan[:-1])
    return changed
