"""sluice.state: incremental state (a base and deltas) and its compaction.

The same input through the same window, cut into epochs differently and compacted at
different points, commits exactly the reference's output, counts the same open windows, and
survives a SIGKILL at the end of a compaction and one in the middle of writing the new base.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.contracts.layout import state_epoch_of
from sluice.demo import render_click_files
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows

FILES = render_click_files(files=8, events_per_file=60, seed=31)
REFERENCE = click_reference(FILES)
WINDOWS = {
    "tumbling": {"type": "tumbling", "size": "1m"},
    "session": {"type": "session", "gap": "20s"},
}
TIMEOUT_S = 600


def _body(ws: Any, compact_every: int, window: str = "tumbling") -> dict[str, Any]:
    body = click_spec_dict(ws)
    body["window"] = dict(WINDOWS[window])
    body["checkpoint"] = {"storage": ws.uri("ckpt"), "compact_every": compact_every}
    return body


def _open_windows(rt: Any) -> list[int]:
    return [rt.repo.checkpoint(e).result.stats.windows_open for e in rt.repo.committed_epochs()]


def _workspace(tmp_path: Path, name: str) -> Workspace:
    ws = Workspace("local", (tmp_path / name).as_uri())
    ws.put_files(FILES)
    return ws


@pytest.mark.parametrize("compact_every", [1, 3])
def test_compaction_changes_no_output_and_no_count(
    spark: Any, tmp_path: Path, compact_every: int
) -> None:
    """One file per epoch: bases every ``compact_every`` deltas against no compaction at all
    (one long chain of deltas); both equal the reference, window for window, and report the
    same open windows after every epoch."""
    spec = parse_spec(_body(_workspace(tmp_path, "compacted"), compact_every))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1)
    assert_click_output_exact(spec, REFERENCE)
    kinds = [
        [p.kind for p in rt.repo.checkpoint(e).result.state.parts]
        for e in rt.repo.committed_epochs()
    ]
    assert any(k == ["base"] for k in kinds[1:]), kinds  # compaction happened
    assert max(len(k) for k in kinds) <= compact_every + 1, kinds  # and bounds the chain

    chain = runtime(parse_spec(_body(_workspace(tmp_path, "chain"), 100)))
    run_until_drained(chain, spark, max_units=1)
    assert _open_windows(chain) == _open_windows(rt)
    assert _open_windows(rt)[-1] == len(REFERENCE.open_windows)


def test_sessions_across_compaction_equal_one_epoch(spark: Any, tmp_path: Path) -> None:
    """Sessions keep fragments in deltas and fold them at every read; a base keeps one row per
    open session. Random cuts with a base every 2 deltas commit exactly what one epoch over
    the whole input commits (tests/integration/test_windows.py checks sessions against an
    independent reference), and count the same open sessions."""
    spec = parse_spec(_body(_workspace(tmp_path, "cut"), 2, "session"))
    rt = runtime(spec)
    for units in (1, 3, 1, 2):
        run_until_drained(rt, spark, max_units=units, max_epochs=1)
    run_until_drained(rt, spark, max_units=1)
    whole = parse_spec(_body(_workspace(tmp_path, "whole"), 2, "session"))
    one = runtime(whole)
    run_until_drained(one, spark)
    assert one.repo.latest_epoch() == 1 and rt.repo.latest_epoch() == 5
    keys = ["user", "window_start", "window_end"]
    assert compare_rows(committed_rows(spec, "out"), committed_rows(whole, "out"), keys=keys) == []
    assert _open_windows(rt)[-1] == _open_windows(one)[-1]
    assert any(len(rt.repo.checkpoint(e).result.state.parts) > 1 for e in range(1, 6))


def test_a_sigkill_after_compaction_wrote_the_base_then_resume(spark: Any, tmp_path: Path) -> None:
    """The process dies once the new base is written, before its attempt is PREPARED: the
    retry writes another base; the dead one's files are removed by recovery."""
    body = _body(_workspace(tmp_path, "ws"), 2)
    spec = parse_spec(body)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=2)  # a delta, then a second one
    assert crash_step(rt, spark, path, "state.after_compaction", 3) == -signal.SIGKILL
    run_until_drained(rt, spark, max_units=1)
    assert_click_output_exact(spec, REFERENCE)
    _only_committed_state(rt)


def test_a_sigkill_while_spark_writes_the_new_base(spark: Any, tmp_path: Path) -> None:
    """``sluice run`` is killed (process group, JVM included) as soon as Spark starts writing
    a base: in the middle of compaction's job. Resumed, the output is exactly the reference
    and no part of the killed attempt's base is read or kept."""
    body = _body(_workspace(tmp_path, "ws"), 2)
    spec = parse_spec(body)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body))
    rt = runtime(spec)
    run_until_drained(rt, spark, max_units=1, max_epochs=2)  # two deltas: epoch 3 compacts
    env = {**os.environ, "SLUICE_SPARK_MASTER": "local[1]", "COLUMNS": "300"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice.cli", "run", str(path), "--quiet", "--max-files", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    state = tmp_path / "ws" / "ckpt" / spec.name / "state"
    deadline = time.monotonic() + TIMEOUT_S
    while not any(state.glob("000000000003-*")):  # epoch 3 compacts: its base is being written
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, "epoch 3 never started writing its state"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=TIMEOUT_S)

    run_until_drained(rt, spark, max_units=1)
    assert_click_output_exact(spec, REFERENCE)
    _only_committed_state(rt)
    assert staged_keys(spec) == []


def _only_committed_state(rt: Any) -> None:
    """Every state folder on disk belongs to a committed epoch's winning attempt."""
    winners = {f"{e:012d}-{rt.repo.checkpoint(e).attempt}" for e in rt.repo.committed_epochs()}
    folders = {i.key.split("/")[1] for i in rt.repo.store.list("state/") if state_epoch_of(i.key)}
    assert folders <= winners, folders - winners
