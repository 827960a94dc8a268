"""Every record that cannot be processed is a dead letter with its source, offset (file and
line), raw text and reason; the run goes on and the checkpoint counts it.

The hand-made input has one record of each kind: malformed JSON, a missing and an unparseable
event time, a wrong type, and records on which a user expression raises under Spark's ANSI
semantics — an invalid cast and a division by zero in ``select:``, ``raise_error`` in
``filter:``. One of those carries an event time an hour ahead: a dead record must not move
the watermark (else the next epoch's records would all be late).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from sluice.operators.base import InvalidExpression
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import committed_rows, runtime

T0 = "2024-01-01T00:00"


def _rec(user: str, second: int, code: str = "2", amount: float = 1.0, **extra: Any) -> str:
    record = {"user": user, "url": "/x", "ts": f"{T0}:{second:02d}", "amount": amount, "code": code}
    record.update(extra)
    return json.dumps(record)


FILES = {
    "a.jsonl": [
        _rec("ann", 1),
        _rec("bob", 2, code="x1"),  # select.code_num: invalid cast
        _rec("ann", 3, code="0"),  # select.ratio: division by zero
        json.dumps({"user": "eve", "ts": "2024-01-01T01:00:00", "amount": 1, "code": "x9"}),
        '{"user": "ann", "ts": ',  # malformed
        _rec("bob", 5),
    ],
    "b.jsonl": [
        _rec("mallory", 6),  # filter: raise_error
        _rec("ann", 7, amount=-1.0),  # filtered, not dead
        json.dumps({"user": "bob", "amount": 1.0, "code": "x1"}),  # no event time (wins)
        _rec("bob", 8, amount="lots"),  # wrong type
        json.dumps({"user": "ann", "ts": "yesterday", "code": "1"}),  # unparseable event time
        _rec("ann", 9, code="4"),
        _rec("bob", 10, code="1"),
        json.dumps({"user": "zed", "ts": "2024-01-01T00:10:00", "amount": 1.0, "code": "1"}),
    ],
}

# (file, line) -> (reason_code, words the reason must contain)
DEAD = {
    ("a.jsonl", 2): ("expression_failed", "select.code_num"),
    ("a.jsonl", 3): ("expression_failed", "select.ratio"),
    ("a.jsonl", 4): ("expression_failed", "select.code_num"),
    ("a.jsonl", 5): ("malformed", "JSON"),
    ("b.jsonl", 1): ("expression_failed", "filter"),
    ("b.jsonl", 3): ("missing_event_time", "'ts'"),
    ("b.jsonl", 4): ("wrong_type", "'amount'"),
    ("b.jsonl", 5): ("wrong_type", "'ts'"),
}
# Closed by zed's record at 00:10 (bound 5 s). ratio = amount / code:
# ann at 1 (1/2) and 9 (1/4); bob at 5 (1/2) and 10 (1/1).
RESULTS = {("ann", 2, 0.75), ("bob", 2, 1.5)}


def _spec(tmp_path: Path) -> Any:
    root = tmp_path.as_uri()
    return parse_spec(
        {
            "name": "deadletters",
            "source": {
                "type": "files",
                "path": f"{root}/in",
                "format": "jsonl",
                "max_files_per_epoch": 1,
                "schema": {
                    "user": "string",
                    "url": "string",
                    "ts": "timestamp",
                    "amount": "double",
                    "code": "string",
                },
            },
            "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
            "key_by": ["user"],
            "window": {"type": "tumbling", "size": "1m"},
            "select": {"code_num": "cast(code AS INT)", "ratio": "amount / code_num"},
            "filter": "CASE WHEN user = 'mallory' THEN raise_error('no mallory') "
            "ELSE amount > 0 END",
            "aggregates": {"n": "count(*)", "ratios": "sum(ratio)"},
            "sinks": [{"name": "out", "type": "files", "path": f"{root}/out"}],
            "late_records": {"type": "files", "path": f"{root}/late", "format": "jsonl"},
            "dead_letters": {"type": "files", "path": f"{root}/dead", "format": "jsonl"},
            "checkpoint": {"storage": f"{root}/ckpt"},
        }
    )


@pytest.fixture(scope="module")
def run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp("deadletters")
    (tmp_path / "in").mkdir()
    for name, lines in FILES.items():
        (tmp_path / "in" / name).write_text("\n".join(lines) + "\n")
    spec = _spec(tmp_path)
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark)
    return spec, rt, outcomes


def test_each_unprocessable_record_is_a_dead_letter_with_its_reason(run: Any) -> None:
    spec, _, _ = run
    dead = {(r["file"], r["line"]): r for r in committed_rows(spec, "dead_letters")}
    assert set(dead) == set(DEAD)
    raw = {(f, i + 1): line for f, lines in FILES.items() for i, line in enumerate(lines)}
    for where, (code, words) in DEAD.items():
        row = dead[where]
        assert row["reason_code"] == code, (where, row)
        assert words in row["reason"], (where, row["reason"])
        assert row["raw"] == raw[where]
        assert row["pipeline"] == "deadletters" and row["source"].endswith("/in")
    assert "cast(code AS INT)" in dead[("a.jsonl", 2)]["reason"]


def test_the_run_goes_on_and_the_checkpoints_count_them(run: Any) -> None:
    spec, rt, outcomes = run
    assert [o.checkpoint.epoch for o in outcomes] == [1, 2]
    stats = [rt.repo.checkpoint(e).result.stats for e in (1, 2)]
    assert [s.dead for s in stats] == [4, 4]
    assert [s.filtered for s in stats] == [0, 1]
    assert [s.late for s in stats] == [0, 0]  # eve's hour-ahead record moved no watermark
    for s in stats:
        assert s.records_read == s.accepted + s.late + s.dead + s.filtered
    rows = committed_rows(spec, "out")
    assert {(r["user"], r["n"], float(r["ratios"])) for r in rows} == RESULTS
    assert committed_rows(spec, "late_records") == []


def test_an_expression_spark_cannot_analyse_stops_the_epoch_naming_the_field(
    spark: Any, tmp_path: Path
) -> None:
    """Not a per-record problem: no record could be processed, so nothing is committed."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(_rec("ann", 1) + "\n")
    spec = dataclasses.replace(
        _spec(tmp_path), select=(("code_num", "cast(no_such_column AS INT)"),)
    )
    rt = runtime(spec)
    with pytest.raises(InvalidExpression, match=r"deadletters: select\.code_num: .*no_such_column"):
        run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == 0
    assert [a.status.value for a in rt.repo.attempts(1)] == ["failed"]


def test_the_dead_letter_write_plans_the_parse_once(run: Any, spark: Any) -> None:
    """The dead letters' filter (``_error IS NOT NULL``) stays above the parse. Pushed below
    it, Spark wrote every parse step's definition into the condition, nested in each other:
    a 4.4 MB plan and a 9.2 MiB task binary for a few lines (``where_not_pushed``)."""
    spec, _, _ = run
    dead_path = spec.dead_letters.path.removeprefix("file://")
    store = spark._jsparkSession.sharedState().statusStore()
    plans = []
    executions = store.executionsList().iterator()
    while executions.hasNext():
        plan = executions.next().physicalPlanDescription()
        if dead_path in plan:
            plans.append(plan)
    assert len(plans) == 2, f"{len(plans)} writes of {dead_path} recorded"  # one an epoch
    for plan in plans:
        filters = [line for line in plan.splitlines() if line.startswith("Condition :")]
        pushed = [c[:300] for c in filters if "_error" not in c and "JsonBytes" in c]
        assert not pushed, f"the dead letters' filter pushed into the parse: {pushed}"
        assert len(plan) < 100_000, f"a plan of {len(plan):,} characters"
