"""Keyed process functions in Spark, against independent references, across epochs.

* ``count_window_average`` — the shipped spec (include/pipelines/) and Flink's example: key 1
  with values 3, 5, 7, 4, 2 gives exactly (1, 4) and (1, 5), whatever the epoch split;
* ``kinds`` — every state kind (value with TTL, list, reducing, map with TTL) and event-time
  timers over three keys: the committed output under any split equals a plain-Python
  simulation of the whole stream record by record (the semantics docs/keyed-state.md states);
* a function that raises stops the epoch naming the key; a changed state declaration is
  refused naming the state.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.keyed.operator import ProcessFunctionFailed
from sluice.protocol import run_until_drained
from sluice.protocol.exceptions import SpecChanged
from sluice.sinks.files import read_rows
from sluice.spec import load_spec
from sluice.state_view import resolve_checkpoint, rows_of, state_view
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.keyed.data import SPLITS, cwa_expected, kinds_rows

# one file per epoch (a Spark epoch per file, 30-60 s) runs in make chaos
SPLIT_CASES = [
    pytest.param(s, marks=[pytest.mark.slow] if s == "file_per_epoch" else []) for s in SPLITS
]


@pytest.mark.parametrize("split", SPLIT_CASES)
def test_count_window_average_equals_flinks_output_under_any_split(
    spark: Any, cwa: Any, split: str
) -> None:
    rt = runtime(cwa)
    outcomes = run_until_drained(rt, spark, max_units=SPLITS[split])
    rows = read_rows(open_store(cwa.sinks[0].path), "parquet")
    assert Counter((r["key"], r["average"]) for r in rows) == cwa_expected()
    assert sorted(r["average"] for r in rows if r["key"] == 1) == [4, 5]
    last = outcomes[-1].checkpoint.result.stats
    assert last.windows_open == 2  # keys 1 (value 2) and 2 (value 30) hold a half-full count
    state = spark.read.parquet(outcomes[-1].checkpoint.result.state.uri).collect()
    assert {r["key"]: r["_s_sum"].asDict() for r in state} == {
        1: {"count": 1, "sum": 2},
        2: {"count": 1, "sum": 30},
    }
    # sluice state shows the same, one row per key (issue #7 part 5)
    view = state_view(spark, rt, resolve_checkpoint(rt))
    assert view is not None
    assert [(r["key"], json.loads(r["sum"]), r["timers"]) for r in rows_of(view)] == [
        (1, {"count": 1, "sum": 2}, "[]"),
        (2, {"count": 1, "sum": 30}, "[]"),
    ]


@pytest.mark.parametrize("split", SPLIT_CASES)
def test_every_state_kind_ttl_and_timers_equal_the_reference_under_any_split(
    spark: Any, kinds: Any, split: str
) -> None:
    spec, expected = kinds
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark, max_units=SPLITS[split])
    got = kinds_rows(spec)
    assert sum(1 for k in expected if k[1] == "timer") > 10  # the test exercises timers
    assert got == expected, (got - expected, expected - got)
    stats = [o.checkpoint.result.stats for o in outcomes]
    assert sum(s.dead for s in stats) == 1
    assert all(s.records_read == s.accepted + s.dead + s.filtered for s in stats)


def test_a_failing_function_stops_the_epoch_naming_the_key(
    spark: Any, kinds: Any, tmp_path: Path
) -> None:
    spec, _ = kinds
    (tmp_path / "kinds.py").write_text(
        (tmp_path / "kinds.py").read_text()
        + "\n\ndef broken(ctx, records):\n"
        + "    if ctx.key == 'b':\n        raise ValueError('no b')\n"
    )
    spec = load_spec(
        _rewrite(tmp_path / "kinds.yaml", lambda b: b["process"].update(function="kinds:broken"))
    )
    rt = runtime(spec)
    with pytest.raises(
        ProcessFunctionFailed,
        match=r"pipeline kinds, epoch 1, key 'b': kinds:broken: ValueError: no b",
    ):
        run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == 0
    assert [a.status.value for a in rt.repo.attempts(1)] == ["failed"]


def test_restoring_under_a_changed_state_declaration_names_the_state(
    spark: Any, kinds: Any, tmp_path: Path
) -> None:
    spec, _ = kinds
    run_until_drained(runtime(spec), spark, max_epochs=1, max_units=2)

    def change(body: dict[str, Any]) -> None:
        body["process"]["state"]["history"]["type"] = "string"

    changed = load_spec(_rewrite(tmp_path / "kinds.yaml", change))
    with pytest.raises(SpecChanged) as info:
        run_until_drained(runtime(changed), spark)
    assert "state.history: stored 'list<long>', spec now 'list<string>'" in str(info.value)


def _rewrite(path: Path, change: Any) -> Path:
    body = yaml.safe_load(path.read_text())
    change(body)
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_ttl_added_later_is_a_compatible_change(spark: Any, kinds: Any, tmp_path: Path) -> None:
    """Entries written before the TTL existed never expire; new writes carry their time."""
    spec, _ = kinds
    without = load_spec(
        _rewrite(tmp_path / "kinds.yaml", lambda b: b["process"]["state"]["tags"].pop("ttl"))
    )
    run_until_drained(runtime(without), spark, max_epochs=1, max_units=2)
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=3)
    assert rt.repo.latest_epoch() == 4
    state = spark.read.parquet(rt.repo.latest_checkpoint().result.state.uri).collect()
    stamps = [dict(r["_t_tags"] or {}) for r in state]
    assert any(stamps), stamps  # written after the TTL was added: stamped


def test_a_state_added_later_is_a_compatible_change(spark: Any, kinds: Any, tmp_path: Path) -> None:
    """A declared state the checkpoint does not have starts empty for every key; the others
    carry on (sluice.protocol.upgrade)."""
    spec, _ = kinds
    rt = runtime(spec)
    run_until_drained(rt, spark, max_epochs=1, max_units=2)

    def add(body: dict[str, Any]) -> None:
        body["process"]["state"]["extra"] = {"kind": "value", "type": "long"}

    grown = runtime(load_spec(_rewrite(tmp_path / "kinds.yaml", add)))
    outcomes = run_until_drained(grown, spark, max_units=3)
    assert outcomes and grown.repo.plan(2).state_migration.to_dict()["added"] == [
        "state extra: added (value<long>)"
    ]
    view = state_view(spark, grown, resolve_checkpoint(grown))
    assert view is not None
    rows = rows_of(view)
    assert rows and all(r["extra"] is None for r in rows)
    assert any(r["history"] not in (None, "[]") for r in rows)
