"""Stream–stream joins end to end: two files sources of Nexmark persons and auctions (with
disorder, late records and dead letters, tests/joins/data.py), joined in windows, in
intervals and without a window (with a TTL), inner and left; the committed output equals the
DuckDB reference for one epoch, one file per epoch and random cuts (split invariance), the
late records go to the late sink tagged with their side, the dead letters to theirs."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import Workspace, runtime
from tests.joins.data import JoinInput, connect, reference
from tests.joins.pipelines import (
    CON,
    INPUT,
    assert_committed_reference,
    join_spec,
    join_spec_dict,
    output_rows,
)

pytestmark = pytest.mark.spark

CUTS: dict[str, Any] = {
    "one_epoch": 100,
    "file_per_epoch": 1,
    "random": (lambda rng: lambda _i: rng.randint(1, 3))(random.Random(3)),
}


# make test: one file per epoch for each join, random cuts for the left interval join; the
# other cuts in make test-extended
FAST = {("window", "file_per_epoch"), ("interval", "file_per_epoch"), ("interval", "random"),
        ("regular", "file_per_epoch"), ("hopping", "random")}  # fmt: skip


@pytest.mark.parametrize(("kind", "how", "cut"), [
    pytest.param(kind, how, cut, id=f"{kind}-{how}-{cut}",
                 marks=[] if (kind, cut) in FAST else [pytest.mark.extended])
    for kind, how in (("window", "inner"), ("hopping", "inner"), ("interval", "left"),
                      ("regular", "inner"))
    for cut in CUTS
])  # fmt: skip
def test_join_equals_reference_for_any_cut(
    spark: Any, local_workspace: Workspace, kind: str, how: str, cut: str
) -> None:
    spec = join_spec(local_workspace, kind, how)
    outcomes = run_until_drained(runtime(spec), spark, max_units=CUTS[cut])
    assert len(reference(CON, kind, how=how)) > 100, "the reference must have pairs to compare"
    assert_committed_reference(spec, kind, how)
    for outcome in outcomes:
        s = outcome.checkpoint.result.stats
        assert s.records_read == s.accepted + s.late + s.dead + s.filtered


def test_a_rewind_restores_both_sources_and_one_source_alone_is_refused(
    spark: Any, local_workspace: Workspace
) -> None:
    """Rewinding to a checkpoint restores every source's offsets and the state with them: the
    replayed output equals the reference (the rewound epochs' output retracted). Offsets for
    one source alone are refused naming the other: the state holds rows of both sides."""
    from sluice.protocol import InvalidRunRequest, RunRequest

    spec = join_spec(local_workspace, "interval", "left")
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    latest = rt.repo.latest_epoch()
    assert latest >= 4
    request = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": 2})
    plan = request.resolve(rt).plan(rt, max_units=1)
    assert plan is not None and plan.retract_after == 2
    assert plan.start_offset == rt.repo.checkpoint(2).end_offset  # both sources' offsets
    run_until_drained(rt, spark, max_units=1)
    assert Counter(output_rows(spec)) == Counter(reference(CON, "interval", how="left"))

    alone = {"restore_from": "offsets", "offsets": {"persons": {"after_key": "01.jsonl"}}}
    with pytest.raises(InvalidRunRequest, match="auctions") as caught:
        RunRequest.from_conf(rt.name, alone).resolve(rt)
    assert "move together" in str(caught.value)


def test_a_side_without_input_holds_the_watermark_back_until_it_is_idle(
    spark: Any, local_workspace: Workspace, tmp_path: Any
) -> None:
    """A source that has shown no event yet holds the pipeline's watermark back: the other
    side's rows wait for it, and its late arrival still meets them all (epochs 1-2 read
    persons only: the auctions' slices are empty). A source that stopped long before the other
    holds it back too, unless it has an ``idle_timeout``: then the persons alone move the
    watermark, and the unmatched persons are emitted."""
    from sluice.protocol import run_epoch

    spec = parse_spec(join_spec_dict(local_workspace, "interval", "left"))
    local_workspace.put_files(INPUT.persons, "persons")
    rt = runtime(spec)
    for _ in range(2):
        outcome = run_epoch(rt, spark, max_units=1)
        assert outcome is not None
        assert outcome.checkpoint.result.watermark_us is None  # no auction seen yet
    assert output_rows(spec) == []  # nothing could match, nothing expired
    local_workspace.put_files(INPUT.auctions, "auctions")
    run_until_drained(rt, spark, max_units=1)
    assert Counter(output_rows(spec)) == Counter(reference(CON, "interval", how="left"))

    # the auctions stop after two files
    stopped = JoinInput(INPUT.persons, INPUT.auctions[:2])
    for idle, name in ((False, "held"), (True, "idle")):
        ws = Workspace("local", (tmp_path / name).as_uri())
        ws.put_files(stopped.persons, "persons")
        ws.put_files(stopped.auctions, "auctions")
        body = join_spec_dict(ws, "interval", "left")
        if idle:
            body["event_time"]["auctions"]["idle_timeout"] = "2s"  # 6 s of input, 4 s after them
        spec = parse_spec(body)
        run_until_drained(runtime(spec), spark, max_units=2)
        expected = reference(connect(stopped), "interval", how="left", idle_auctions=idle)
        assert Counter(output_rows(spec)) == Counter(expected), name
    unmatched = {
        idle: sum(1 for r in reference(connect(stopped), "interval", how="left",
                                       idle_auctions=idle) if r[1] is None)
        for idle in (False, True)
    }  # fmt: skip
    assert unmatched[True] > unmatched[False] + 100  # the idle rule made a difference
