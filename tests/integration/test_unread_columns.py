"""A bad value in a column the pipeline never reads does not make a dead letter (#35's
decision: Spark's and Flink's readers check only the columns a query requires); the source's
``strict_schema: true`` restores the check of every declared column. Every line is still
checked whole: one JSON object (or the CSV field count), its syntax, UTF-8.

The pipeline sums ``amount`` per user and minute; ``seen`` (a timestamp) and ``score`` (a
long) are declared and never read. A late record carries its unread columns to the late
records' sink: the value, or null where it does not convert.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import committed_rows, runtime

T0 = "2024-01-01T00:00"
SCHEMA = {"user": "string", "ts": "timestamp", "amount": "double", "seen": "timestamp",
          "score": "long"}  # fmt: skip


def _rec(user: str, second: int, amount: Any = 1.0, **unread: Any) -> dict[str, Any]:
    base = {"user": user, "ts": f"{T0}:{second:02d}", "amount": amount,
            "seen": f"{T0}:00", "score": 7}  # fmt: skip
    return {**base, **unread}


# file -> records; in JSON lines a string is written as it is (a line that is not an object)
FILES: dict[str, list[Any]] = {
    "a": [
        _rec("ann", 1),
        _rec("ann", 2, score="lots"),  # unread, not a long
        _rec("bob", 3, seen="yesterday"),  # unread, not a timestamp
        _rec("bob", 4, amount="much"),  # read, not a double: always dead
        _rec("ann", 5, score=1.5),
        _rec("zed", 0, amount=1.0, ts="2024-01-01T00:02:00"),  # closes the first minute
    ],
    "b": [
        _rec("ann", 30, score="late"),  # late (its minute closed), its score unread and bad
    ],
}
JSON_ONLY = [  # lines no column rule can save: malformed whatever the pipeline reads
    '{"user": "ann", "ts": "2024-01-01T00:00:06", "amount": 1, "score": [1, }',
    '{"user": "ann", "ts": "2024-01-01T00:00:07", "amount": 1, "score": 3} {}',
]
UNREAD_BAD = {("a", 2): "'score'", ("a", 3): "'seen'", ("a", 5): "'score'"}


def _write(tmp_path: Path, fmt: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir(parents=True)
    for name, records in FILES.items():
        if fmt == "jsonl":
            lines = [json.dumps(r) for r in records] + (JSON_ONLY if name == "a" else [])
        else:
            lines = [",".join(str(r[c]) for c in SCHEMA) for r in records]
            lines.insert(0, ",".join(SCHEMA))
        (folder / f"{name}.{fmt}").write_text("\n".join(lines) + "\n")


def _spec(tmp_path: Path, fmt: str, strict: bool) -> Any:
    root = tmp_path.as_uri()
    return parse_spec({
        "name": "unread",
        "source": {"type": "files", "path": f"{root}/in", "format": fmt, "schema": SCHEMA,
                   "max_files_per_epoch": 1, **({"strict_schema": True} if strict else {})},
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"n": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": f"{root}/out"}],
        "late_records": {"type": "files", "path": f"{root}/late", "format": "jsonl"},
        "dead_letters": {"type": "files", "path": f"{root}/dead", "format": "jsonl"},
        "checkpoint": {"storage": f"{root}/ckpt"},
    })  # fmt: skip


def _run(spark: Any, tmp_path: Path, fmt: str, strict: bool) -> tuple[Any, dict[Any, Any]]:
    _write(tmp_path, fmt)
    spec = _spec(tmp_path, fmt, strict)
    run_until_drained(runtime(spec), spark)
    offset = 1 if fmt == "csv" else 0  # the header line
    dead = {
        (r["file"].split(".")[0], r["line"] - offset): (r["reason_code"], r["reason"])
        for r in committed_rows(spec, "dead_letters")
    }
    return spec, dead


def _windows(spec: Any) -> set[tuple[str, int, float]]:
    return {(r["user"], r["n"], float(r["total"])) for r in committed_rows(spec, "out")}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_bad_value_in_an_unread_column_is_accepted_not_a_dead_letter(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    spec, dead = _run(spark, tmp_path, fmt, strict=False)
    assert spec.read_columns() == ("user", "ts", "amount")
    expected = {("a", 4): "wrong_type"}
    if fmt == "jsonl":
        expected.update({("a", 7): "malformed", ("a", 8): "malformed"})
    assert {where: code for where, (code, _) in dead.items()} == expected
    assert "'amount' = much" in dead[("a", 4)][1]
    # ann's three records count, bad unread values and all; bob's good one (zed's window
    # stays open)
    assert _windows(spec) == {("ann", 3, 3.0), ("bob", 1, 1.0)}
    (late,) = committed_rows(spec, "late_records")
    assert (late["user"], late["source_line"] - (fmt == "csv")) == ("ann", 1)
    assert late["score"] is None  # 'late' is not a long: null, the record kept
    assert late["seen"].startswith("2024-01-01T00:00:00")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_strict_schema_makes_a_bad_unread_value_a_dead_letter_again(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    spec, dead = _run(spark, tmp_path, fmt, strict=True)
    assert spec.read_columns() is None
    for where, field in UNREAD_BAD.items():
        code, reason = dead[where]
        assert code == "wrong_type" and field in reason, (where, dead[where])
    assert dead[("a", 4)][0] == "wrong_type"
    assert _windows(spec) == {("ann", 1, 1.0)}
    late = committed_rows(spec, "late_records")
    assert late == []  # ann's late record is dead first: its score does not convert
    assert dead[("b", 1)][0] == "wrong_type"


def test_the_same_input_read_strictly_only_moves_records_to_dead_letters(
    spark: Any, tmp_path: Path
) -> None:
    """What strict mode adds is exactly the unread-column cases: the rest is the same."""
    _, loose_dead = _run(spark, tmp_path / "loose", "jsonl", strict=False)
    _, strict_dead = _run(spark, tmp_path / "strict", "jsonl", strict=True)
    added = set(strict_dead) - set(loose_dead)
    assert added == {*UNREAD_BAD, ("b", 1)}
    assert all(strict_dead[w] == loose_dead[w] for w in loose_dead)
