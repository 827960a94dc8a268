"""The helper jar's UDFs as PySpark columns, and its ledgers as Python values.

Each call builds a new UDF object on the driver: Spark serializes it into every task, so each
task works on its own copy (their state is per task) and reports into the ledger passed in,
a Spark accumulator registered here.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.jvm.context import context_cache
from sluice.jvm.exceptions import HelperClassesMissing

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "Ledger",
    "LedgerRow",
    "SqlFunctions",
    "aggregate",
    "columns_array",
    "counted",
    "counting",
    "helper_classes",
    "select",
    "select_columns",
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


# between the expressions of a select list sent whole (io.sluice.spark.Plans.SEPARATOR)
_SEPARATOR = "\x1f"


def _plans(spark: SparkSession) -> Any:
    """The helper class ``io.sluice.spark.Plans``, looked up once per context (a lookup
    through the JVM view costs a Py4J call per name segment)."""
    cache = context_cache(spark, "plans class")
    found = cache.get("Plans")
    if found is None:
        found = cache["Plans"] = helper_classes(spark).Plans
    return found


def _member(spark: SparkSession, name: str) -> Any:
    """A static method of ``Plans``, looked up once per context (each lookup is a call)."""
    cache = context_cache(spark, "plans members")
    found = cache.get(name)
    if found is None:
        found = cache[name] = getattr(_plans(spark), name)
    return found


def select(frame: DataFrame, *expressions: object) -> DataFrame:
    """``frame.selectExpr(*expressions)`` (SQL text, or objects whose ``str`` is) in one Py4J
    call (PySpark sends a list one element at a time)."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    texts = tuple(map(str, expressions))
    if any(_SEPARATOR in e for e in texts):
        raise ValueError(f"an expression holds the separator \\x1f: {texts}")
    session = frame.sparkSession
    java = _member(session, "select")(frame._jdf, _SEPARATOR.join(texts))
    return ClassicFrame(java, session)


def aggregate(frame: DataFrame, keys: list[str], aggregates: list[str]) -> DataFrame:
    """``frame.groupBy(*keys).agg(*aggregates)`` (SQL text each) in one Py4J call."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    texts = (*keys, *aggregates)
    if any(_SEPARATOR in e for e in texts) or not aggregates:
        raise ValueError(f"not an aggregation: keys {keys}, aggregates {aggregates}")
    session = frame.sparkSession
    java = _member(session, "aggregate")(
        frame._jdf, _SEPARATOR.join(keys), _SEPARATOR.join(aggregates)
    )
    return ClassicFrame(java, session)


def columns_array(spark: SparkSession, columns: Sequence[Column]) -> Any:
    """``columns`` as a Java ``Column[]``: a select list built once (a call per column) and
    applied by :func:`select_columns` in one call each time."""
    from pyspark.sql.classic.column import _to_java_column

    context: Any = spark.sparkContext
    array = context._gateway.new_array(context._jvm.org.apache.spark.sql.Column, len(columns))
    for i, column in enumerate(columns):
        array[i] = _to_java_column(column)
    return array


def select_columns(frame: DataFrame, columns: Any) -> DataFrame:
    """``frame.select(*columns)`` for a :func:`columns_array`, in one Py4J call."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    session = frame.sparkSession
    return ClassicFrame(_member(session, "select")(frame._jdf, columns), session)


class SqlFunctions:
    """The helper UDFs as SQL functions, for plans written as SQL text (:func:`select`,
    ``where``), inside a ``with`` block: each is registered in the session under a name its
    caller gives (a role: ``sluice_<role>``), and dropped when the block ends. An analysed
    plan holds the function itself, so a plan built in the block runs after it.

    The names are the same every epoch, because Spark writes a UDF's name into the stage's
    generated code, and new code is compiled again and runs cold
    (tests/windows/test_generated_code.py). So blocks take turns, process-wide (a warm
    server runs epochs of several pipelines at once): a block only builds plans, it never
    waits for a Spark job. Blocks nest in one thread with distinct roles."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._names: list[str] = []

    def __enter__(self) -> SqlFunctions:
        _FUNCTIONS_LOCK.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            _FUNCTIONS_LOCK.release()

    @staticmethod
    def name(role: str) -> str:
        """The SQL function name of ``role`` (the same every epoch)."""
        return f"sluice_{role}"

    def _register(self, kind: str, role: str, *args: Any) -> str:
        name = self.name(role)
        if name in _HELD:
            raise RuntimeError(f"the SQL function {name} is registered already (nested blocks)")
        _member(self.spark, kind)(self.spark._jsparkSession, name, *args)
        self._names.append(name)
        _HELD.add(name)
        return name

    def ledger(self, kind: str) -> Ledger:
        """A ledger for the UDF class ``kind`` (``PositionMax`` or ``ClassTally``)."""
        return Ledger(_member(self.spark, "ledger")(self.spark._jsparkSession, kind))

    def position_max(self, ledger: Ledger, role: str = "position_max") -> str:
        """``PositionMax``'s function: ``name(partition, major, line, ts)``, the largest
        ``ts`` of the earlier rows of the same run."""
        return self._register("positionMax", role, ledger.java)

    def class_tally(self, ledger: Ledger, role: str = "class_tally") -> str:
        """``ClassTally``'s: ``name(partition, major, line, code, extra, anchor)``: ``code``
        as is, counted per run and class (``line`` null: per task); ``anchor`` a (long)
        column Spark must evaluate for every counted row."""
        return self._register("classTally", role, ledger.java)

    def constant(self, value: int, role: str) -> str:
        """``value`` (a long) as SQL text, ``name()``: generated code that is the same for
        every value (``io.sluice.spark.Constant``), for the values that change each epoch,
        so Spark reuses the compiled, JIT-warm code of the last epoch."""
        return self._register("constant", role, int(value)) + "()"

    def partition_value(self, values: dict[str, int], role: str = "partition_value") -> str:
        """``name(partition)``: ``values[partition]`` (null for another), with code that is
        the same for any ``values`` (``io.sluice.spark.PartitionValue``)."""
        if any("\n" in p for p in values):
            raise ValueError(f"a partition name holds a line break: {sorted(values)}")
        table = "".join(f"{p}\t{int(v)}\n" for p, v in values.items())
        return self._register("partitionValue", role, table)

    def line_info(self, before: dict[str, dict[int, int]], role: str = "line_info") -> str:
        """``LineInfo``'s function (:mod:`sluice.sources.parsing`): ``name(path, start,
        bytes)``."""
        return self._register("lineInfo", role, False, before)

    def close(self) -> None:
        """Drop every function registered here (one Py4J call)."""
        if self._names:
            names, self._names = self._names, []
            _HELD.difference_update(names)
            _member(self.spark, "drop")(self.spark._jsparkSession, _SEPARATOR.join(names))


_FUNCTIONS_LOCK = threading.RLock()
_HELD: set[str] = set()  # the names the block(s) of the thread holding the lock registered


def counting(spark: SparkSession, frame: Any, label: str, code: str = "0") -> tuple[Any, Ledger]:
    """``frame`` with every row counted as Spark produces it (per ``code``, SQL text for a
    small integer, default 0), for a write to report how many rows it wrote without a job of
    its own: a filter that is always true, but that Spark cannot drop or move (the UDF is not
    deterministic)."""
    text = "'" + label.replace("\\", "\\\\").replace("'", "\\'") + "'"
    none = "CAST(NULL AS BIGINT)"
    with SqlFunctions(spark) as fns:
        ledger = fns.ledger("ClassTally")
        tally = fns.class_tally(ledger, "count")
        counted = frame.where(f"{tally}({text}, 0, {none}, {code}, 0, {none}) >= 0")
    return counted, ledger


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
