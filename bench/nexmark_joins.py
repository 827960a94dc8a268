"""Nexmark q3 and q8, the joins of the person and auction streams, as ``bench/nexmark.py``
runs them: what each query is for each engine, and the report's section on them.

* **q8** (monitor new users): a person and an auction of theirs (``id = seller``) in the same
  10 s tumbling window; one row per (person, auction) pair: ``id, name, window_start,
  auction``. The standard query's rows (each person once per window) are its distinct
  ``(id, name, window_start)``.
* **q3** (local item suggestion): persons of OR / ID / CA joined with their category-10
  auctions: ``name, city, state, id`` (the auction's). The standard query is an unbounded
  join; every engine here bounds its state by event time (Sluice: a regular join with a 1 min
  TTL; Structured Streaming and PyFlink: ``|auction time - person time| <= 1 min``). The
  generator picks a seller among the persons of the last seconds, so no pair of the
  unbounded join is lost (tests/integration/test_nexmark_joins.py checks Sluice's).

Every engine emits a pair as soon as both of its rows have arrived (PyFlink's window join at
the window's end, which the end of the input reaches), so each output is compared whole with
DuckDB's unbounded SQL (the references of tests/integration/test_nexmark_joins.py).

Input: each side its own folder of files (``person/``, ``auction/`` beside ``bid/``, cut at
the same event numbers), read N files per side per epoch / micro-batch: both sides of an
epoch cover the same event range. Speeds count the records read: persons and auctions (8% of
the events).

* **q7full** (highest bid, the standard query): every bid carrying its 10 s window's highest
  price (ties included), as two stages: q7's maxima (one row per closed window), then those
  maxima joined back to the bids in the same 10 s window on ``max_price = price``. Sluice runs
  the two pipelines the shipped ``nexmark_q7.yaml`` / ``nexmark_q7_rows.yaml`` are (the
  second reads the first's output files as its ``maxima`` source); Structured Streaming two
  queries the same way (the second a stream-stream join of the first's output file stream and
  the bid stream); PyFlink one job (a window join of the window aggregate and the bids). Each
  engine's first stage runs to the end before its second (a bounded run: the second's first
  epoch or micro-batch reads every maximum). Speeds count the bids (read by both stages) once;
  the time is both stages'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.nexmark import SPEC_SCHEMAS, EventKind

__all__ = [
    "FULL_Q7",
    "JOIN_QUERIES",
    "MAXIMA_SCHEMA",
    "PAIR_QUERIES",
    "SIDES",
    "ddl",
    "duckdb_source",
    "full_q7_reference_sql",
    "full_q7_rows_spec",
    "join_spec",
    "kinds",
    "normalized_sql",
    "reference_sql",
    "render",
    "sss_full_q7_rows",
    "sss_query",
]

FULL_Q7 = "q7full"
JOIN_QUERIES = ("q3", "q8", FULL_Q7)
PAIR_QUERIES = ("q3", "q8")  # persons joined with auctions
# the join's sources: name -> the event kind (and folder) it reads
SIDES = {"persons": "person", "auctions": "auction"}
SCHEMAS = {name: dict(SPEC_SCHEMAS[EventKind(kind)]) for name, kind in SIDES.items()}
BID_SCHEMA = dict(SPEC_SCHEMAS[EventKind.BID])
# full q7: the columns of the first stage's output its second stage reads
MAXIMA_SCHEMA = {"window_start": "timestamp", "window_end": "timestamp", "max_price": "long"}
Q7_WINDOW_US = 10 * 1_000_000
SECOND_US = 1_000_000
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
# Sluice's spec per query: the filters (by source), the join and the output columns
BODIES: dict[str, dict[str, Any]] = {
    "q3": {
        "filter": {
            "persons": "state IN (" + ", ".join(f"'{s}'" for s in Q3_STATES) + ")",
            "auctions": f"category = {Q3_CATEGORY}",
        },
        "join": {"type": "regular", "ttl": "1m", "left": "persons", "right": "auctions",
                 "on": {"id": "seller"}},
        "output": {"name": "persons.name", "city": "persons.city", "state": "persons.state",
                   "id": "auctions.id"},
    },
    "q8": {
        "join": {"type": "window", "window": {"type": "tumbling", "size": "10s"},
                 "left": "persons", "right": "auctions", "on": {"id": "seller"}},
        "output": {"id": "persons.id", "name": "persons.name", "window_start": "window_start",
                   "auction": "auctions.id"},
    },
}  # fmt: skip


def ddl(schema: dict[str, str]) -> str:
    """A schema (a side's :data:`SCHEMAS` entry, :data:`MAXIMA_SCHEMA`) as Spark DDL."""
    spark = {"long": "bigint", "string": "string", "timestamp": "timestamp"}
    return ", ".join(f"{c} {spark[t]}" for c, t in schema.items())


def kinds(query: str) -> tuple[str, ...]:
    """The event kinds (folders) join ``query`` reads: the bids for the full q7, persons
    and auctions for q3 and q8."""
    return ("bid",) if query == FULL_Q7 else tuple(SIDES.values())


# --- DuckDB ---------------------------------------------------------------------------


def duckdb_source(root: Path, fmt: str, kind: str) -> str:
    """The files of one event kind (``root/<fmt>/<kind>/``) as a DuckDB relation."""
    glob = f"{root / fmt / kind}/*.{fmt}"
    if fmt == "parquet":
        return f"read_parquet('{glob}')"
    name = next(n for n, k in SIDES.items() if k == kind)
    duck = {"long": "BIGINT", "string": "VARCHAR", "timestamp": "TIMESTAMP"}
    columns = ", ".join(f"{c}: '{duck[t]}'" for c, t in SCHEMAS[name].items())
    return f"read_json('{glob}', format = 'newline_delimited', columns = {{{columns}}})"


def reference_sql(query: str, person: str, auction: str) -> str:
    """The query in DuckDB SQL (tests/integration/test_nexmark_joins.py's references): q3
    the standard unbounded join, q8 every pair of a window; windows as µs."""
    if query == "q3":
        states = " OR ".join(f"P.state = '{s}'" for s in Q3_STATES)
        return f"""
            SELECT P.name, P.city, P.state, A.id
            FROM {auction} A, {person} P
            WHERE A.seller = P.id AND ({states}) AND A.category = {Q3_CATEGORY}"""
    size = 10 * SECOND_US
    p_ws, a_ws = (f"epoch_us({x}.date_time) - epoch_us({x}.date_time) % {size}" for x in "PA")
    return f"""
        SELECT P.id, P.name, {p_ws} AS ws, A.id AS auction
        FROM {person} P JOIN {auction} A ON P.id = A.seller AND {p_ws} = {a_ws}"""


def full_q7_reference_sql(bids: str) -> str:
    """The standard q7 in DuckDB SQL (tests/integration/test_nexmark_joins.py's): every bid
    whose price is its window's highest, of the windows that closed (``end <=`` the last
    bid's time, as the first stage's ``emit: on_close``); windows and times as µs."""
    size = Q7_WINDOW_US
    return f"""
        WITH b AS (SELECT auction, price, bidder, epoch_us(date_time) AS t, extra FROM {bids}),
        final AS (SELECT max(t) AS wm FROM b),
        m AS (SELECT t - t % {size} AS ws, max(price) AS max_price FROM b GROUP BY ws)
        SELECT b.auction, b.price, b.bidder, b.t, b.extra, m.ws FROM b, m, final
        WHERE b.t - b.t % {size} = m.ws AND b.price = m.max_price
          AND m.ws + {size} <= final.wm"""


def normalized_sql(query: str, relation: str) -> str:
    """An engine's output as the reference's columns."""
    if query == FULL_Q7:
        return (
            "SELECT auction, price, bidder, epoch_us(CAST(date_time AS TIMESTAMP)) AS t, extra, "
            f"epoch_us(CAST(window_start AS TIMESTAMP)) AS ws FROM {relation}"
        )
    if query == "q3":
        return f"SELECT name, city, state, id FROM {relation}"
    return (
        f"SELECT id, name, epoch_us(CAST(window_start AS TIMESTAMP)) AS ws, auction FROM {relation}"
    )


# --- Sluice ---------------------------------------------------------------------------


def join_spec(
    query: str, name: str, root: Path, fmt: str, files_per_epoch: int, qos: int, work: Path
) -> dict[str, Any]:
    """The spec of ``query``: two files sources (``root/<fmt>/person``, ``.../auction``),
    ``files_per_epoch`` files of each per epoch, event time ``date_time`` in order (0 s),
    sinks and checkpoints under ``work``."""
    sources = {
        side: {"type": "files", "path": str(root / fmt / kind), "format": fmt,
               "schema": dict(SCHEMAS[side]), "max_files_per_epoch": files_per_epoch}
        for side, kind in SIDES.items()
    }  # fmt: skip
    in_order = {"column": "date_time", "max_out_of_orderness": "0s"}
    files = {"type": "files", "format": "parquet"}
    return {
        "name": name,
        "sources": sources,
        "event_time": {side: dict(in_order) for side in SIDES},
        **BODIES[query],
        "qos": qos,
        "sinks": [{"name": "out", **files, "path": str(work / "out")}],
        "late_records": {**files, "path": str(work / "late")},
        "dead_letters": {**files, "path": str(work / "dead")},
        "checkpoint": {"storage": str(work / "checkpoints")},
    }


def full_q7_rows_spec(
    name: str, maxima: Path, bids: Path, fmt: str, files_per_epoch: int, qos: int, work: Path,
    epoch_span_s: int,
) -> dict[str, Any]:  # fmt: skip
    """The spec of full q7's second stage (the shipped ``nexmark_q7_rows.yaml`` on the
    bench's files): source ``maxima``, the first stage's output folder (every file in its
    first epoch: the first stage ran to the end first); source ``bids``, ``files_per_epoch``
    files of ``bids`` per epoch; a 10 s tumbling window join on ``max_price = price``; sinks
    and checkpoints under ``work``.

    The maxima's bound on disorder is the first stage's ``epoch_span_s`` (as the shipped
    spec's 30 s for its 25 s epochs): an epoch's closed windows come in several files, and
    the rows of a file in no order, so a maximum may follow one up to an epoch later (with
    0 s, 2 of the 4 quick run's maxima were late). Every maximum is in the first epoch, so
    the maxima's watermark is ahead of the bids' until the bids reach the last span: the run
    ends with that span of bids waiting (1.1M rows at 10M events)."""
    sources = {
        "maxima": {"type": "files", "path": str(maxima), "format": "parquet",
                   "schema": dict(MAXIMA_SCHEMA)},
        "bids": {"type": "files", "path": str(bids), "format": fmt, "schema": dict(BID_SCHEMA),
                 "max_files_per_epoch": files_per_epoch},
    }  # fmt: skip
    files = {"type": "files", "format": "parquet"}
    return {
        "name": name,
        "sources": sources,
        "event_time": {
            "maxima": {"column": "window_start", "max_out_of_orderness": f"{epoch_span_s}s"},
            "bids": {"column": "date_time", "max_out_of_orderness": "0s"},
        },
        "join": {"type": "window", "window": {"type": "tumbling", "size": "10s"},
                 "left": "maxima", "right": "bids", "on": {"max_price": "price"}},
        "output": {"auction": "bids.auction", "price": "bids.price", "bidder": "bids.bidder",
                   "date_time": "bids.date_time", "extra": "bids.extra",
                   "window_start": "window_start"},
        "qos": qos,
        "sinks": [{"name": "out", **files, "path": str(work / "out")}],
        "late_records": {**files, "path": str(work / "late")},
        "dead_letters": {**files, "path": str(work / "dead")},
        "checkpoint": {"storage": str(work / "checkpoints")},
    }  # fmt: skip


# --- Spark Structured Streaming -------------------------------------------------------


def sss_query(query: str, persons: Any, auctions: Any) -> Any:
    """The stream-stream join of two streaming DataFrames, each with a 0 s watermark on
    ``date_time`` (the sides are in event order): q8 on id = seller and the same 10 s window
    (the window a column of each side, so the state is dropped once the watermark passes
    it); q3 on id = seller within 1 min of event time (what bounds its state), each side
    filtered first."""
    from pyspark.sql import functions as F

    p = persons.withWatermark("date_time", "0 seconds")
    a = auctions.withWatermark("date_time", "0 seconds")
    if query == "q8":
        p = p.select("id", "name", "date_time", F.window("date_time", "10 seconds").alias("pw"))
        a = a.select(F.col("id").alias("auction"), "seller", "date_time",
                     F.window("date_time", "10 seconds").alias("aw"))  # fmt: skip
        joined = p.alias("P").join(a.alias("A"), F.expr("P.id = A.seller AND P.pw = A.aw"))
        return joined.select("P.id", "P.name", F.col("P.pw.start").alias("window_start"),
                             "A.auction")  # fmt: skip
    p = p.where(F.col("state").isin(*Q3_STATES)).select(
        F.col("id").alias("pid"), "name", "city", "state", F.col("date_time").alias("pt")
    )
    a = a.where(F.col("category") == Q3_CATEGORY).select(
        "id", "seller", F.col("date_time").alias("at")
    )
    within = "at BETWEEN pt - INTERVAL 1 MINUTE AND pt + INTERVAL 1 MINUTE"
    joined = p.join(a, F.expr(f"pid = seller AND {within}"))
    return joined.select("name", "city", "state", "id")


def sss_full_q7_rows(maxima: Any, bids: Any) -> Any:
    """Full q7's second stage in Structured Streaming: the first stage's output as a file
    stream (watermark 0 s on ``window_start``) joined with the bid stream (0 s on
    ``date_time``) on ``max_price = price`` and the bid's time inside the window, a range on
    both watermarked columns, so each side's state is dropped once the other's watermark
    passes it."""
    from pyspark.sql import functions as F

    m = maxima.withWatermark("window_start", "0 seconds").select("window_start", "max_price")
    b = bids.withWatermark("date_time", "0 seconds").select(
        "auction", "price", "bidder", "date_time", "extra"
    )
    inside = "date_time >= window_start AND date_time < window_start + INTERVAL 10 SECONDS"
    joined = m.join(b, F.expr(f"max_price = price AND {inside}"))
    return joined.select("auction", "price", "bidder", "date_time", "extra", "window_start")


# --- the report ------------------------------------------------------------------------


def render(rows: list[Any], where: str, cores: int) -> list[str]:
    """The report's section on the joins (rows of sections ``join-*``), Markdown lines."""
    mine = [r for r in rows if r.section.startswith("join-")]
    if not mine:
        return []
    lines = [
        "## Joins: q3, q8 (persons and auctions) and the full q7 (the highest bids' rows)",
        "",
        "Nexmark's stream-stream joins, on the person and auction files written beside the "
        "bids (cut at the same event numbers; N files of each side per epoch / micro-batch). "
        "**records**: persons + auctions read (not bids); q8: persons and auctions in the same "
        "10 s tumbling window on id = seller, every pair; q3: persons of OR/ID/CA and their "
        "category-10 auctions (Sluice: regular join, TTL 1 min; Structured Streaming: "
        "|auction time - person time| <= 1 min; PyFlink: the same as an interval join). Every "
        "output is checked whole against DuckDB's unbounded join. **q7full**: the standard q7, "
        "every bid carrying its 10 s window's highest price: q7's maxima, then a window join of "
        "those maxima with the bids (Sluice: the pipelines nexmark_q7 then nexmark_q7_rows; "
        "Structured Streaming: two queries the same way; PyFlink: one job); records: the bids "
        "(counted once), the time both stages'; checked against DuckDB's closed windows.",
        "",
    ]
    lines += _targets(mine)
    lines += _throughput(mine, where, cores)
    lines += _epochs(mine, where)
    lines += _work(mine, where)
    lines += _micro_batches(mine, where)
    lines += _flink(mine, where)
    return lines


WHERE = ("machine", "date", "command")  # the last columns of every table


def _header(*columns: str) -> list[str]:
    """A Markdown table's header and rule."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _find(rows: list[Any], section: str, engine: str, query: str, fmt: str) -> Any:
    wanted = (section, engine, query, fmt)
    return next((r for r in rows if (r.section, r.engine, r.query, r.format) == wanted), None)


def _targets(rows: list[Any]) -> list[str]:
    """The lines of the bid queries' Targets table, for the joins; and the ratio to PyFlink."""
    out: list[str] = []
    mark = {True: "met", False: "NOT met"}
    for fmt in ("parquet", "jsonl"):
        for q in JOIN_QUERIES:
            s2 = _find(rows, "join-sluice", "Sluice qos 2", q, fmt)
            sss = _find(rows, "join-sss", "Spark Structured Streaming", q, fmt)
            if s2 and sss and sss.events_per_s:
                ratio = s2.events_per_s / sss.events_per_s
                out.append(
                    f"| Sluice qos 2 records/s >= Structured Streaming, {q} {fmt} (aim 1.5x) | "
                    f"{s2.events_per_s:,.0f} vs {sss.events_per_s:,.0f} ({ratio:.2f}x) | "
                    f"{mark[ratio >= 1.0]} |"
                )
            flink = _find(rows, "join-flink", "PyFlink", q, fmt)
            if s2 and flink and flink.events_per_s:
                ratio = s2.events_per_s / flink.events_per_s
                out.append(
                    f"| Sluice qos 2 records/s vs PyFlink, {q} {fmt} (no target) | "
                    f"{s2.events_per_s:,.0f} vs {flink.events_per_s:,.0f} ({ratio:.2f}x) | |"
                )
    for q in JOIN_QUERIES:
        s0 = _find(rows, "join-sluice", "Sluice qos 0", q, "parquet")
        s2 = _find(rows, "join-sluice", "Sluice qos 2", q, "parquet")
        if s0 and s2 and s0.events_per_s and s2.events_per_s:
            ratio = s0.events_per_s / s2.events_per_s
            out.append(
                f"| Sluice qos 0 records/s >= qos 2, {q} parquet | {s0.events_per_s:,.0f} vs "
                f"{s2.events_per_s:,.0f} ({ratio:.2f}x) | {mark[ratio >= 1.0]} |"
            )
    for fmt in ("parquet", "jsonl"):
        for q in JOIN_QUERIES:
            s2 = _find(rows, "join-sluice", "Sluice qos 2", q, fmt)
            sss = _find(rows, "join-sss", "Spark Structured Streaming", q, fmt)
            if not (s2 and sss) or None in (s2.extra.get("epoch_s"), sss.extra.get("epoch_s")):
                continue
            ours, theirs = s2.extra["epoch_s"], sss.extra["epoch_s"]
            out.append(
                f"| epoch <= Structured Streaming's micro-batch, {q} {fmt} | epoch {ours:.2f} s "
                f"vs micro-batch {theirs:.2f} s ({ours / theirs:.2f}x) | {mark[ours <= theirs]} |"
            )
    if not out:
        return []
    return ["### Targets (joins)", "", "| target | measured | |", "|---|---|---|", *out, ""]


ENGINES = ("DuckDB", "Sluice qos 0", "Sluice qos 2", "Spark Structured Streaming", "PyFlink")


def _throughput(rows: list[Any], where: str, cores: int) -> list[str]:
    lines = [
        "### Throughput (joins)",
        "",
        *_header(
            "engine",
            "query",
            "format",
            "records",
            "s",
            "records/s",
            "per core",
            "rows out",
            "check",
            *WHERE,
        ),
    ]

    def order(r: Any) -> tuple[int, bool, int]:
        engine = next((i for i, e in enumerate(ENGINES) if r.engine.startswith(e)), 99)
        return JOIN_QUERIES.index(r.query), r.format != "parquet", engine

    for r in sorted(rows, key=order):
        lines.append(
            f"| {r.engine} | {r.query} | {r.format} | {r.events:,} | {r.seconds:.1f} | "
            f"{r.events_per_s:,.0f} | {r.events_per_s / cores:,.0f} | "
            f"{'' if r.rows_out is None else f'{r.rows_out:,}'} | {r.check} | {where} |"
        )
    return [*lines, ""]


def _epochs(rows: list[Any], where: str) -> list[str]:
    sluice = [r for r in rows if r.section == "join-sluice"]
    if not sluice:
        return []
    lines = [
        "### Sluice per epoch, joins (medians)",
        "",
        "State: the rows waiting for a match after the last epoch (each with the columns of "
        "its side that the output names), the snapshot's size after the last epoch (and its "
        "largest); state write: the snapshot's write time (median); rounds: the two measured "
        "runs' seconds.",
        "",
        *_header(
            "query",
            "format",
            "qos",
            "epochs",
            "epoch s",
            "plan s",
            "process s",
            "commit s",
            "state write s",
            "state size (max)",
            "state rows",
            "rounds s",
            *WHERE,
        ),
    ]
    for r in sluice:
        x = r.extra
        rounds = " / ".join(f"{s:.1f}" for s in x["rounds"])
        lines.append(
            f"| {r.query} | {r.format} | {x['qos']} | {x['epochs']} | {x['epoch_s']:.2f} | "
            f"{x['plan_s']:.2f} | {x['process_s']:.2f} | {x['commit_s']:.2f} | "
            f"{x['state_write_s']:.2f} | {_size(x['state_bytes'])} ({_size(x['state_bytes_max'])}) "
            f"| {x['state_rows']:,} | {rounds} | {where} |"
        )
    return [*lines, ""]


def _work(rows: list[Any], where: str) -> list[str]:
    """Sluice qos 2's process step against one Structured Streaming micro-batch (the bid
    queries' "Per steady epoch: Spark work" table, same columns)."""
    keys = sorted(
        {(r.query, r.format) for r in rows if r.extra.get("work")},
        key=lambda k: (JOIN_QUERIES.index(k[0]), k[1] != "parquet"),
    )
    if not keys:
        return []
    lines = [
        "### Per steady epoch: Spark work (joins)",
        "",
        "As the bid queries' table: medians over the steady epochs / micro-batches; **passes**: "
        "scans of either side's input folder that ran.",
        "",
        *_header(
            "query",
            "format",
            "Sluice qos 2: jobs",
            "passes",
            "Py4J (plan+commit)",
            "CPU s",
            "compiled",
            "SSS micro-batch: jobs",
            "passes",
            "Py4J (run)",
            "CPU s",
            *WHERE,
        ),
    ]
    for query, fmt in keys:
        cells: list[str] = []
        s2 = _find(rows, "join-sluice", "Sluice qos 2", query, fmt)
        sss = _find(rows, "join-sss", "Spark Structured Streaming", query, fmt)
        for r, ours in ((s2, True), (sss, False)):
            w = r.extra.get("work") if r else None
            if not w:
                cells += [""] * (5 if ours else 4)
                continue
            py4j = _count(w["py4j_calls"])
            if ours:
                py4j += f" ({_count(w['plan_py4j'] + w['commit_py4j'])})"
            cells += [_count(w["jobs"]), _count(w["input_passes"]), py4j, f"{w['cpu_s']:.2f}"]
            if ours:
                cells.append(_count(w.get("compiled", 0)))
        lines.append(f"| {query} | {fmt} | {' | '.join(cells)} | {where} |")
    return [*lines, ""]


def _micro_batches(rows: list[Any], where: str) -> list[str]:
    sss = [r for r in rows if r.section == "join-sss"]
    if not sss:
        return []
    lines = [
        "### Spark Structured Streaming micro-batches (joins)",
        "",
        *_header(
            "query",
            "format",
            "batches (with data)",
            "median batch s",
            "state rows (last)",
            "state store",
            *WHERE,
        ),
    ]
    for r in sss:
        x = r.extra
        med = "" if x["epoch_s"] is None else f"{x['epoch_s']:.2f}"
        state = "" if x.get("state_rows") is None else f"{x['state_rows']:,}"
        lines.append(
            f"| {r.query} | {r.format} | {x['batches']} ({x['data_batches']}) | {med} | "
            f"{state} | {x['state_store']} | {where} |"
        )
    return [*lines, ""]


def _flink(rows: list[Any], where: str) -> list[str]:
    flink = [r for r in rows if r.section == "join-flink"]
    if not flink:
        return []
    lines = [
        "### PyFlink jobs (joins)",
        "",
        *_header("query", "format", "job s", "startup s", "checkpoints completed", "Flink", *WHERE),
    ]
    for r in flink:
        x = r.extra
        start = "" if x.get("startup_s") is None else f"{x['startup_s']:.1f}"
        lines.append(
            f"| {r.query} | {r.format} | {r.seconds:.1f} | {start} | {x.get('checkpoints')} | "
            f"{x.get('version')} | {where} |"
        )
    return [*lines, ""]


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)
