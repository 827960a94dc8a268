"""sluice.operators: the late and dead-letter frames every operator builds on demand have
exactly the columns of the empty frames the process step uses when there are no such rows
(records.late_ddl / DEAD_DDL), so a sink sees one schema whatever the epoch held."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.contracts.operators import EpochInput
from sluice.operators.base import DEAD_DDL, late_ddl
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
    rt = runtime(spec)
    plan = plan_epoch(rt)
    assert plan is not None
    records = rt.source.read(spark, rt.source.decode_range(plan.source_range))
    inp = EpochInput(spark, records, spec, plan.watermark, StoredState(), 1, "s")
    out = operator_for(spec).run(inp)
    try:
        out.results.count()  # the stateless pass is its results' write
        assert out.finish(None, None).counts.dead == 2
        late, dead = out.late(), out.dead()
        assert columns(late) == columns(spark.createDataFrame([], late_ddl(spec)))
        assert columns(dead) == columns(spark.createDataFrame([], DEAD_DDL))
        assert dead.count() == 2
    finally:
        out.release()
