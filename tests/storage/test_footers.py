"""sluice.storage.footers: Parquet column types from the footers equal what Spark infers,
and anything it is not sure of is left to Spark."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sluice.storage import LocalObjectStore
from sluice.storage.footers import FIRST_READ, spark_type, stored_types

T = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
# (arrow type, one value): each mapped type is checked against Spark's own inference
MAPPED = [
    (pa.int8(), 1),
    (pa.int16(), 2),
    (pa.int32(), 3),
    (pa.int64(), 4),
    (pa.float32(), 1.5),
    (pa.float64(), 2.5),
    (pa.bool_(), True),
    (pa.string(), "s"),
    (pa.large_string(), "s"),
    (pa.binary(), b"b"),
    (pa.date32(), date(2026, 1, 1)),
    (pa.timestamp("us", tz="UTC"), T),
    (pa.timestamp("ms", tz="UTC"), T),
    (pa.timestamp("us"), T.replace(tzinfo=None)),
    (pa.dictionary(pa.int32(), pa.string()), "d"),
]
UNMAPPED = [pa.uint32(), pa.decimal128(10, 2), pa.timestamp("ns", tz="UTC"), pa.list_(pa.int64())]


def write(path: Path, columns: dict[str, pa.Array]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path.name


def array(kind: pa.DataType, value: Any) -> pa.Array:
    if pa.types.is_dictionary(kind):
        return pa.array([value]).dictionary_encode()
    return pa.array([value], kind)


@pytest.mark.spark
def test_mapped_types_are_what_spark_infers(spark: Any, tmp_path: Path) -> None:
    columns = {f"c{i}": array(kind, value) for i, (kind, value) in enumerate(MAPPED)}
    name = write(tmp_path / "a.parquet", columns)
    ours = stored_types(LocalObjectStore(tmp_path), [name])
    spark_says = spark.read.option("mergeSchema", "true").parquet(str(tmp_path / name)).dtypes
    assert ours is not None
    assert list(ours.items()) == spark_says


def test_unmapped_types_leave_the_schema_to_spark(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for i, kind in enumerate(UNMAPPED):
        assert spark_type(kind) is None
        values = [[1]] if pa.types.is_list(kind) else [1]
        name = write(tmp_path / f"u{i}.parquet", {"x": pa.array([1]), "y": pa.array(values, kind)})
        assert stored_types(store, [name]) is None, kind


def test_files_merge_in_first_seen_order_and_conflicts_give_up(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    a = write(tmp_path / "a.parquet", {"b": pa.array([1]), "a": pa.array(["x"])})
    b = write(tmp_path / "b.parquet", {"a": pa.array(["y"]), "c": pa.array([1.0])})
    assert stored_types(store, [a, b]) == {"b": "bigint", "a": "string", "c": "double"}
    clash = write(tmp_path / "c.parquet", {"a": pa.array([1])})  # a: bigint here, string above
    assert stored_types(store, [a, clash]) is None
    case = write(tmp_path / "d.parquet", {"A": pa.array(["z"])})  # Spark matches names
    assert stored_types(store, [a, case]) is None  # case-insensitively: let it decide


def test_big_footers_are_read_whole_and_broken_files_left_to_spark(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    wide = {f"column_with_a_long_name_{i:05d}": pa.array([i]) for i in range(2000)}
    name = write(tmp_path / "wide.parquet", wide)
    footer = int.from_bytes((tmp_path / name).read_bytes()[-8:-4], "little")
    assert footer > FIRST_READ  # the second, exact read is exercised
    found = stored_types(store, [name])
    assert found is not None and len(found) == 2000
    (tmp_path / "text.parquet").write_text("not parquet at all")
    buffer = io.BytesIO()
    pq.write_table(pa.table({"x": [1]}), buffer)
    (tmp_path / "cut.parquet").write_bytes(buffer.getvalue()[:-20] + b"PAR1")
    for broken in ("text.parquet", "cut.parquet", "missing.parquet"):
        assert stored_types(store, [name, broken]) is None, broken


@pytest.mark.spark
def test_files_spark_wrote_give_spark_s_own_schema(spark: Any, tmp_path: Path) -> None:
    """State snapshots: decimals, arrays, structs, binary sketches and INT96 timestamps have
    no mapping of their own, but Spark's schema is in the footer."""
    frame = spark.sql(
        "SELECT 1L AS k, CAST(2.5 AS DECIMAL(20, 2)) AS s, array('a', 'b') AS d, "
        "named_struct('v', 1, 'w', 'x') AS f, TIMESTAMP'2026-01-01 00:00:00' AS t, "
        "hll_sketch_agg(1) AS h"
    )
    frame.coalesce(1).write.parquet(str(tmp_path / "state"))
    (part,) = [p.name for p in (tmp_path / "state").glob("*.parquet")]
    ours = stored_types(LocalObjectStore(tmp_path / "state"), [part])
    assert ours is not None
    assert list(ours.items()) == spark.read.parquet(str(tmp_path / "state")).dtypes
    # a nested name DDL cannot take unquoted: Spark reads the footer itself (no wrong schema)
    spark.sql("SELECT named_struct('a b', 1) AS f").write.parquet(str(tmp_path / "odd"))
    odd = [p.name for p in (tmp_path / "odd").glob("*.parquet")]
    assert stored_types(LocalObjectStore(tmp_path / "odd"), odd) is None
