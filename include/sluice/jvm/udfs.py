"""The helper jar's UDFs as PySpark columns, and its ledgers as Python values.

Each call builds a new UDF object on the driver: Spark serializes it into every task, so each
task works on its own copy (their state is per task) and reports into the ledger passed in,
a Spark accumulator registered here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.jvm.context import context_cache
from sluice.jvm.exceptions import HelperClassesMissing

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

__all__ = [
    "Ledger",
    "LedgerRow",
    "class_tally",
    "constant",
    "counted",
    "counting",
    "helper_classes",
    "new_ledger",
    "partition_value",
    "position_max",
]


@dataclass(frozen=True)
class LedgerRow:
    """One run's slots: ``(partition, major, split)`` and the values. ``split`` is the line
    the run begins at (a write counter's: its task's partition number)."""

    partition: str
    major: int
    split: int
    slots: tuple[int, ...]


@dataclass(frozen=True)
class Ledger:
    """A :class:`io.sluice.spark.RunLedger` registered with the SparkContext."""

    java: Any

    def rows(self) -> list[LedgerRow]:
        """Every run reported so far (one Py4J call)."""
        found = []
        for line in str(self.java.dump()).splitlines():
            key, *values = line.split("\t")
            partition, major, split = key.split("\u0001")
            found.append(LedgerRow(partition, int(major), int(split), tuple(map(int, values))))
        return found


def _jvm(spark: SparkSession) -> Any:
    """The JVM, once checked (per Spark context) to have the helper classes."""
    jvm: Any = spark.sparkContext._jvm
    checked = context_cache(spark, "helper classes")
    if checked:
        return jvm
    from py4j.java_gateway import JavaClass

    if not isinstance(jvm.io.sluice.spark.RunLedger, JavaClass):
        raise HelperClassesMissing()
    checked["present"] = True
    return jvm


def helper_classes(spark: SparkSession) -> Any:
    """The package ``io.sluice.spark`` of the helper jar (checked present)."""
    return _jvm(spark).io.sluice.spark


def new_ledger(spark: SparkSession, kind: str) -> Ledger:
    """A ledger for the UDF class ``kind`` (``PositionMax`` or ``ClassTally``)."""
    jvm = _jvm(spark)
    java = getattr(jvm.io.sluice.spark, kind).newLedger()
    spark.sparkContext._jsc.sc().register(java, f"sluice-{kind}")
    return Ledger(java)


def _column(spark: SparkSession, column: Column | str) -> Any:
    from pyspark.sql.classic.column import _to_java_column

    return _to_java_column(column)


def _wrap(java: Any) -> Column:
    from pyspark.sql.classic.column import Column as ClassicColumn

    return ClassicColumn(java)


def position_max(
    spark: SparkSession, ledger: Ledger, partition: Column | str, major: Column | str,
    line: Column | str, ts: Column | str,
) -> Column:  # fmt: skip
    """The largest ``ts`` of the earlier rows of the same run (``io.sluice.spark.PositionMax``)."""
    args = [_column(spark, c) for c in (partition, major, line, ts)]
    return _wrap(_jvm(spark).io.sluice.spark.Udfs.positionMax(ledger.java, *args))


def constant(spark: SparkSession, value: int) -> Column:
    """``value`` (a long) as a column whose generated code is the same for every value
    (``io.sluice.spark.Constant``): for the values that change each epoch, so that Spark reuses
    the compiled, JIT-warm code of the last epoch instead of compiling a new class."""
    return _wrap(_jvm(spark).io.sluice.spark.Udfs.constant(int(value)))


def partition_value(spark: SparkSession, values: dict[str, int], partition: Column | str) -> Column:
    """``values[partition]`` (null for a partition not in ``values``), with generated code that
    is the same for any ``values`` (``io.sluice.spark.PartitionValue``; see :func:`constant`)."""
    if any("\n" in p for p in values):
        raise ValueError(f"a partition name holds a line break: {sorted(values)}")
    table = "".join(f"{p}\t{int(v)}\n" for p, v in values.items())
    return _wrap(_jvm(spark).io.sluice.spark.Udfs.partitionValue(table, _column(spark, partition)))


def class_tally(
    spark: SparkSession, ledger: Ledger, partition: Column | str, major: Column | str,
    line: Column | str | None, code: Column | str, extra: Column | str,
    anchor: Column | str | None = None,
) -> Column:  # fmt: skip
    """``code`` as is, counted per run and class (``io.sluice.spark.ClassTally``).
    ``line``: the row's line (None: count per task, for rows written by one action);
    ``anchor``: a (long) column Spark must evaluate for every counted row."""
    from pyspark.sql import functions as F

    anchored = anchor if anchor is not None else F.lit(None).cast("long")
    at = line if line is not None else F.lit(None).cast("long")
    args = [_column(spark, c) for c in (partition, major, at, code, extra, anchored)]
    return _wrap(_jvm(spark).io.sluice.spark.Udfs.classTally(ledger.java, *args))


def counting(
    spark: SparkSession, frame: Any, label: str, code: Column | None = None
) -> tuple[Any, Ledger]:
    """``frame`` with every row counted as Spark produces it (per ``code``, default 0), for
    a write to report how many rows it wrote without a job of its own: a filter that is
    always true, but that Spark cannot drop or move (the UDF is not deterministic)."""
    from pyspark.sql import functions as F

    ledger = new_ledger(spark, "ClassTally")
    tallied = class_tally(spark, ledger, F.lit(label), F.lit(0), None, code if code is not None
                          else F.lit(0), F.lit(0))  # fmt: skip
    return frame.where(tallied >= F.lit(0)), ledger


def where_not_pushed(frame: Any, condition: Column) -> Any:
    """``frame.where(condition)``, with the filter kept where it is. Spark pushes a filter
    below the projections that define its columns by writing their definitions into it
    (``PushPredicateThroughNonJoin``), and stops only at a projection with a nondeterministic
    column the filter uses (an unused one is pruned first). A filter on a parsed record's
    ``_error``, pushed down that way, became one expression of every parse step nested in
    every other: 4.4 MB of plan text, a 9.2 MiB task binary and an interpreted filter for the
    dead letters of a 100-line epoch. ``spark_partition_id()`` is nondeterministic and costs
    nothing a row."""
    from pyspark.sql import functions as F

    barred = frame.select("*", F.spark_partition_id().alias("_barrier"))
    return barred.where((F.col("_barrier") >= 0) & condition).drop("_barrier")


def counted(ledger: Ledger, code: int | None = None) -> int:
    """Rows a :func:`counting` frame produced (of ``code``, or all)."""
    total = 0
    for row in ledger.rows():
        total += sum(row.slots[:5]) if code is None else row.slots[code]
    return total
