"""Many keys per Arrow batch (sluice.keyed.batches) against per-key references.

* key boundaries: null equals null, NaN equals NaN, several key columns, nested keys;
* :class:`KeyBatches` without Spark, over the same rows cut into batches every possible way,
  equals running each key on its own frame the way a per-key group did (the key's records
  converted to pandas by themselves, so their dtypes are the key's own);
* through Spark: hundreds of keys, a null key and a key whose records span several Arrow
  batches (``spark.sql.execution.arrow.maxRecordsPerBatch`` set small), with one key
  column, two, or none, over three epochs, equal to a plain-Python simulation per key.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from sluice.keyed.batches import RECORD, SIDE, STATE, KeyBatches, key_starts
from sluice.keyed.context import NO_WATERMARK
from sluice.keyed.runner import KeyedProgram
from sluice.protocol import run_until_drained
from sluice.sinks.files import read_rows
from sluice.spec import load_spec
from sluice.spec.model import StateSpec
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.keyed import many

S = 1_000_000
ORDER = ("_major", "_line", "_partition")

# -- key boundaries -----------------------------------------------------------------------


def test_a_key_begins_where_any_key_column_changes_null_and_nan_included() -> None:
    batch = pa.record_batch({
        "a": pa.array([None, None, "x", "x", "x", "y", "y", "y"]),
        "b": pa.array([1.0, 1.0, float("nan"), float("nan"), -0.0, 0.0, None, None]),
    })  # fmt: skip
    assert key_starts(batch, ["a"]).tolist() == [0, 2, 5]
    assert key_starts(batch, ["b"]).tolist() == [0, 2, 4, 6]
    assert key_starts(batch, ["a", "b"]).tolist() == [0, 2, 4, 5, 6]
    nested = pa.record_batch({"k": pa.array([[1, 2], [1, 2], None, None, [1]])})
    assert key_starts(nested, ["k"]).tolist() == [0, 2, 4]
    assert key_starts(batch.slice(0, 0), ["a"]).tolist() == []
    assert key_starts(batch.slice(3, 1), ["a", "b"]).tolist() == [0]


# -- KeyBatches without Spark ---------------------------------------------------------------

STATES = (StateSpec("count", "value", "long"), StateSpec("values", "list", "long"))
STATE_TYPES = {
    "_s_count": pa.int64(),
    "_s_values": pa.list_(pa.int64()),
    "_timers": pa.list_(pa.int64()),
}
OUTPUT = ("key", "kind", "value", "count", "values", "dtype", "at")
OUT_TYPE = pa.list_(
    pa.struct([
        ("key", pa.string()), ("kind", pa.string()), ("value", pa.int64()),
        ("count", pa.int64()), ("values", pa.string()), ("dtype", pa.string()),
        ("at", pa.timestamp("us", tz="UTC")),
    ])
)  # fmt: skip


def _program(end_watermark: int) -> KeyedProgram:
    return KeyedProgram(
        pipeline="many", epoch=2, function=many.process, function_ref="many:process",
        on_timer=many.on_timer, on_timer_ref="many:on_timer", states=STATES, reducers=(),
        output=OUTPUT, columns=("user", "value", "ts"), end_watermark_us=end_watermark,
    )  # fmt: skip


def _input(seed: int) -> tuple[pa.Table, int]:
    """Records and state rows of 40 keys (a null key and one with 30 records among them) in
    the operator's layout, sorted the way the operator sorts them; and the epoch's final
    watermark."""
    rnd = random.Random(seed)
    users = [None, "big", *[f"u{i:02d}" for i in range(38)]]
    rows: list[dict[str, Any]] = []
    line = 0
    for user in users:
        if user is None or rnd.random() < 0.7:  # a state row: a count, values, maybe a timer
            timers = rnd.choice([None, [many.TIMER_AT_US], [many.TIMER_AT_US, 9 * many.PERIOD_US]])
            rows.append({"user": user, SIDE: STATE, "_s_count": rnd.randint(1, 5),
                         "_s_values": [rnd.randint(1, 9)], "_timers": timers})  # fmt: skip
        many_records = {None: 12, "big": 30}.get(user)
        for _ in range(many_records or rnd.choice([0, 1, 1, 2, 3, 12])):
            line += 1
            second = many.PERIOD_US // S + rnd.randint(0, 300)
            value = None if rnd.random() < 0.15 else rnd.randint(1, 99)
            rows.append({"user": user, SIDE: RECORD, "value": value, "ts": second * S,
                         "_ts_us": second * S, "_wm": NO_WATERMARK if line == 1 else second * S - S,
                         "_major": 0, "_line": line, "_partition": 0})  # fmt: skip
    rnd.shuffle(rows)
    schema = pa.schema([
        ("user", pa.string()), ("value", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")),
        ("_ts_us", pa.int64()), ("_wm", pa.int64()), ("_major", pa.int64()),
        ("_line", pa.int64()), ("_partition", pa.int32()), (SIDE, pa.int32()),
        *STATE_TYPES.items(),
    ])  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=schema)
    order = [(c, "ascending", "at_start") for c in ("user", SIDE, *ORDER)]
    table = table.take(pa.compute.sort_indices(table, order))
    return table, many.PERIOD_US + 400 * S


def _per_key(program: KeyedProgram, table: pa.Table) -> dict[Any, tuple[Any, ...]]:
    """What a per-key group gave: the key's records alone to pandas, sorted, and its state row."""
    results = {}
    users = table.column("user").to_pylist()
    for user in dict.fromkeys(users):
        mine = table.filter(pa.array([u == user for u in users]))
        sides = mine.column(SIDE).to_pylist()
        records = mine.filter(pa.array([s == RECORD for s in sides]))
        records = records.sort_by([(c, "ascending") for c in ORDER]).to_pandas()
        state = mine.filter(pa.array([s == STATE for s in sides])).to_pylist()
        result = program.run_key(user, records, state[0] if state else None)
        new = result.state or {}
        results[user] = (
            *[new.get(c) for c in STATE_TYPES],
            result.rows,
            result.state is not None,
            result.fired,
        )
    return results


def _batched(program: KeyedProgram, batches: list[pa.RecordBatch]) -> dict[Any, tuple[Any, ...]]:
    run = KeyBatches(program, ["user"], True, STATE_TYPES, OUT_TYPE)
    out = pa.Table.from_batches(list(run(iter(batches))))
    assert out.column_names == ["user", *STATE_TYPES, "_out", "_alive", "_fired"]
    results = {}
    for row in out.to_pylist():
        assert row["user"] not in results, f"key {row['user']!r} twice"
        results[row["user"]] = (
            *[row[c] for c in STATE_TYPES],
            row["_out"],
            row["_alive"],
            row["_fired"],
        )
    return results


def _cut(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    whole = table.combine_chunks().to_batches()[0]
    bounds = [0, *sorted(set(cuts)), table.num_rows]
    return [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_key_batches_equal_a_per_key_run_however_the_batches_are_cut(seed: int) -> None:
    table, end = _input(seed)
    program = _program(end)
    expected = _per_key(program, table)
    assert None in expected and len(expected) > 25
    assert any(r[-1] for r in expected.values())  # timers fired
    # keys with and without null values; ctx.each's rows hold the frame's Python values
    assert {"int64/int", "float64/float"} <= {
        o["dtype"] for r in expected.values() for o in r[-3] if o["dtype"]
    }
    n = table.num_rows
    splits = [[*range(size, n, size)] for size in (1, 2, 3, 5, 16, n)]
    rnd = random.Random(seed)
    splits += [rnd.sample(range(1, n), rnd.randint(1, n // 4)) for _ in range(10)]
    splits.append([0, 0, 5, 5, n])  # empty batches too
    for cuts in splits:
        got = _batched(program, _cut(table, cuts))
        assert _normal(got) == _normal(expected), cuts


def _normal(results: dict[Any, tuple[Any, ...]]) -> dict[Any, Any]:
    """Output rows as Arrow gives them back (timestamps as datetimes, maps as pairs)."""
    return {
        k: (*r[:-3], pa.array([r[-3]], type=OUT_TYPE).to_pylist()[0], r[-2], r[-1])
        for k, r in results.items()
    }


# -- through Spark ----------------------------------------------------------------------------

EPOCHS = 3
KEYINGS = {"user": ["user"], "user_group": ["user", "group"], "keyless": []}


@pytest.fixture
def small_batches(spark: Any) -> Iterator[None]:
    """Arrow batches of 16 rows: keys straddle batches, and the big key spans several."""
    name = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(name)
    spark.conf.set(name, "16")
    yield
    spark.conf.set(name, before)


def _events(seed: int = 5) -> list[list[dict[str, Any]]]:
    """Per epoch: 300 keys, about 60% of them with 1-3 records, a key with 40 records and a
    null key with 4, interleaved; 5% null values."""
    rnd = random.Random(seed)
    epochs = []
    for e in range(EPOCHS):
        users: list[str | None] = ["big"] * 40 + [None] * 4
        for i in range(300):
            if rnd.random() < 0.6:
                users += [f"k{i:03d}"] * rnd.randint(1, 3)
        rnd.shuffle(users)
        epochs.append([
            {"user": u, "group": rnd.choice([1, 2, None]),
             "value": None if rnd.random() < 0.05 else rnd.randint(1, 99),
             "second": e * many.PERIOD_US // S + i}
            for i, u in enumerate(users)
        ])  # fmt: skip
    return epochs


def _reference(epochs: list[list[dict[str, Any]]], keys: list[str]) -> Counter[tuple[Any, ...]]:
    """Per key in source order: the running count and values, the dtype pandas gives the
    key's values of an epoch, and the timers of an epoch firing in the next."""

    def key_of(event: dict[str, Any]) -> Any:
        values = tuple(event[k] for k in keys)
        return None if not keys else values[0] if len(keys) == 1 else values

    out: Counter[tuple[Any, ...]] = Counter()
    counts: Counter[Any] = Counter()
    values: dict[Any, list[int]] = {}
    for e, events in enumerate(epochs):
        if e:
            for key in {key_of(ev) for ev in epochs[e - 1]}:
                at = (e - 1) * many.PERIOD_US // S + many.TIMER_AT_US // S
                out[(repr(key), "timer", None, None, None, None, at)] += 1
        nulls = {key_of(ev) for ev in events if ev["value"] is None}
        for ev in events:
            key = key_of(ev)
            counts[key] += 1
            if ev["value"] is not None:
                values.setdefault(key, []).append(ev["value"])
            dtype = "float64/float" if key in nulls else "int64/int"
            joined = ",".join(map(str, values.get(key, [])))
            out[(repr(key), "record", ev["value"], counts[key], joined, dtype, None)] += 1
    return out


def _spec(tmp_path: Path, keys: list[str]) -> Path:
    shutil.copy(Path(many.__file__), tmp_path / "many.py")
    root = tmp_path.as_uri()
    body = {
        "name": "many",
        "source": {
            "type": "files", "path": f"{root}/in", "format": "jsonl",
            "schema": {"user": "string", "group": "long", "value": "long", "ts": "timestamp"},
        },
        "event_time": {"column": "ts", "max_out_of_orderness": "0s"},
        "key_by": keys,
        "process": {
            "function": "many:process",
            "on_timer": "many:on_timer",
            "state": {"count": {"kind": "value", "type": "long"},
                      "values": {"kind": "list", "type": "long"}},
            "output": {"key": "string", "kind": "string", "value": "long", "count": "long",
                       "values": "string", "dtype": "string", "at": "timestamp"},
        },
        "sinks": [{"name": "out", "type": "files", "path": f"{root}/out"}],
        "checkpoint": {"storage": f"{root}/ckpt"},
    }  # fmt: skip
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


@pytest.mark.parametrize("keying", list(KEYINGS))
def test_many_keys_in_small_arrow_batches_equal_a_per_key_reference(
    spark: Any, small_batches: None, tmp_path: Path, keying: str
) -> None:
    keys = KEYINGS[keying]
    epochs = _events()
    (tmp_path / "in").mkdir()
    for e, events in enumerate(epochs):
        lines = [
            json.dumps({
                "user": ev["user"], "group": ev["group"], "value": ev["value"],
                "ts": datetime.fromtimestamp(ev["second"], UTC).isoformat(),
            })
            for ev in events
        ]  # fmt: skip
        (tmp_path / "in" / f"{e:02d}.jsonl").write_text("\n".join(lines) + "\n")
    spec = load_spec(_spec(tmp_path, keys))
    outcomes = run_until_drained(runtime(spec), spark, max_units=1)
    assert len(outcomes) == EPOCHS
    rows = read_rows(open_store(spec.sinks[0].path), "parquet")

    def second(ts: datetime | None) -> int | None:
        return None if ts is None else int(ts.replace(tzinfo=UTC).timestamp())

    got = Counter(
        (r["key"], r["kind"], r["value"], r["count"], r["values"], r["dtype"], second(r["at"]))
        for r in rows
    )
    expected = _reference(epochs, keys)
    assert any("None" in k[0] for k in expected)  # a null key (or key column)
    assert len({k[0] for k in expected}) >= (1 if not keys else 200)
    assert got == expected, (got - expected, expected - got)
    holding = len({k[0] for k in expected})  # every key holds its count
    assert outcomes[-1].checkpoint.result.stats.windows_open == holding
