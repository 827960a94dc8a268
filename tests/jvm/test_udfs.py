"""Plans from SQL text in one Py4J call (``sluice.jvm.udfs``): a select list and an
aggregation sent whole, and the helper UDFs as SQL functions that live for one block."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from sluice.jvm.udfs import SqlFunctions, aggregate, counted, counting, select

from bench.probe import Py4JCounter

pytestmark = pytest.mark.spark


def test_a_select_list_and_an_aggregation_cost_one_call_each(spark: Any) -> None:
    frame = spark.createDataFrame([(1, "a"), (2, "a"), (3, "b")], "n long, k string")
    aggregate(select(frame, "k"), ["k"], ["count(1)"])  # the helper looked up once a context
    with Py4JCounter() as calls:
        chosen = select(frame, *[f"n + {i} AS n{i}" for i in range(30)], "k")
        grouped = aggregate(chosen, ["k"], ["sum(n0) AS total", "count(1) AS rows"])
    assert calls.calls <= 2
    assert sorted(tuple(r) for r in grouped.collect()) == [("a", 3, 2), ("b", 3, 1)]
    with pytest.raises(ValueError, match="separator"):
        select(frame, "n\x1f")


def test_functions_live_for_their_block_and_the_plans_built_in_it_run_after(spark: Any) -> None:
    frame = spark.range(3)
    with SqlFunctions(spark) as fns:
        plus = select(frame, f"id + {fns.constant(40, 'test_forty')} AS v")
        with SqlFunctions(spark) as inner:  # nested, another role: fine
            inner.constant(1, "test_one")
            with pytest.raises(RuntimeError, match="sluice_test_forty"):
                inner.constant(2, "test_forty")  # the same name twice at once: refused
    assert [r.v for r in plus.collect()] == [40, 41, 42]  # analysed with the function
    with pytest.raises(AnalysisException, match="sluice_test_forty"):
        select(frame, "sluice_test_forty() AS v")  # dropped with its block


def test_blocks_take_turns_so_concurrent_epochs_never_see_each_others_values(
    spark: Any,
) -> None:
    """The names are the same every epoch (Spark writes them into the generated code), so
    two threads' blocks must not overlap: each sees its own value."""
    frame = spark.range(1)
    got: dict[int, int] = {}

    def build(value: int) -> None:
        for _ in range(20):
            with SqlFunctions(spark) as fns:
                row = select(frame, f"{fns.constant(value, 'test_mine')} AS v").collect()[0]
            assert row.v == value
        got[value] = row.v

    threads = [threading.Thread(target=build, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {1: 1, 2: 2}


def test_counting_counts_the_rows_a_write_produces_per_code(spark: Any) -> None:
    frame = spark.range(10)
    rows, ledger = counting(spark, frame, "it's a label", "CAST(id % 2 AS INT)")
    assert rows.count() == 10
    assert counted(ledger) == 10 and counted(ledger, 1) == 5
