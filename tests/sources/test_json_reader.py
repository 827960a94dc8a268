"""The JSON-lines reader (``parse_json_lines``): Spark's line reader, typed parse, and the text
re-parse of the lines the typed parse does not accept cleanly.

* Every line keeps today's result (the text rules of :func:`parse_json_frame`, also the Kafka
  path) except the three inputs that are now dead letters: a non-finite double or float, a line
  that is not valid UTF-8, and a line with text after its JSON object.
* Every bad line is one record with its file, physical line (blank lines counted) and exact
  reason, also when Spark reads a file in several splits.
* The non-finite rule holds in every format: CSV, Parquet columns cast from text, Kafka values.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from sluice.sources import RECORD_COLUMNS, FilesSource
from sluice.sources.parsing import (
    _TIMESTAMP_SHAPE,
    NOT_AN_OBJECT,
    NOT_UTF8,
    TRAILING_TEXT,
    _timestamp_shape,
    parse_json_frame,
)
from sluice.spec import FilesSourceConfig

from tests.fixtures.pipelines import Workspace

SCHEMA = (
    ("user", "string"),
    ("ts", "timestamp"),
    ("amount", "double"),
    ("ratio", "float"),
    ("n", "long"),
    ("k", "int"),
    ("ok", "boolean"),
    ("day", "date"),
)
TS = "2026-01-01T00:00:01Z"


def _line(**fields: Any) -> bytes:
    return json.dumps({"user": "u", "ts": TS, **fields}).encode()


# Lines whose result must be exactly today's: typed values, numbers and booleans written as
# strings, values that do not convert, nested values in a string column, nulls, absent fields.
SAME_AS_TODAY = [
    _line(amount=1.5, ratio=0.1, n=7, k=-3, ok=True, day="2026-01-02"),
    _line(amount=1, n=-0, k=2147483647, ok=False),
    _line(amount=0.1 + 0.2, ratio=3.4028234e38, n=2**62),
    _line(amount=1e-320, ratio=1e-46),  # subnormal double, float underflow
    _line(amount=123456789012345678901234567890),  # an integer beyond a long, as a double
    _line(amount="1.5", ratio="2.5", n="7", k=" 8 ", ok="TRUE", day="2026-02-03"),
    _line(amount="lots", n=1.0, k=2147483648, ok="yes", day="someday"),
    _line(n=2**63, k=1e2, ok=1, amount=[1], ratio={"a": 1}),
    _line(user=5, amount=None, n=None),
    _line(user={"nested": [1, 2.50, None]}, ok=None),
    _line(user=""),
    json.dumps({"user": "no ts", "amount": 1.0}).encode(),
    json.dumps({"user": "null ts", "ts": None}).encode(),
    json.dumps({"user": "bad ts", "ts": "2026-01-01"}).encode(),
    json.dumps({"user": "ts shape", "ts": "2026-01-01 00:00:01.123456+01:00"}).encode(),
    json.dumps({"user": "ts number", "ts": 5}).encode(),
    json.dumps({"user": "dup", "user": "b", "ts": TS}).encode(),  # noqa: F601 (on purpose)
    b'{"user": "dup", "user": "b", "ts": "' + TS.encode() + b'"}',
    b'{"user": "esc\\u00e9\\n", "ts": "' + TS.encode() + b'", "amount": 1E+2}',
    '{"user": "d\u00f6rte \u674e \U0001f600", "ts": "2026-01-01T00:00:02"}'.encode(),
    b'  {"user": "spaces", "ts": "' + TS.encode() + b'"}  \t',
    b'{"user": "cr", "ts": "' + TS.encode() + b'"}\r',
    b'{"user": "x"',  # cut short
    b"[1, 2]",
    b'[{"user": "in an array", "ts": "' + TS.encode() + b'"}]',
    b"42",
    b'"text"',
    b"null",
    b"{}",
    b"\xc2\xa0",  # a no-break space: a record, malformed
    b"\xef\xbb\xbf" + _line(),  # a byte-order mark
    b'{"user": "nul \\u0000", "ts": "' + TS.encode() + b'"}',
    b'{\x00"user": "raw nul"}',
    b'{"user": 007, "ts": "' + TS.encode() + b'"}',  # leading zeros: not JSON
]

# (line, the reason it is now a dead letter)
NOW_DEAD = [
    (_line(amount="NaN"), "wrong_type: field 'amount' = NaN is not a finite double"),
    (_line(amount="Infinity"), "wrong_type: field 'amount' = Infinity is not a finite double"),
    (_line(amount="-Infinity"), "wrong_type: field 'amount' = -Infinity is not a finite double"),
    (_line(amount="1e400"), "wrong_type: field 'amount' = 1e400 is not a finite double"),
    (_line(ratio="NaN"), "wrong_type: field 'ratio' = NaN is not a finite float"),
    (_line(ratio=3.5e38), "wrong_type: field 'ratio' = 3.5E38 is not a finite float"),
    (_line(ratio="-1e39"), "wrong_type: field 'ratio' = -1e39 is not a finite float"),
    (b'{"user": "u\xff\xfe1", "ts": "' + TS.encode() + b'"}', NOT_UTF8),
    (b'{"user": "caf\xe9", "ts": "' + TS.encode() + b'"}', NOT_UTF8),  # Latin-1
    (b'{"user": "\xed\xa0\x80", "ts": "' + TS.encode() + b'"}', NOT_UTF8),  # a surrogate
    (_line() + b" " + _line(), TRAILING_TEXT),
    (_line() + b"xyz", TRAILING_TEXT),
    (_line() + b" }", TRAILING_TEXT),
    (_line() + b"\x0b", TRAILING_TEXT),  # VT is not JSON whitespace
]
# Dead letters already, with the same reason as before.
STILL_DEAD = [
    (b'{"user": "u", "ts": "' + TS.encode() + b'", "amount": NaN}', '= "NaN" is not a double'),
    (b'{"user": "u", "ts": "' + TS.encode() + b'", "amount": 1e400}', '"Infinity" is not a'),
    (b'{"user": "u", "ts": "' + TS.encode() + b'", "amount": -Infinity}', '"-Infinity" is not'),
]


def _source(ws: Workspace, fmt: str = "jsonl", schema: Any = SCHEMA) -> FilesSource:
    spec = FilesSourceConfig(path=ws.uri("in"), format=fmt, schema=schema, header=False)  # type: ignore[arg-type]
    planner: FilesSource = ws.files_source(spec, required=("ts",))
    return planner


def _read(spark: Any, src: FilesSource) -> dict[tuple[str, int], dict[str, Any]]:
    rng = src.plan_range(src.initial_offset(), None)
    assert rng is not None
    frame = src.read(spark, rng)
    assert tuple(frame.columns) == RECORD_COLUMNS + tuple(c for c, _ in src.config.schema)
    rows = [r.asDict() for r in frame.collect()]
    keyed = {(r["_file"], r["_line"]): r for r in rows}
    assert len(keyed) == len(rows), "a line read twice"
    return keyed


def _today(spark: Any, lines: list[bytes]) -> list[dict[str, Any]]:
    """Today's result for each line: the text path (``parse_json_frame``, as for Kafka)."""
    frame = spark.createDataFrame(
        [("f", 0, i + 1, line.decode("utf-8")) for i, line in enumerate(lines)],
        "_file string, _major int, _line long, _raw string",
    )
    parsed = parse_json_frame(frame, SCHEMA, ("ts",))
    return [r.asDict() for r in parsed.orderBy("_line").collect()]


def test_every_line_as_today_except_the_three_new_dead_letters(
    spark: Any, local_workspace: Workspace
) -> None:
    lines = SAME_AS_TODAY + [line for line, _ in NOW_DEAD + STILL_DEAD]
    local_workspace.put_files([("a.jsonl", b"\n".join(lines) + b"\n")])
    got = _read(spark, _source(local_workspace))
    assert sorted(got) == [("a.jsonl", i + 1) for i in range(len(lines))]
    same = _today(spark, SAME_AS_TODAY)
    for index, expected in enumerate(same):
        row = got[("a.jsonl", index + 1)]
        for column in ("_error", *[c for c, _ in SCHEMA]):
            assert row[column] == expected[column], (lines[index], column, row, expected)
        assert row["_raw"] == lines[index].decode().removesuffix("\r")
    for offset, (line, reason) in enumerate(NOW_DEAD):
        row = got[("a.jsonl", len(SAME_AS_TODAY) + offset + 1)]
        assert row["_error"] == reason, (line, row)
        assert row["_raw"] == line.decode("utf-8", errors="replace")
    for offset, (_, words) in enumerate(STILL_DEAD):
        row = got[("a.jsonl", len(SAME_AS_TODAY) + len(NOW_DEAD) + offset + 1)]
        assert row["_error"].startswith("wrong_type: field 'amount'") and words in row["_error"]


def test_not_a_json_object_comes_before_the_other_malformed_reasons(
    spark: Any, local_workspace: Workspace
) -> None:
    lines = [b'{"user": "\xff', b"[1] x", b'{"user": "x\xff"} tail', b'"a" "b"']
    local_workspace.put_files([("a.jsonl", b"\n".join(lines))])  # no final newline
    got = _read(spark, _source(local_workspace))
    assert [got[("a.jsonl", i)]["_error"] for i in (1, 2, 3, 4)] == [
        NOT_UTF8, NOT_AN_OBJECT, NOT_UTF8, NOT_AN_OBJECT]  # fmt: skip


def _mixed_file(rng: random.Random, lines: int) -> tuple[bytes, dict[int, str | None]]:
    """A file of valid, bad and blank lines (some very long); its expected reason per line."""
    out: list[bytes] = []
    expected: dict[int, str | None] = {}
    for number in range(1, lines + 1):
        pick = rng.random()
        if pick < 0.08:
            out.append(rng.choice([b"", b"  ", b"\r", b"\t \x0c"]))
            continue
        if pick < 0.16:
            line, reason = rng.choice(NOW_DEAD)
            out.append(line)
            expected[number] = reason
            continue
        if pick < 0.2:
            out.append(b'{"user": "cut", "ts": ')
            expected[number] = NOT_AN_OBJECT
            continue
        pad = "x" * (rng.choice([0, 10, 5000]) if pick < 0.3 else 0)
        out.append(_line(amount=number, user=f"u{number}{pad}") + rng.choice([b"", b"\r"]))
        expected[number] = None
    return b"\n".join(out) + rng.choice([b"\n", b""]), expected


def test_line_numbers_are_exact_when_spark_splits_the_files(
    spark: Any, local_workspace: Workspace
) -> None:
    rng = random.Random(7)
    # f0 and f1 are split; f1's name is one Spark reports URI-escaped (space, percent)
    names = ("f0.jsonl", "f1 100%.jsonl", "f2.jsonl", "f3.jsonl")
    files = {names[i]: _mixed_file(rng, n) for i, n in enumerate((3000, 1500, 40, 0))}
    local_workspace.put_files([(name, data) for name, (data, _) in files.items()])
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "65536")  # ~10 splits of f0
    try:
        src = _source(local_workspace)
        rng_ = src.plan_range(src.initial_offset(), None)
        assert rng_ is not None
        frame = src.read(spark, rng_)
        assert frame.rdd.getNumPartitions() > 4  # the files were split
        got = {(r["_file"], r["_line"]): r.asDict() for r in frame.collect()}
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)
    expected = {(name, n): reason for name, (_, e) in files.items() for n, reason in e.items()}
    assert sorted(got) == sorted(expected)  # every record once, blank lines not records
    for key, reason in expected.items():
        row = got[key]
        assert row["_error"] == reason, (key, row)
        if reason is None:
            assert row["amount"] == key[1] and row["user"].startswith(f"u{key[1]}"), row


def test_csv_uses_the_same_lines_and_rules(spark: Any, local_workspace: Workspace) -> None:
    schema = (("user", "string"), ("ts", "timestamp"), ("amount", "double"))
    csv = (
        b"u1,2026-01-01T00:00:01Z,1.5\r\n"  # 1 ok
        b"\n"  # 2 blank
        b"u2,2026-01-01T00:00:02Z,NaN\n"  # 3 not finite
        b"caf\xe9,2026-01-01T00:00:03Z,1\n"  # 4 Latin-1
        b"u4,2026-01-01T00:00:04Z,-Infinity\n"  # 5 not finite
        b"u5,2026-01-01T00:00:05Z\n"  # 6 too few fields
    )
    local_workspace.put_files([("a.csv", csv)])
    got = _read(spark, _source(local_workspace, "csv", schema))
    assert sorted(n for _, n in got) == [1, 3, 4, 5, 6]
    assert got[("a.csv", 1)]["_error"] is None and got[("a.csv", 1)]["amount"] == 1.5
    assert got[("a.csv", 3)]["_error"] == "wrong_type: field 'amount' = NaN is not a finite double"
    assert got[("a.csv", 4)]["_error"] == NOT_UTF8
    assert got[("a.csv", 4)]["_raw"] == "caf\ufffd,2026-01-01T00:00:03Z,1"
    assert got[("a.csv", 5)]["_error"].endswith("= -Infinity is not a finite double")
    assert got[("a.csv", 6)]["_error"] == "malformed: expected 3 CSV fields"


def test_parquet_text_columns_follow_the_finite_rule(
    spark: Any, local_workspace: Workspace
) -> None:
    schema = (("user", "string"), ("ts", "timestamp"), ("amount", "double"))
    table = pa.table({"user": ["a", "b", "c"], "ts": [TS] * 3, "amount": ["1.5", "NaN", "1e400"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    local_workspace.put_files([("a.parquet", sink.getvalue())])
    got = _read(spark, _source(local_workspace, "parquet", schema))
    assert [got[("a.parquet", i)]["_error"] for i in (1, 2, 3)] == [
        None,
        "wrong_type: field 'amount' = NaN is not a finite double",
        "wrong_type: field 'amount' = 1e400 is not a finite double",
    ]


def test_kafka_values_follow_the_finite_rule(spark: Any) -> None:
    values = [f'{{"ts": "{TS}", "amount": {v}}}' for v in ('"NaN"', "1.5", "NaN", '"-1e999"')]
    frame = spark.createDataFrame(
        [("kafka://t/0", 0, i, v, "t:0") for i, v in enumerate(values)],
        "_file string, _major int, _line long, _raw string, _kp string",
    )
    rows = parse_json_frame(frame, (("ts", "timestamp"), ("amount", "double")), ("ts",)).collect()
    assert [r["_error"] for r in sorted(rows, key=lambda r: r["_line"])] == [
        "wrong_type: field 'amount' = NaN is not a finite double",
        None,
        "wrong_type: field 'amount' = \"NaN\" is not a double",
        "wrong_type: field 'amount' = -1e999 is not a finite double",
    ]


def test_the_pass_never_parses_a_column_the_pipeline_does_not_read(
    spark: Any, local_workspace: Workspace
) -> None:
    """JSON lines: the unread columns come from a parse of their own, which Spark leaves out
    of a plan that does not select them (the epoch's pass); a plan that selects them (the
    late records') parses them, the value or null."""
    schema = (("user", "string"), ("ts", "timestamp"), ("amount", "double"),
              ("unread_flag", "boolean"))  # fmt: skip
    local_workspace.put_files(
        [("a.jsonl", f'{{"user": "u", "ts": "{TS}", "amount": 1, "unread_flag": 7}}\n'.encode())]
    )
    source = _source(local_workspace, "jsonl", schema)
    source.read_columns = ("user", "ts", "amount")
    rng = source.plan_range(source.initial_offset(), None)
    assert rng is not None
    frame = source.read(spark, rng)
    passed = frame.select("user", "ts", "amount", "_error")
    assert "unread_flag" not in passed._jdf.queryExecution().optimizedPlan().toString()
    (row,) = frame.collect()
    assert row["_error"] is None and row["unread_flag"] is None and row["amount"] == 1.0


def test_parquet_and_kafka_values_check_only_the_columns_read(
    spark: Any, local_workspace: Workspace
) -> None:
    """#35's decision in the two other parsers (JSON lines and CSV:
    tests/integration/test_unread_columns.py): a bad value in a column outside ``read`` is
    null, not a dead letter; one in a read column still is."""
    schema = (("user", "string"), ("ts", "timestamp"), ("amount", "double"))
    table = pa.table({"user": ["a", "b"], "ts": [TS, TS], "amount": ["1.5", "NaN"]})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    local_workspace.put_files([("a.parquet", sink.getvalue())])
    source = _source(local_workspace, "parquet", schema)
    source.read_columns = ("user", "ts")
    got = _read(spark, source)
    assert [(got[("a.parquet", i)]["_error"], got[("a.parquet", i)]["amount"]) for i in (1, 2)] == [
        (None, 1.5),
        (None, None),
    ]
    values = [f'{{"ts": "{TS}", "amount": {v}, "n": {n}}}' for v, n in (("1.5", 1), ("NaN", '"x"'))]
    frame = spark.createDataFrame(
        [("kafka://t/0", 0, i, v, "t:0") for i, v in enumerate(values)],
        "_file string, _major int, _line long, _raw string, _kp string",
    )
    kafka = (("ts", "timestamp"), ("amount", "double"), ("n", "long"))
    rows = parse_json_frame(frame, kafka, ("ts",), read=("ts", "n")).collect()
    assert [(r["_error"], r["amount"]) for r in sorted(rows, key=lambda r: r["_line"])] == [
        (None, 1.5),
        ("wrong_type: field 'n' = x is not a long", None),
    ]


def _texts(rng: random.Random) -> Iterator[str]:
    base = ["2024-01-01T00:00", "2024-01-01 00:00:01", "2024-01-01T00:00:01.5Z",
            "2024-01-01T00:00:01.123456789+01:00", "2024-01-01T00:00+0100", "2024-01-01",
            "2024-01-01T00:00\n", "2024-01-01T00:00\r\n", "2024-01-01T00:00\u2028", ""]  # fmt: skip
    alphabet = "0123456789-:T .Z+\n\r\u0085\u2029x٣"
    yield from base
    for _ in range(3000):
        text = list(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(text))
            if rng.random() < 0.5 or not text:
                text.insert(at, rng.choice(alphabet))
            else:
                text[min(at, len(text) - 1)] = rng.choice(alphabet)
        yield "".join(text)


def test_the_timestamp_shape_check_is_the_regular_expression(spark: Any) -> None:
    texts = [(t,) for t in _texts(random.Random(3))] + [(None,)]
    frame = spark.createDataFrame(texts, "s string")
    both = frame.select(
        "s", F.col("s").rlike(_TIMESTAMP_SHAPE).alias("regex"), _timestamp_shape(F.col("s"))
    ).collect()
    assert sum(1 for r in both if r[1]) > 100
    assert [r for r in both if r[1] != r[2]] == []


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_blank_and_crlf_lines_keep_their_numbers(
    spark: Any, local_workspace: Workspace, ending: bytes
) -> None:
    lines = [b"", _line(), b" \t", _line(amount="NaN"), b"\x0b", _line(n="x")]
    local_workspace.put_files([("a.jsonl", ending.join(lines) + ending)])
    got = _read(spark, _source(local_workspace))
    assert sorted(n for _, n in got) == [2, 4, 6]
    assert got[("a.jsonl", 2)]["_error"] is None
    assert "finite" in got[("a.jsonl", 4)]["_error"]
    assert got[("a.jsonl", 6)]["_error"] == "wrong_type: field 'n' = x is not a long"
    assert not any(r["_raw"].endswith("\r") for r in got.values())
