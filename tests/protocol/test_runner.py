"""run_until_drained with a function that starts Spark: started once, at the first epoch with
something to process, and never when nothing is new (``sluice run`` on drained input answers
without a JVM)."""

from __future__ import annotations

from typing import Any

from sluice.demo import render_click_files
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.pipelines import click_reference, click_spec_dict, committed_rows, runtime
from tests.reference import compare_rows

FILES = render_click_files(files=3, events_per_file=20, seed=5)


def test_spark_starts_at_the_first_epoch_with_input_and_not_when_drained(
    spark: Any, local_workspace: Any
) -> None:
    local_workspace.put_files(FILES[:2])
    body = click_spec_dict(local_workspace)
    body["source"]["max_files_per_epoch"] = 1
    spec = parse_spec(body)
    rt = runtime(spec)
    starts: list[int] = []

    def start() -> Any:
        starts.append(1)
        return spark

    assert len(run_until_drained(rt, start)) == 2
    assert starts == [1]  # two epochs, one start
    assert run_until_drained(rt, start) == []
    assert starts == [1]  # drained: never called
    local_workspace.put_files(FILES[2:])
    assert len(run_until_drained(rt, start)) == 1
    assert starts == [1, 1]
    reference = click_reference(FILES)
    out = committed_rows(spec, "out")
    assert compare_rows(out, reference.emitted, keys=["user", "window_start"]) == []
