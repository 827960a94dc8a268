"""Nexmark q3 and q8: the shipped join specs (include/pipelines/nexmark_q3.yaml, _q8.yaml)
over 1,000,000 generated events equal a DuckDB reference computed from
``generate(0, 1_000_000)``'s persons and auctions, for epoch cuts of 1, 7 and random sizes.

* q3, the standard query's SQL (an unbounded join, each side filtered): the spec's regular
  join keeps rows for a 1 min TTL of event time, and loses none of the standard output.
* q8, persons and auctions in the same 10 s tumbling window on id = seller: every pair (the
  standard query's rows are its distinct (id, name, window_start): compared too).

Both sources read the same event range each epoch (``max_units`` caps events); event times
never decrease (``max_out_of_orderness: 0s``): nothing is late, nothing dead.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from sluice.nexmark import EventKind, NexmarkConfig, generate
from sluice.protocol import run_until_drained
from sluice.spec import load_spec

from tests.fixtures.pipelines import committed_rows, runtime

REPO = Path(__file__).resolve().parents[2]
PIPELINES = REPO / "include" / "pipelines"
EVENTS = 1_000_000
SECOND_US = 1_000_000

pytestmark = pytest.mark.spark

CUTS: dict[str, Any] = {
    "seven": -(-EVENTS // 7),
    "one": EVENTS,
    "random": (lambda rng: lambda _i: rng.randint(50_000, 400_000))(random.Random(8)),
}


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """DuckDB with ``person`` and ``auction`` of ``generate(0, 1M)``, ``t`` in µs."""
    tables = generate(0, EVENTS, NexmarkConfig())
    connection = duckdb.connect()
    for kind, name, columns in (
        (EventKind.PERSON, "person", ["id", "name", "city", "state"]),
        (EventKind.AUCTION, "auction", ["id", "seller", "category"]),
        (EventKind.BID, "bid", ["auction", "bidder", "price"]),
    ):
        table = tables[kind]
        arrow = table.select(columns).append_column("t", table.column("date_time").cast(pa.int64()))
        connection.register(f"{name}_arrow", arrow)
        connection.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
    yield connection
    connection.close()


def q3_reference(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    return con.execute(
        """
        SELECT P.name, P.city, P.state, A.id
        FROM auction A, person P
        WHERE A.seller = P.id AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')
          AND A.category = 10
        """
    ).fetchall()


def q8_reference(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    size = 10 * SECOND_US
    return con.execute(
        f"""
        SELECT P.id, P.name, P.t - P.t % {size} AS ws, A.id
        FROM person P JOIN auction A
          ON P.id = A.seller AND P.t - P.t % {size} = A.t - A.t % {size}
        """
    ).fetchall()


def q7_rows_reference(con: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """The standard q7: every bid whose price is its closed window's highest (ties too)."""
    size = 10 * SECOND_US
    return con.execute(
        f"""
        WITH w AS (
            SELECT t - t % {size} AS ws, max(price) AS max_price FROM bid
            GROUP BY ws HAVING ws + {size} <= (SELECT max(t) FROM bid)
        )
        SELECT B.auction, B.price, B.bidder, B.t, w.ws
        FROM bid B JOIN w ON B.t - B.t % {size} = w.ws AND B.price = w.max_price
        """
    ).fetchall()


def nexmark_spec(tmp_path: Path, query: str, retained: int | None = None) -> Any:
    """The shipped spec, paths under ``tmp_path``, each source's epoch cap lifted (the test's
    ``max_units`` cuts the epochs)."""
    text = (PIPELINES / f"nexmark_{query}.yaml").read_text()
    assert f"max_events: {EVENTS}" in text and "events_per_epoch: 250000" in text
    text = text.replace("events_per_epoch: 250000", f"events_per_epoch: {EVENTS}")
    if retained is not None:  # every commit retires an epoch: retention runs
        assert "interval: 1m, timeout: 10m}" in text
        text = text.replace("timeout: 10m}", f"timeout: 10m, retained: {retained}}}")
    path = tmp_path / f"{query}.yaml"
    path.write_text(
        text.replace("${SLUICE_DATA:-${SLUICE_DATA_ROOT:-data}/nexmark}", str(tmp_path))
    )
    return load_spec(path)


def _micros(value: Any) -> int:
    return int(value.timestamp()) * SECOND_US + value.microsecond


@pytest.mark.parametrize(
    "cut", [pytest.param(c, marks=[] if c == "seven" else [pytest.mark.extended]) for c in CUTS]
)
@pytest.mark.parametrize("query", ["q3", "q8"])
def test_nexmark_join_equals_duckdb_reference(
    spark: Any, con: duckdb.DuckDBPyConnection, tmp_path: Path, query: str, cut: str
) -> None:
    spec = nexmark_spec(tmp_path, query)
    outcomes = run_until_drained(runtime(spec), spark, max_units=CUTS[cut])
    if cut == "seven":
        assert len(outcomes) == 7
    expected = NEXMARK_REFERENCES[query](con)
    rows = nexmark_rows(spec, query)
    if query == "q8":
        # the standard query's rows: each person once per window
        standard = {(p, n, w) for p, n, w, _ in expected}
        assert {(p, n, w) for p, n, w, _ in rows} == standard
    assert len(expected) > 500, f"the reference has only {len(expected)} rows"
    assert Counter(rows) == Counter(expected)
    stats = [o.checkpoint.result.stats for o in outcomes]
    assert sum(s.late for s in stats) == sum(s.dead for s in stats) == 0


@pytest.mark.extended
@pytest.mark.parametrize("cut", list(CUTS))
def test_full_q7_is_two_pipelines_whose_second_joins_the_maxima_to_the_bids(
    spark: Any, con: duckdb.DuckDBPyConnection, tmp_path: Path, cut: str
) -> None:
    """nexmark_q7 (each closed window's max_price, in 7 epochs) then nexmark_q7_rows (a window
    join of its output files with the bids on price) cut in 1, 7 or random epochs: the
    standard q7's rows. (The second stage's bound on its maxima's disorder, 30 s, is the
    first stage's epoch span: the first stage keeps cuts of at most 25 s of events.)"""
    first = nexmark_spec(tmp_path, "q7")
    run_until_drained(runtime(first), spark, max_units=CUTS["seven"])
    second = nexmark_spec(tmp_path, "q7_rows")
    assert second.join is not None and second.join.left.source.path == first.sinks[0].path
    outcomes = run_until_drained(runtime(second), spark, max_units=CUTS[cut])
    rows = nexmark_rows(second, "q7_rows")
    expected = q7_rows_reference(con)
    assert len(expected) >= 9, f"the reference has only {len(expected)} rows"
    assert Counter(rows) == Counter(expected)
    stats = [o.checkpoint.result.stats for o in outcomes]
    assert sum(s.late for s in stats) == sum(s.dead for s in stats) == 0


NEXMARK_REFERENCES = {"q3": q3_reference, "q8": q8_reference, "q7_rows": q7_rows_reference}


def nexmark_rows(spec: Any, query: str) -> list[tuple[Any, ...]]:
    """The committed rows of a join query, as its reference's tuples."""
    out = committed_rows(spec, "out")
    if query == "q3":
        return [(r["name"], r["city"], r["state"], r["id"]) for r in out]
    if query == "q8":
        return [(r["id"], r["name"], _micros(r["window_start"]), r["auction"]) for r in out]
    return [
        (r["auction"], r["price"], r["bidder"], _micros(r["date_time"]), _micros(r["window_start"]))
        for r in out
    ]
