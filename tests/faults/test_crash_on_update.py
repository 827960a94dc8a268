"""Crash recovery with ``emit: on_update``: SIGKILL a real ``sluice run`` at every fault point
of a session-window pipeline that writes an upsert sink, resume, and compare the upsert table
with the uninterrupted run's — row for row.

Session windows are the hardest case for an upsert sink: an epoch can grow a session (its
bounds change), merge two sessions through an allowed-late record, and must delete the rows
it replaces. A crash between writing those rows and the checkpoint must neither lose a delete
nor keep a stale row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.protocol import FAULT_POINTS, run_until_drained
from sluice.sinks.files import read_rows, read_upsert
from sluice.spec import parse_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import click_spec_dict, runtime, staged_keys

FILES = render_click_files(files=6, events_per_file=80, seed=5)
FILES_PER_EPOCH = 2
CRASH_EPOCH = 2
KEYS = ["user", "window_start", "window_end"]


def _spec_body(workspace: Any, name: str) -> dict[str, Any]:
    body = click_spec_dict(workspace, name=name)
    body["source"]["max_files_per_epoch"] = FILES_PER_EPOCH
    body["event_time"] = {"column": "ts", "max_out_of_orderness": "5s", "allowed_lateness": "30s"}
    body["window"] = {"type": "session", "gap": "20s"}
    body["emit"] = "on_update"
    body["aggregates"] = {
        "clicks": "count(*)",
        "total": "sum(amount)",
        "pages": "count_distinct(url)",
        "first_url": "first(url)",
    }
    body["sinks"][0]["mode"] = "upsert"
    return body


def _table(spec: Any) -> list[dict[str, Any]]:
    sink = spec.sinks[0]
    return sorted(read_upsert(open_store(sink.path), sink.format, KEYS), key=_order)


def _order(row: dict[str, Any]) -> tuple[str, str, str]:
    return (str(row["user"]), str(row["window_start"]), str(row["window_end"]))


@pytest.fixture(scope="module")
def uninterrupted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    from tests.fixtures.pipelines import Workspace

    ws = Workspace("local", tmp_path_factory.mktemp("clean").as_uri())
    ws.put_files(FILES)
    spec = parse_spec(_spec_body(ws, "clean"))
    run_until_drained(runtime(spec), spark)
    table = _table(spec)
    # The run exercised what this test is about: sessions replaced by later epochs.
    changelog = read_rows(open_store(spec.sinks[0].path), spec.sinks[0].format)
    assert any(r["_op"] == "delete" for r in changelog), "no session was ever replaced"
    assert len({r["_epoch"] for r in changelog}) == len(FILES) // FILES_PER_EPOCH
    return table


# make test runs the commit's middle; make chaos runs the rest
# (each case is a new JVM: ~30 s).
IN_DEFAULT_SUITE = {"commit.mid_sinks"}
CASES = [
    pytest.param(point, marks=[] if point in IN_DEFAULT_SUITE else [pytest.mark.slow])
    for point in FAULT_POINTS
]


@pytest.mark.parametrize("point", CASES)
def test_sigkill_then_resume_leaves_the_upsert_table_of_the_uninterrupted_run(
    spark: Any, local_workspace: Any, tmp_path: Path, point: str, uninterrupted: Any
) -> None:
    local_workspace.put_files(FILES)
    body = _spec_body(local_workspace, "crashed")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)

    env = dict(os.environ)
    env.update(SLUICE_FAULT=point, SLUICE_FAULT_EPOCH=str(CRASH_EPOCH),
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="500")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at {point}, got rc={proc.returncode}\n{proc.stderr[-3000:]}"
    )
    rt = runtime(spec)
    run_until_drained(rt, spark)

    assert rt.repo.latest_epoch() == len(FILES) // FILES_PER_EPOCH
    assert staged_keys(spec) == []
    # Exactly one committed changelog per epoch: a replayed epoch never adds a second one.
    changelog = read_rows(open_store(spec.sinks[0].path), spec.sinks[0].format)
    per_epoch: dict[int, int] = {}
    for row in changelog:
        per_epoch[row["_epoch"]] = per_epoch.get(row["_epoch"], 0) + 1
    assert sorted(per_epoch) == list(range(1, rt.repo.latest_epoch() + 1))
    assert _table(spec) == uninterrupted
