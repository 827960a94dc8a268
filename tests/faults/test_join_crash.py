"""A stream–stream join under SIGKILLs (#36, docs/joins.md): the step holding a fault point
runs in a ``sluice`` subprocess that dies there (tests/faults/crashing.py); the recovery
finishes or retries the epoch, and the committed output still equals the DuckDB reference of
tests/joins/data.py — every pair once, every late record and dead letter once. The join's
state is written whole every epoch (a base), so ``state.after_compaction`` is reached too.

make test kills at four points drawn with a printed seed; make test-extended at every point.
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.protocol import ALL_FAULT_POINTS, run_epoch, run_until_drained
from sluice.protocol.faults import (
    COMPACTION_FAULT_POINTS,
    FAULT_POINTS,
    RETENTION_FAULT_POINTS,
)
from sluice.spec import parse_spec

from tests.faults.conftest import report
from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import committed_rows, runtime, staged_keys
from tests.integration.test_nexmark_joins import (
    CUTS,
    NEXMARK_REFERENCES,
    con,
    nexmark_rows,
    nexmark_spec,
)
from tests.joins.data import connect, make_input, reference
from tests.joins.pipelines import join_spec_dict, output_rows

__all__ = ["con"]  # the fixture, used by name

pytestmark = pytest.mark.spark

SEED = 36
# drawn among the points every pipeline reaches; the release points need clean_source, which
# the join below has (every-other-point kills there too)
REACHED = FAULT_POINTS + RETENTION_FAULT_POINTS + COMPACTION_FAULT_POINTS
DRAWN = tuple(random.Random(SEED).sample(REACHED, 4))
POINTS = [
    pytest.param(DRAWN, id=f"four-points-seed-{SEED}"),
    pytest.param(tuple(p for p in ALL_FAULT_POINTS if p not in DRAWN), id="every-other-point",
                 marks=pytest.mark.extended),
]  # fmt: skip


@pytest.mark.parametrize("points", POINTS)
def test_a_join_killed_at_fault_points_commits_the_reference(
    spark: Any, local_workspace: Any, tmp_path: Path, request: Any, points: tuple[str, ...]
) -> None:
    inp = make_input(files=2 * len(points) + 4)  # a commit point may run the next epoch too
    local_workspace.put_files(inp.persons, "persons")
    local_workspace.put_files(inp.auctions, "auctions")
    body = join_spec_dict(local_workspace, "interval", "left")
    body["checkpoint"]["retained"] = 2  # every commit retires an epoch: retention runs
    for side, source in body["sources"].items():  # each side archives what it has read
        source["clean_source"] = {
            "mode": "archive",
            "archive_path": local_workspace.uri(f"{side}-read"),
        }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    run_epoch(rt, spark, max_units=1)
    lines = [f"points drawn with seed {SEED}: {', '.join(DRAWN)}"]
    for point in points:
        epoch = rt.repo.latest_epoch() + 1
        code = crash_step(rt, spark, spec_path, point, epoch, log=tmp_path / "cli.log")
        assert code == -signal.SIGKILL, (point, code, (tmp_path / "cli.log").read_text()[-3000:])
        run_epoch(rt, spark, max_units=1)  # recovers (or finishes the commit) and runs it
        assert rt.repo.checkpoint(epoch) is not None
        lines.append(f"{point:<26} epoch {epoch}: killed, recovered")
    run_until_drained(rt, spark, max_units=1)
    report(request.config, f"join under SIGKILLs ({len(points)} points)", lines)

    expected = reference(connect(inp), "interval", how="left")
    assert Counter(output_rows(spec)) == Counter(expected)
    late = committed_rows(spec, "late_records")
    assert Counter(r["side"] for r in late) == {"persons": 4, "auctions": 4}
    assert len(committed_rows(spec, "dead_letters")) == 2
    assert staged_keys(spec) == []
    for side, files in (("persons", inp.persons), ("auctions", inp.auctions)):
        archived = [i.key for i in local_workspace.store(f"{side}-read").list()]
        left = [i.key for i in local_workspace.store(side).list()]
        assert sorted(archived + left) == sorted(k for k, _ in files) and archived, side


NEXMARK_SEED = 8


@pytest.mark.extended
@pytest.mark.parametrize("query", ["q3", "q8", "q7_rows"])
def test_nexmark_joins_killed_at_random_points_equal_the_reference(
    spark: Any, con: Any, tmp_path: Path, request: Any, query: str
) -> None:
    """The shipped q3, q8 and full q7 (its second stage) over 1,000,000 events in epochs of
    142,858, SIGKILLed at three fault points drawn with a printed seed: the DuckDB reference."""
    points = random.Random(f"{NEXMARK_SEED}-{query}").sample(REACHED, 3)  # no clean_source
    if query == "q7_rows":
        run_until_drained(runtime(nexmark_spec(tmp_path, "q7")), spark, max_units=CUTS["seven"])
    spec = nexmark_spec(tmp_path, query, retained=2)
    spec_path = tmp_path / f"{query}.yaml"
    rt = runtime(spec)
    cap = CUTS["seven"]
    run_epoch(rt, spark, max_units=cap)
    lines = [f"seed {NEXMARK_SEED}-{query}: {', '.join(points)}"]
    for point in points:
        epoch = rt.repo.latest_epoch() + 1
        log = tmp_path / "cli.log"
        code = crash_step(rt, spark, spec_path, point, epoch, max_units=cap, log=log)
        assert code == -signal.SIGKILL, (point, code, log.read_text()[-3000:])
        run_epoch(rt, spark, max_units=cap)
        lines.append(f"{point:<26} epoch {epoch}: killed, recovered")
    run_until_drained(rt, spark, max_units=cap)
    report(request.config, f"nexmark {query} under SIGKILLs", lines)
    assert Counter(nexmark_rows(spec, query)) == Counter(NEXMARK_REFERENCES[query](con))
    assert staged_keys(spec) == []
