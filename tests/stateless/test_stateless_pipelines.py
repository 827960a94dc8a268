"""Stateless pipelines (no window, no process function) through real epochs on real Spark.

The committed output equals the plain-Python reference over the whole input
(tests/stateless/data.py) however the input is cut into epochs, from JSON lines and Parquet;
dead letters (malformed, no event time, wrong type, a ``select:`` cast that raises) and the
counts reconcile in every checkpoint; the watermark is tracked and checkpointed although no
state is; qos 0, 1 and 2 publish at the step they promise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from sluice.protocol import commit_epoch, plan_epoch, process_epoch, run_until_drained
from sluice.report import checkpoint_rows, checkpoint_table
from sluice.spec import parse_spec
from sluice.state_view import state_view

from tests.fixtures.pipelines import committed_rows, runtime, staged_keys
from tests.stateless.data import (
    OUTPUT,
    SCHEMA,
    SELECT,
    Reference,
    make_items,
    normalised,
    reference,
    render_jsonl,
    render_parquet,
    spec_body,
    splits,
)

ITEMS = make_items()
SPLITS = splits(sorted(ITEMS))


def _rows(spec: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = committed_rows(spec, "out")
    assert all(list(r) == columns for r in rows), rows[:1]  # these columns, in this order
    return sorted(tuple(normalised(r[c]) for c in columns) for r in rows)


def _check(spec: Any, rt: Any, outcomes: list[Any], ref: Reference, columns: list[str]) -> None:
    assert _rows(spec, columns) == sorted(ref.rows)
    dead = committed_rows(spec, "dead_letters")
    assert sorted((d["file"], d["line"], d["reason_code"]) for d in dead) == sorted(ref.dead)
    failed = [d for d in dead if d["reason_code"] == "expression_failed"]
    assert failed and all(d["reason"].startswith("select.code_num = ") for d in failed)
    assert committed_rows(spec, "late_records") == []
    assert staged_keys(spec) == []
    stats = [o.checkpoint.result.stats for o in outcomes]
    for s in stats:
        assert s.records_read == s.accepted + s.late + s.dead + s.filtered
        assert (s.late, s.late_rows, s.windows_emitted, s.windows_open) == (0, 0, s.accepted, 0)
    totals = [sum(getattr(s, f) for s in stats) for f in ("records_read", "accepted", "dead",
                                                          "filtered")]  # fmt: skip
    assert totals == [ref.read, ref.accepted, len(ref.dead), ref.filtered]
    for outcome in outcomes:  # no state, ever
        assert outcome.checkpoint.result.state.uri is None
        assert outcome.checkpoint.result.state.rows == 0
    assert outcomes[-1].checkpoint.result.watermark_us == ref.watermark_us


def _run(spark: Any, spec: Any, sizes: list[int]) -> tuple[Any, list[Any]]:
    rt = runtime(spec)
    outcomes = run_until_drained(
        rt, spark, max_units=lambda i: sizes[i] if i < len(sizes) else None
    )
    assert len(outcomes) == len(sizes)
    return rt, outcomes


@pytest.mark.parametrize("split", list(SPLITS))
def test_output_equals_the_reference_for_any_split(spark: Any, tmp_path: Path, split: str) -> None:
    written = render_jsonl(ITEMS, tmp_path / "in")
    spec = parse_spec(spec_body(tmp_path))
    rt, outcomes = _run(spark, spec, SPLITS[split])
    _check(spec, rt, outcomes, reference(written, OUTPUT), OUTPUT)
    if split == "file_per_epoch":  # an epoch whose every record was dropped emits nothing
        assert 0 in [o.checkpoint.result.stats.accepted for o in outcomes]
        console = Console(record=True, width=250)
        console.print(checkpoint_table(rt, checkpoint_rows(rt)))
        assert "rows out" in console.export_text()
        assert state_view(spark, rt, rt.repo.latest_checkpoint()) is None


def test_parquet_source_with_the_default_output(spark: Any, tmp_path: Path) -> None:
    written = render_parquet(ITEMS, tmp_path / "in")
    body = spec_body(tmp_path, "parquet")
    del body["output"]
    spec = parse_spec(body)
    columns = [*SCHEMA, *SELECT]
    assert list(spec.output_columns()) == columns
    rt, outcomes = _run(spark, spec, SPLITS["random"])
    _check(spec, rt, outcomes, reference(written, columns), columns)
    raws = [d["raw"] for d in committed_rows(spec, "dead_letters")
            if d["reason_code"] == "expression_failed"]  # fmt: skip
    assert raws and all('"code":"x' in raw and '"id":' in raw for raw in raws)


@pytest.mark.parametrize(("qos", "visible_after"), [(2, "commit"), (1, "process"), (0, "process")])
def test_each_qos_level_publishes_when_it_promises(
    spark: Any, tmp_path: Path, qos: int, visible_after: str
) -> None:
    """qos 2 publishes at commit, qos 1 before the checkpoint and qos 0 right after it (both
    in the process step); the output is the reference's in every case."""
    written = render_jsonl(ITEMS, tmp_path / "in")
    body = spec_body(tmp_path, qos=qos)
    body["source"]["max_files_per_epoch"] = 3
    spec = parse_spec(body)
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    record = process_epoch(rt, spark, plan.epoch)
    after_process = len(committed_rows(spec, "out"))
    checkpoint_after_process = rt.repo.checkpoint(plan.epoch) is not None
    first = commit_epoch(rt, plan.epoch, record.attempt)
    after_commit = len(committed_rows(spec, "out"))
    assert after_commit == first.result.stats.accepted > 0
    assert after_process == (after_commit if visible_after == "process" else 0)
    assert checkpoint_after_process == (qos == 0)  # qos 0: offsets first, then the output
    assert len(run_until_drained(rt, spark)) == 1
    ref = reference(written, OUTPUT)
    assert _rows(spec, OUTPUT) == sorted(ref.rows)
    dead = committed_rows(spec, "dead_letters")
    assert sorted((d["file"], d["line"], d["reason_code"]) for d in dead) == sorted(ref.dead)
    marker = rt.repo.sinks_committed(2)
    assert marker is not None
    assert marker.output == {0: "committed", 1: "written", 2: "committed"}[qos]


def test_the_shipped_nexmark_q1(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """include/pipelines/nexmark_q1.yaml over 30,000 generated events in two epochs: every bid,
    its price times 0.908 exactly (a decimal), nothing else."""
    from decimal import Decimal

    import yaml
    from sluice.nexmark import EventKind, generate

    monkeypatch.setenv("SLUICE_DATA", str(tmp_path))
    path = Path(__file__).resolve().parents[2] / "include" / "pipelines" / "nexmark_q1.yaml"
    body = yaml.safe_load(path.read_text())
    body["source"].update(max_events=30_000, events_per_epoch=15_000)
    spec = parse_spec(body, origin=str(path))
    assert spec.stateless
    outcomes = run_until_drained(runtime(spec), spark)
    assert len(outcomes) == 2
    bids = generate(0, 30_000)[EventKind.BID].to_pylist()
    expected = sorted(
        (b["auction"], b["bidder"], Decimal(b["price"]) * Decimal("0.908"),
         normalised(b["date_time"]), b["extra"])
        for b in bids
    )  # fmt: skip
    columns = ["auction", "bidder", "price_eur", "date_time", "extra"]
    assert _rows(spec, columns) == expected
    assert sum(o.checkpoint.result.stats.accepted for o in outcomes) == len(bids)
