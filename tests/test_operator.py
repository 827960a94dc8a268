"""sluice.operators: the late and dead-letter frames every operator builds on demand have
exactly the columns of the empty frames the process step uses when there are no such rows
(records.late_ddl / DEAD_DDL), so a sink sees one schema whatever the epoch held."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sluice.contracts.operators import EpochInput, SourceInput, one_source
from sluice.operators.base import DEAD_DDL, late_ddl
from sluice.operators.records import EXACT
from sluice.pipeline import operator_for
from sluice.protocol import plan_epoch
from sluice.spec import parse_spec
from sluice.state import StoredState

from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

pytestmark = pytest.mark.spark

LINES = b"\n".join(
    [
        b'{"user": "a", "url": "/x", "ts": "2026-01-01T00:02:00Z", "amount": 1.5}',
        b'{"user": "b", "url": "/y", "ts": "2026-01-01T00:00:10Z", "amount": 2.0}',  # late
        b"not json",  # dead
        b'{"user": "c", "url": "/z", "ts": "someday", "amount": 3.0}',  # dead: wrong type
    ]
)
OPERATORS = {
    "tumbling": {},
    "hopping": {"window": {"type": "hopping", "size": "1m", "slide": "20s"}},
    "count": {"window": {"type": "count", "count": 2}},
    "stateless": {},  # no window, aggregates or key_by
}


def columns(frame: Any) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]


def _first_epoch(spark: Any, spec: Any) -> Any:
    """The operator's run over the pipeline's first planned epoch (not yet finished)."""
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    records = rt.source.read(spark, rt.source.decode_range(plan.source_range))
    inp = EpochInput(spark, one_source(records, "s"), spec, plan.watermark, StoredState(), 1)
    return operator_for(spec).run(inp)


@pytest.mark.parametrize("operator", OPERATORS)
def test_side_outputs_have_the_empty_frames_columns(
    spark: Any, local_workspace: Workspace, operator: str
) -> None:
    local_workspace.put_files([("a.jsonl", LINES + b"\n")])
    body = click_spec_dict(local_workspace, **OPERATORS[operator])
    if operator == "stateless":
        for key in ("window", "aggregates", "key_by"):
            del body[key]
    spec = parse_spec(body)
    out = _first_epoch(spark, spec)
    try:
        out.results.count()  # the stateless pass is its results' write
        assert out.finish(None, None).counts.dead == 2
        late, dead = out.late(), out.dead()
        assert columns(late) == columns(spark.createDataFrame([], late_ddl(spec)))
        assert columns(dead) == columns(spark.createDataFrame([], DEAD_DDL))
        assert dead.count() == 2
    finally:
        out.release()


def _click(user: str, ts: str) -> bytes:
    return b'{"user": "%s", "url": "/x", "ts": "2026-01-01T%sZ", "amount": 1.0}' % (
        user.encode(),
        ts.encode(),
    )


def _window_partitioning(frame: Any) -> list[str]:
    """The partitioning of every window function in ``frame``'s physical plan (``[]``: Spark
    moves all rows to one partition, its WARN "No Partition Defined for Window operation")."""
    import re

    plan = frame._jdf.queryExecution().executedPlan().toString()
    return re.findall(r"\bWindow \[.*?\], \[(.*?)\], \[", plan)


@pytest.mark.parametrize("operator", ["tumbling", "hopping"])
def test_the_exact_pass_takes_each_files_bound_from_the_first_pass_and_runs_files_in_parallel(
    spark: Any, local_workspace: Workspace, operator: str
) -> None:
    """b.jsonl's records are late only behind a.jsonl's maximum (00:02:00, bound 5 s), which
    the first pass cannot know when it reads b: it is verified unsafe, and the exact pass
    gives b the bound a's run reported. Its window function is partitioned by file
    (``_major``), never one partition for the whole epoch."""
    a = [_click("a", "00:00:30"), _click("a", "00:02:00"), _click("b", "00:01:59")]
    b = [_click("c", "00:00:10"), _click("c", "00:03:00"), _click("d", "00:01:10")]
    c = [_click("e", "00:00:05"), _click("e", "00:02:58")]
    local_workspace.put_files(
        [
            (f"{n}.jsonl", b"\n".join(lines) + b"\n")
            for n, lines in zip("abc", [a, b, c], strict=True)
        ]
    )
    spec = parse_spec(click_spec_dict(local_workspace, **OPERATORS[operator]))
    out = _first_epoch(spark, spec)
    try:
        assert out.cls.mode == EXACT  # the first pass could not be trusted
        windows = _window_partitioning(out.cls.frame)
        assert windows and all(p.startswith("_major#") for p in windows), windows
        second = 1_000_000
        got = {
            (r["user"], r["_ts_us"] // second % 3600): r["_wm"]
            for r in out.cls.frame.select("user", "_ts_us", "_wm").collect()
        }
        base = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
        want = {("a", 30): None, ("a", 120): 25, ("b", 119): 115,  # a.jsonl
                ("c", 10): 115, ("c", 180): 115, ("d", 70): 175,  # b.jsonl: behind a's 120 s
                ("e", 5): 175, ("e", 178): 175}  # fmt: skip
        assert got == {k: None if v is None else int((base + v) * second) for k, v in want.items()}
        assert out.finish(None, None).counts.late == 3  # c at 10 s, d at 70 s, e at 5 s
    finally:
        out.release()


def test_an_epoch_of_several_sources_names_each_and_gives_no_first_for_all() -> None:
    """One input per source, by name: the one-source shortcuts refuse where there are
    several, rather than hand the first source's rows for all of them."""
    persons, auctions = SourceInput("persons rows", "p://"), SourceInput("auctions rows", "a://")  # type: ignore[arg-type]
    inp: EpochInput[Any] = EpochInput(
        None,
        {"persons": persons, "auctions": auctions},
        None,
        None,
        None,
        1,  # type: ignore[arg-type]
    )
    assert inp.inputs["auctions"].source_uri == "a://"
    for shortcut in ("records", "source_uri", "waiting", "before_hints"):
        with pytest.raises(TypeError, match=r"reads 2 sources \(persons, auctions\)"):
            getattr(inp, shortcut)
    one: EpochInput[Any] = EpochInput(None, one_source("rows", "s://"), None, None, None, 1)  # type: ignore[arg-type]
    assert (one.records, one.source_uri, one.waiting, one.before_hints) == ("rows", "s://", (), {})
