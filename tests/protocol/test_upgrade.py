"""Restoring a savepoint under a changed spec (issue #7 part 2, :mod:`sluice.protocol.upgrade`).

The click pipeline runs two epochs and takes savepoint ``v1``. Then:

* an incompatible spec (window size and an aggregate's expression changed) is refused at plan
  time with every difference listed, and the checkpoint store is byte-for-byte untouched;
* a compatible spec (an aggregate added, the sink moved) restores from ``v1`` and runs the rest:
  the original aggregates over both sink paths equal the uninterrupted reference, and the new
  aggregate is exact in every window that was not open at the savepoint;
* allowing the drop continues under a changed aggregate, which restarts empty.
"""

from __future__ import annotations

from typing import Any

import pytest
from sluice.demo import render_click_files
from sluice.protocol import RunRequest, SpecChanged, plan_epoch, run_until_drained, take_savepoint
from sluice.protocol.process import read_state
from sluice.sinks.files import read_rows
from sluice.spec import parse_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import CLICK_AGGREGATES, click_reference, click_spec_dict, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=6, events_per_file=60, seed=31)  # 30 s each
KEYS = ["user", "window_start"]


def _listing(rt: Any) -> list[tuple[str, int]]:
    return sorted((i.key, i.size) for i in rt.repo.store.list())


def _plan_with(rt: Any, conf: dict[str, Any]) -> Any:
    options = RunRequest.from_conf(rt.name, conf).resolve(rt)
    return plan_epoch(rt, max_units=1, allow_state_drop=options.allow_state_drop)


def test_savepoint_restore_under_compatible_and_incompatible_changes(
    spark: Any, local_workspace: Any
) -> None:
    ws = local_workspace
    ws.put_files(FILES)
    base = click_spec_dict(ws)
    rt = runtime(parse_spec(base))
    run_until_drained(rt, spark, max_units=1, max_epochs=2)
    take_savepoint(rt, "v1")
    restore = {"restore_from": "savepoint", "savepoint": "v1"}

    # incompatible: refused with each difference, storage untouched
    bad = dict(base, window={"type": "tumbling", "size": "2m"})
    bad["aggregates"] = dict(CLICK_AGGREGATES, total="max(amount)")
    broken = runtime(parse_spec(bad))
    before = _listing(broken)
    with pytest.raises(SpecChanged) as refused:
        _plan_with(broken, restore)
    assert refused.value.differences == [
        'window: stored {"size_us": 60000000, "type": "tumbling"}, spec now '
        '{"size_us": 120000000, "type": "tumbling"} (all state is dropped)',
        "aggregates.total: stored 'sum(amount)', spec now 'max(amount)'",
    ]
    assert "allow_state_drop=true" in str(refused.value)
    assert _listing(broken) == before

    # compatible: an aggregate added and the sink moved; restore and run the rest
    added = dict(CLICK_AGGREGATES, smallest="min(amount)")
    good = dict(base, aggregates=added)
    good["sinks"] = [dict(base["sinks"][0], path=ws.uri("out2"))]
    upgraded = runtime(parse_spec(good))
    plan = _plan_with(upgraded, restore)
    assert plan is not None and plan.epoch == 3
    assert plan.state_migration is not None
    assert plan.state_migration.to_dict()["added"] == ["aggregate smallest: added (min(amount))"]
    assert plan.state_migration.to_dict()["dropped"] == []
    run_until_drained(upgraded, spark, max_units=1)
    assert upgraded.repo.latest_epoch() == 6

    old = read_rows(open_store(ws.uri("out")), "parquet")
    new = read_rows(open_store(ws.uri("out2")), "parquet")
    reference = click_reference(FILES, added).emitted
    originals = [{k: v for k, v in r.items() if k != "smallest"} for r in reference]
    assert compare_rows(old + new, originals, keys=KEYS) == []
    open_at_savepoint = {_key(w) for w in click_reference(FILES[:2], CLICK_AGGREGATES).open_windows}
    expected = {_key(r): r for r in reference}
    fresh = [r for r in new if _key(r) not in open_at_savepoint]
    assert fresh
    assert compare_rows(fresh, [expected[_key(r)] for r in fresh], keys=KEYS) == []
    restarted = [r for r in new if _key(r) in open_at_savepoint]
    assert restarted, "some windows were open at the savepoint (else the test proves less)"
    for row in restarted:  # the added aggregate saw only the records after the savepoint
        assert row["smallest"] is None or row["smallest"] >= expected[_key(row)]["smallest"]


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["user"], str(row["window_start"])[:19]


def test_allowing_the_drop_restarts_a_changed_aggregate(spark: Any, local_workspace: Any) -> None:
    ws = local_workspace
    ws.put_files(FILES)
    base = click_spec_dict(ws)
    rt = runtime(parse_spec(base))
    run_until_drained(rt, spark, max_units=1, max_epochs=2)

    changed = dict(base, aggregates=dict(CLICK_AGGREGATES, biggest="min(amount)"))
    upgraded = runtime(parse_spec(changed))
    with pytest.raises(SpecChanged):
        _plan_with(upgraded, {})
    plan = _plan_with(upgraded, {"allow_state_drop": True})
    assert plan is not None and plan.state_migration is not None
    assert plan.state_migration.to_dict()["reset_aggregates"] == ["biggest"]
    assert plan.state.uri is not None  # the other aggregates keep their state
    migration = plan.state_migration
    state = read_state(spark, upgraded, plan.state, migration).frame()
    assert state is not None
    restored = state.collect()
    assert restored and all(r["_p_biggest_m"] is None for r in restored)  # restarts empty
    assert all(r["_p_clicks_n"] > 0 for r in restored)  # the others carry on
    run_until_drained(upgraded, spark, max_units=1)
    assert upgraded.repo.latest_epoch() == 6

    rows = read_rows(open_store(ws.uri("out")), "parquet")
    reference = click_reference(FILES, dict(CLICK_AGGREGATES, biggest="min(amount)")).emitted
    unchanged = [{k: v for k, v in r.items() if k != "biggest"} for r in reference]
    assert compare_rows(rows, unchanged, keys=KEYS) == []
    # a window opened after the change has the new aggregate exactly
    before = click_reference(FILES[:2], CLICK_AGGREGATES)
    seen = {_key(w) for w in before.emitted + before.open_windows}
    expected = {_key(r): r for r in reference}
    fresh = [r for r in rows if _key(r) not in seen]
    assert fresh
    assert compare_rows(fresh, [expected[_key(r)] for r in fresh], keys=KEYS) == []
