"""Pipelines for the ``sluice serve`` tests: spec files under a server's roots, and epochs
driven the way the DAG drives them (plan here, process on the server, commit here)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sluice.demo import render_click_files
from sluice.protocol import Runtime, commit_epoch, plan_epoch
from sluice.serve import ServeClient
from sluice.sinks.files import read_rows
from sluice.spec import PipelineSpec, parse_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import Workspace, click_reference, click_spec_dict, runtime
from tests.keyed.data import ROOT, cwa_files

CLICK_FILES = render_click_files(files=6, events_per_file=60, seed=31)
CLICK_REFERENCE = click_reference(CLICK_FILES)
SUMMARY_KEYS = {"pipeline", "epoch", "attempt", "stats", "spark_master",
                "spark_application_id", "executor_sluice"}  # fmt: skip


@dataclass
class Pipeline:
    spec: PipelineSpec
    path: Path  # the spec file the server loads
    rt: Runtime

    def epoch(self, client: ServeClient, run_id: str | None = None) -> dict[str, Any] | None:
        """One epoch as the DAG runs it: plan, process on the server, commit (None: no input)."""
        plan = plan_epoch(self.rt)
        if plan is None:
            return None
        summary = client.process(self.path, plan.epoch, run_id or f"test__{plan.epoch}")
        commit_epoch(self.rt, plan.epoch)
        return summary

    def drain(self, client: ServeClient) -> list[dict[str, Any]]:
        summaries = []
        while (summary := self.epoch(client)) is not None:
            summaries.append(summary)
        return summaries


def write_spec(folder: Path, body: dict[str, Any]) -> Pipeline:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{body['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body, origin=str(path))
    return Pipeline(spec, path, runtime(spec))


def click_pipeline(
    ws: Workspace, folder: Path, name: str = "clicks", files_per_epoch: int | None = 2
) -> Pipeline:
    """The click pipeline over :data:`CLICK_FILES` (6 files), two files per epoch."""
    ws.put_files(CLICK_FILES)
    body = click_spec_dict(ws, name=name)
    if files_per_epoch is not None:
        body["source"]["max_files_per_epoch"] = files_per_epoch
    return write_spec(folder, body)


# CountWindowAverage that can be held inside its Spark job: while ``hold`` exists, the call for
# key 1 marks ``entered`` and waits (a process function runs in Spark's Python workers, so the
# attempt is then inside a running Spark job). One key only: a held task keeps its task slot,
# and the server's other pipelines need one.
GATED = """
import time
from pathlib import Path

HOLD = Path({hold!r})
ENTERED = Path({entered!r})


def flat_map(ctx, records):
    if ctx.key == 1 and HOLD.exists():
        ENTERED.touch()
        deadline = time.monotonic() + 600
        while HOLD.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    total = ctx.state("sum")
    for record in ctx.each(records):
        current = total.value() or {{"count": 0, "sum": 0}}
        current = {{"count": current["count"] + 1, "sum": current["sum"] + int(record.value)}}
        total.update(current)
        if current["count"] >= 2:
            yield {{"key": ctx.key, "average": current["sum"] // current["count"]}}
            total.clear()
"""


@dataclass
class Gate:
    hold: Path
    entered: Path

    def close(self) -> None:
        self.entered.unlink(missing_ok=True)
        self.hold.touch()

    def open(self) -> None:
        self.hold.unlink(missing_ok=True)


def gated_pipeline(folder: Path, name: str = "gated") -> tuple[Pipeline, Gate]:
    """count_window_average over its 5 files (two epochs), with a :class:`Gate`."""
    data = folder / "data"
    (data / "in").mkdir(parents=True, exist_ok=True)
    for file_name, text in cwa_files():
        (data / "in" / file_name).write_text(text + "\n")
    gate = Gate(folder / "hold", folder / "entered")
    (folder / "gated.py").write_text(GATED.format(hold=str(gate.hold), entered=str(gate.entered)))
    body = yaml.safe_load((ROOT / "include/pipelines/count_window_average.yaml").read_text())
    text = json.dumps(body).replace(
        "${SLUICE_DATA:-${SLUICE_DATA_ROOT:-data}/count_window_average}", str(data)
    )
    body = {**json.loads(text), "name": name}
    body["process"]["function"] = "gated:flat_map"
    body["source"]["max_files_per_epoch"] = 3
    return write_spec(folder, body), gate


def averages(spec: PipelineSpec) -> Counter[tuple[int, int]]:
    rows = read_rows(open_store(spec.sinks[0].path), "parquet")
    return Counter((r["key"], r["average"]) for r in rows)
