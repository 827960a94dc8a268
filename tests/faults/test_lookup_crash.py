"""A lookup join under SIGKILLs (#36, docs/joins.md): the step holding a fault point runs in a
``sluice`` subprocess that dies there (tests/faults/crashing.py), the table changes right
after, and the recovered epoch joins the version its stored plan pinned — the table as it was
when the plan was written, not as it is when the retry runs.

The table is a PostgreSQL one, copied into the checkpoint store at plan time (the path with
the most steps: a copy written before the plan, a plan killed before or after it is stored).
Each epoch reads one file of clicks by ``ann`` and ``bob``; before epoch e is planned, ann's
country is ``p<e>``; right after the kill it becomes ``k<e>``. An epoch whose plan was stored
before the kill must show ``p<e>``; one killed before its plan was stored is planned again by
the recovery, after the change, and shows ``k<e>``.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.protocol import run_epoch, run_until_drained
from sluice.spec import parse_spec

from tests.faults.conftest import report
from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import committed_rows, runtime, staged_keys
from tests.integration.test_lookup_join import _clicks, _pg_users, app_db, spec_body

__all__ = ["app_db"]  # the fixture, used by name

pytestmark = pytest.mark.spark

POINTS = (
    "plan.before_write",
    "plan.after_write",
    "process.after_prepare",
    "commit.after_checkpoint",
    "retention.mid_delete",
)


def test_a_killed_lookup_epoch_joins_the_version_its_plan_pinned(
    spark: Any, tmp_path: Path, app_db: Any, request: pytest.FixtureRequest
) -> None:
    table = {"type": "postgres", "connection": "app_db", "table": "users"}
    body = spec_body(tmp_path, table=table)
    body["checkpoint"]["retained"] = 2  # every commit retires an epoch: retention runs
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    expected: dict[int, str] = {}

    def before_plan(epoch: int) -> None:
        _clicks(tmp_path, f"e{epoch:02d}", ["ann", "bob"], second=10 * epoch)
        _pg_users(app_db, {"ann": (f"p{epoch}", epoch), "bob": ("fr", 2)})
        expected[epoch] = f"p{epoch}"

    for epoch in (1, 2):
        before_plan(epoch)
        run_until_drained(rt, spark, max_units=1)
    lines = []
    for point in POINTS:
        epoch = rt.repo.latest_epoch() + 1
        before_plan(epoch)
        code = crash_step(rt, spark, spec_path, point, epoch, log=tmp_path / "cli.log")
        assert code == -signal.SIGKILL, (point, code, (tmp_path / "cli.log").read_text()[-3000:])
        planned = rt.repo.plan(epoch) is not None
        _pg_users(app_db, {"ann": (f"k{epoch}", epoch), "bob": ("fr", 2)})
        if not planned:
            expected[epoch] = f"k{epoch}"
        run_epoch(rt, spark, max_units=1)  # recovers (or finishes the commit) and runs it
        assert rt.repo.checkpoint(epoch) is not None
        lines.append(f"{point:<26} epoch {epoch}: plan stored before the kill: {planned}; "
                     f"joined {expected[epoch]}")  # fmt: skip
    run_until_drained(rt, spark, max_units=1)
    report(request.config, "lookup join under SIGKILLs (one pipeline)", lines)

    out = committed_rows(spec, "out")
    seconds = [(int(r["ts"][14:16]) * 60 + int(r["ts"][17:19]), r) for r in out]
    by_epoch = {s // 10: r["country"] for s, r in seconds if r["user"] == "ann"}
    assert by_epoch == expected
    assert len(out) == 2 * len(by_epoch)  # every click once
    assert staged_keys(spec) == []
