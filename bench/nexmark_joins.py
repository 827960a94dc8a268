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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.nexmark import SPEC_SCHEMAS, EventKind

__all__ = [
    "JOIN_QUERIES",
    "SIDES",
    "ddl",
    "duckdb_source",
    "join_spec",
    "normalized_sql",
    "reference_sql",
    "render",
    "sss_query",
]

JOIN_QUERIES = ("q3", "q8")
# the join's sources: name -> the event kind (and folder) it reads
SIDES = {"persons": "person", "auctions": "auction"}
SCHEMAS = {name: dict(SPEC_SCHEMAS[EventKind(kind)]) for name, kind in SIDES.items()}
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


def ddl(name: str) -> str:
    """A side's schema as Spark DDL."""
    spark = {"long": "bigint", "string": "string", "timestamp": "timestamp"}
    return ", ".join(f"{c} {spark[t]}" for c, t in SCHEMAS[name].items())


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


def normalized_sql(query: str, relation: str) -> str:
    """An engine's output as the reference's columns."""
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


# --- the report ------------------------------------------------------------------------


def render(rows: list[Any], where: str, cores: int) -> list[str]:
    """The report's section on the joins (rows of sections ``join-*``), Markdown lines."""
    mine = [r for r in rows if r.section.startswith("join-")]
    if not mine:
        return []
    lines = [
        "## Joins: q3 and q8 (persons and auctions)",
        "",
        "Nexmark's stream-stream joins, on the person and auction files written beside the "
        "bids (cut at the same event numbers; N files of each side per epoch / micro-batch). "
        "**records**: persons + auctions read (not bids); q8: persons and auctions in the same "
        "10 s tumbling window on id = seller, every pair; q3: persons of OR/ID/CA and their "
        "category-10 auctions (Sluice: regular join, TTL 1 min; Structured Streaming: "
        "|auction time - person time| <= 1 min; PyFlink: the same as an interval join). Every "
        "output is checked whole against DuckDB's unbounded join.",
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
