"""Input and an independent DuckDB reference for the stream–stream join tests.

The input is Nexmark's persons and auctions (``generate``), written as JSON lines files of two
sources — in event order, with a little disorder inside the bound, a few records moved far
back in time into a later file (late), and a malformed line per source (a dead letter).

The reference (:func:`reference`) is plain SQL over every line, in file and line order, per
source: the watermark at each record is the largest event time up to it minus the bound (a
dead letter moves nothing); a record is late when it is behind it (interval and regular joins)
or when its window closed (window join); the pairs are the accepted records of the two sides
that meet the join's condition. ``how: left`` adds each accepted left record without a pair
whose expiry the final watermark (the minimum of the two sides') has passed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
from sluice.nexmark import EventKind, NexmarkConfig, generate

SECOND_US = 1_000_000
PERSON_SCHEMA = {"id": "long", "name": "string", "state": "string", "date_time": "timestamp"}
AUCTION_SCHEMA = {"id": "long", "seller": "long", "category": "long", "date_time": "timestamp"}
BOUND_S = 1  # max_out_of_orderness of both sides


@dataclass(frozen=True)
class JoinInput:
    persons: list[tuple[str, bytes]]  # (file name, JSON lines) in order
    auctions: list[tuple[str, bytes]]

    def rows(self, side: str) -> list[dict[str, Any]]:
        """Every line of a side with its file, line number and parsed record (None: dead)."""
        found = []
        for name, data in getattr(self, side):
            for number, line in enumerate(data.decode().splitlines()):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = None
                found.append({"file": name, "line": number, "record": record})
        return found


def _iso(micros: int) -> str:
    seconds, rest = divmod(micros, SECOND_US)
    import datetime as dt

    moment = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=rest)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_input(events: int = 60_000, files: int = 6, seed: int = 7) -> JoinInput:
    """Persons and auctions of ``generate(0, events)`` as ``files`` files per source."""
    tables = generate(0, events, NexmarkConfig())
    rng = random.Random(seed)

    def records(kind: EventKind, columns: list[str]) -> list[dict[str, Any]]:
        table = tables[kind]
        times = table.column("date_time").cast(pa.int64()).to_pylist()
        out = []
        for row, t in zip(table.select(columns).to_pylist(), times, strict=True):
            row = {k: v for k, v in row.items() if k != "date_time"}
            row["date_time"] = t
            out.append(row)
        return out

    def files_of(rows: list[dict[str, Any]], bad: bytes) -> list[tuple[str, bytes]]:
        # disorder within the bound: swap neighbours less than the bound apart
        for i in range(0, len(rows) - 1, 3):
            if rows[i + 1]["date_time"] - rows[i]["date_time"] < BOUND_S * SECOND_US // 2:
                rows[i], rows[i + 1] = rows[i + 1], rows[i]
        size = -(-len(rows) // files)
        chunks = [rows[i * size : (i + 1) * size] for i in range(files)]
        # late: a few records of the first file moved to the end of the second to last
        moved = [chunks[0].pop(rng.randrange(len(chunks[0]))) for _ in range(4)]
        chunks[-2].extend(moved)
        out = []
        for n, chunk in enumerate(chunks):
            lines = [json.dumps({**r, "date_time": _iso(r["date_time"])}).encode() for r in chunk]
            if n == 1:
                lines.insert(len(lines) // 2, bad)
            out.append((f"{n:02d}.jsonl", b"\n".join(lines) + b"\n"))
        return out

    persons = records(EventKind.PERSON, ["id", "name", "state", "date_time"])
    auctions = records(EventKind.AUCTION, ["id", "seller", "category", "date_time"])
    return JoinInput(
        files_of(persons, b'{"id": "not a number", '),
        files_of(auctions, b"{broken"),
    )


def _side_table(inp: JoinInput, side: str) -> pa.Table:
    rows = []
    for order, line in enumerate(inp.rows(side)):
        record = line["record"]
        if record is None or not isinstance(record.get("id"), int):
            continue  # a dead letter: moves no watermark
        rows.append({"pos": order, "file": line["file"], "line": line["line"], **record})
    table = pa.Table.from_pylist(rows)
    micros = [_micros(v) for v in table.column("date_time").to_pylist()]
    return table.drop(["date_time"]).append_column("ts", pa.array(micros, pa.int64()))


def _micros(text: str) -> int:
    import datetime as dt

    moment = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    return int(moment.timestamp()) * SECOND_US + moment.microsecond


def connect(inp: JoinInput) -> duckdb.DuckDBPyConnection:
    """DuckDB with ``person`` and ``auction`` (every valid record, ``ts`` in µs, ``wm`` the
    watermark at it)."""
    con = duckdb.connect()
    bound = BOUND_S * SECOND_US
    for side, name in (("persons", "person"), ("auctions", "auction")):
        con.register(f"{name}_arrow", _side_table(inp, side))
        con.execute(
            f"CREATE TABLE {name} AS SELECT *, max(ts) OVER (ORDER BY pos ROWS UNBOUNDED "
            f"PRECEDING) - {bound} AS wm FROM {name}_arrow"
        )
    return con


def reference(
    con: duckdb.DuckDBPyConnection,
    kind: str,
    *,
    how: str = "inner",
    size_s: int = 2,
    lower_s: int = 0,
    upper_s: int = 3,
    ttl_s: int = 5,
    person_filter: str = "true",
    auction_filter: str = "true",
    idle_auctions: bool = False,
) -> list[tuple[Any, ...]]:
    """The join's rows as ``(person id, auction id, window start µs or None)``, sorted (the
    right side None for an unmatched left row). ``idle_auctions``: the auctions stopped long
    before the persons (an idle timeout): the final watermark is the persons' alone."""
    size = size_s * SECOND_US
    if kind == "hopping":  # windows [s, s + size), s a multiple of 1 s: two per record
        return _hopping(con, size, SECOND_US, person_filter, auction_filter)
    if kind == "window":
        late = f"ts - ts % {size} + {size} <= wm"
        condition = f"p.ts - p.ts % {size} = a.ts - a.ts % {size}"
        window = f"p.ts - p.ts % {size}"
        expiry = f"p.ts - p.ts % {size} + {size} - 1"
    elif kind == "interval":
        late = "ts < wm"
        condition = f"a.ts BETWEEN p.ts + {lower_s * SECOND_US} AND p.ts + {upper_s * SECOND_US}"
        window, expiry = "NULL", f"p.ts + {upper_s * SECOND_US}"
    else:
        late = "ts < wm"
        condition = f"abs(p.ts - a.ts) <= {ttl_s * SECOND_US}"
        window, expiry = "NULL", f"p.ts + {ttl_s * SECOND_US}"
    sql = f"""
        WITH p AS (SELECT * FROM person WHERE NOT ({late}) AND ({person_filter})),
             a AS (SELECT * FROM auction WHERE NOT ({late}) AND ({auction_filter})),
             pairs AS (SELECT p.id AS person, a.id AS auction, {window} AS ws, p.pos
                       FROM p JOIN a ON p.id = a.seller AND {condition})
        SELECT person, auction, ws FROM pairs
    """
    if how == "left":
        newest = "(SELECT max(ts) FROM person)"
        if not idle_auctions:
            newest = f"least({newest}, (SELECT max(ts) FROM auction))"
        final = f"({newest} - {BOUND_S * SECOND_US})"
        sql += f"""
        UNION ALL
        SELECT p.id, NULL, {window} FROM p
        WHERE {expiry} < {final}
          AND NOT EXISTS (SELECT 1 FROM a WHERE p.id = a.seller AND {condition})
        """
    rows = con.execute(sql).fetchall()
    return sorted(rows, key=lambda r: tuple((x is None, x) for x in r))


def _hopping(
    con: duckdb.DuckDBPyConnection, size: int, slide: int, person_filter: str, auction_filter: str
) -> list[tuple[Any, ...]]:
    """An inner window join in hopping windows: a pair per window the two records share and
    both entered (a record enters each of its windows not closed at its position: end >
    watermark; it is late when it entered none)."""
    windows = f"""
        SELECT *, ts - ts % {slide} - i * {slide} AS ws
        FROM {{table}}, range(0, {size // slide}) AS r(i)
        WHERE ts - ts % {slide} - i * {slide} + {size} > ts
          AND ts - ts % {slide} - i * {slide} + {size} > wm AND ({{where}})
    """
    sql = f"""
        WITH p AS ({windows.format(table="person", where=person_filter)}),
             a AS ({windows.format(table="auction", where=auction_filter)})
        SELECT p.id, a.id, p.ws FROM p JOIN a ON p.id = a.seller AND p.ws = a.ws
    """
    rows = con.execute(sql).fetchall()
    return sorted(rows, key=lambda r: tuple((x is None, x) for x in r))
