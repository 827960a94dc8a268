"""Switching a pipeline between windows and stateless under the upgrade rules
(:mod:`sluice.protocol.upgrade`), on one checkpoint history:

1. windows for one epoch (open windows in the state);
2. stateless: refused, storage untouched, until the state drop is allowed; then the epoch
   starts without state and commits exactly the reference rows of its input;
3. stateless with another filter and output: no state to drop, so no allow is needed;
4. windows again: no allow needed either, it starts with empty state; every window with no
   record before the switch equals the whole-input reference (the watermark went on through
   the stateless epochs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.contracts.records import StateRef
from sluice.protocol import SpecChanged, plan_epoch, run_until_drained
from sluice.sinks.files import read_rows
from sluice.spec import parse_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.reference import compare_rows, compute_reference
from tests.stateless.data import (
    BOUND_S,
    OUTPUT,
    SCHEMA,
    make_items,
    normalised,
    reference,
    render_jsonl,
    spec_body,
)

ITEMS = make_items(files=7)
AGGREGATES = {"n": "count(*)", "total": "sum(amount)"}
WINDOW = '{"size_us": 60000000, "type": "tumbling"}'
KEYS = ["user", "window_start"]


def _windowed(root: Path, sink: str) -> dict[str, Any]:
    body = spec_body(root, sinks=[{"name": "out", "type": "files", "path": str(root / sink)}])
    for field in ("select", "filter", "output"):
        del body[field]
    body.update(key_by=["user"], window={"type": "tumbling", "size": "1m"}, aggregates=AGGREGATES)
    return body


def _stateless(root: Path, sink: str, **overrides: Any) -> dict[str, Any]:
    sinks = [{"name": "out", "type": "files", "path": str(root / sink)}]
    return spec_body(root, sinks=sinks, **overrides)


def _windows(files: dict[str, bytes]) -> Any:
    return compute_reference(
        sorted(files.items()), schema=SCHEMA, event_time="ts", max_out_of_orderness_s=BOUND_S,
        allowed_lateness_s=0, window_size_s=60, key_by=["user"], aggregates=AGGREGATES,
    )  # fmt: skip


def _rows(root: Path, sink: str, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = read_rows(open_store(str(root / sink)), "parquet")
    return sorted(tuple(normalised(r[c]) for c in columns) for r in rows)


def test_windows_to_stateless_and_back(spark: Any, tmp_path: Path) -> None:
    written = render_jsonl(ITEMS, tmp_path / "in")
    names = sorted(written)
    rt = runtime(parse_spec(_windowed(tmp_path, "windows")))
    run_until_drained(rt, spark, max_units=1, max_epochs=1)
    assert rt.repo.latest_checkpoint().result.state.rows > 0

    # 2. stateless: refused without allowing the drop, then epoch 2 starts without state
    stateless = runtime(parse_spec(_stateless(tmp_path, "rows")))
    before = sorted((i.key, i.size) for i in stateless.repo.store.list())
    with pytest.raises(SpecChanged) as refused:
        plan_epoch(stateless, max_units=1)
    assert refused.value.differences == [
        f"operator: stored window {WINDOW}, spec now stateless (all state is dropped)"
    ]
    assert sorted((i.key, i.size) for i in stateless.repo.store.list()) == before
    plan = plan_epoch(stateless, max_units=1, allow_state_drop=True)
    assert plan is not None and plan.state == StateRef()
    assert plan.state_migration is not None and plan.state_migration.to_dict()["reset_all"]
    run_until_drained(stateless, spark, max_units=1, max_epochs=1)
    expected = reference({names[1]: ITEMS[names[1]]}, OUTPUT).rows
    assert _rows(tmp_path, "rows", OUTPUT) == sorted(expected)

    # 3. another filter and output: nothing to drop, nothing to allow
    output = ["ts", "id", "cents"]
    changed = runtime(parse_spec(_stateless(tmp_path, "rows2", filter="id > 0", output=output)))
    plan = plan_epoch(changed, max_units=1)
    assert plan is not None and plan.state_migration is None
    run_until_drained(changed, spark, max_units=1, max_epochs=1)
    expected = reference({names[2]: ITEMS[names[2]]}, output, filtered=False).rows
    assert _rows(tmp_path, "rows2", output) == sorted(expected)

    # 4. windows again: starts empty without allowing anything, and runs to the end
    again = runtime(parse_spec(_windowed(tmp_path, "windows2")))
    plan = plan_epoch(again, max_units=2)
    assert plan is not None and plan.state == StateRef()
    assert plan.state_migration is not None
    assert plan.state_migration.to_dict()["added"] == [
        f"operator: stateless before, window {WINDOW} now (it starts with empty state)"
    ]
    run_until_drained(again, spark, max_units=2)
    texts = {n: (tmp_path / "in" / n).read_bytes() for n in names}
    whole = _windows(texts)
    early = _windows({n: texts[n] for n in names[:3]})
    seen = {(w["user"], w["window_start"]) for w in early.emitted + early.open_windows}
    rows = read_rows(open_store(str(tmp_path / "windows2")), "parquet")
    fresh = [r for r in rows if (r["user"], normalised(r["window_start"])) not in seen]
    assert len(fresh) >= 5, "windows after the switch (else the test proves less)"
    chosen = {(r["user"], normalised(r["window_start"])) for r in fresh}
    expected_windows = [w for w in whole.emitted if (w["user"], w["window_start"]) in chosen]
    assert compare_rows(fresh, expected_windows, keys=KEYS) == []
