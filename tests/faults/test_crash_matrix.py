"""The crash matrix at its fast size: one pipeline, a SIGKILL at every named fault point.

One qos-2 pipeline (one input file per epoch, ``checkpoint.retained: 3`` so every commit
retires an epoch and reaches the retention points) lives through every point in turn: the
step holding the point runs in a ``sluice`` subprocess that dies there (tests/faults/
crashing.py), then the next epoch runs in-process and recovers. At the end the output equals
the independent reference of the whole input, no window is duplicated, every input line was
read exactly once by the committed checkpoints, and nothing is left staged.

make test kills it at one point of each step (plan, process, commit, retention, compaction);
make test-extended at every other point, on a pipeline of its own (the in-memory protocol
suite, tests/protocol/memory, kills at every point in make test). Every point on both
backends, each from a fresh pipeline, is test_crash_recovery.py (make chaos); every sink at
every qos level is test_sink_matrix.py (make sink-matrix).
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.protocol import ALL_FAULT_POINTS, run_epoch, run_until_drained
from sluice.protocol.faults import COMPACTION_FAULT_POINTS
from sluice.spec import parse_spec

from tests.faults.conftest import report
from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import (
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.reference import compare_rows, row_key

FILES = render_click_files(files=2 * len(ALL_FAULT_POINTS) + 4, events_per_file=30, seed=31)
REFERENCE = click_reference(FILES)
KEYS = ["user", "window_start"]
COMPACT_EVERY = 2  # the state is rewritten as a base after every 2 deltas
# one fault point of each protocol step: make test
ONE_PER_STEP = (
    "plan.after_write",
    "process.after_state",
    "commit.mid_sinks",
    "retention.mid_delete",
    "state.after_compaction",
)
POINTS = [
    pytest.param(ONE_PER_STEP, id="one-point-per-step"),
    pytest.param(tuple(p for p in ALL_FAULT_POINTS if p not in ONE_PER_STEP),
                 id="every-other-point", marks=pytest.mark.extended),
]  # fmt: skip


def _files_left_in_staging(spec: Any) -> list[str]:
    """Every file under a sink's ``_staging/`` folder on disk, hidden ones included (the
    store's listing skips those)."""
    left = []
    for sink in (*spec.sinks, spec.late_records, spec.dead_letters):
        folder = Path(urlparse(sink.path).path) / "_staging"
        left += [str(p) for p in folder.rglob("*") if p.is_file()] if folder.exists() else []
    return left


def _compacts_next(rt: Any) -> bool:
    """Whether the next epoch writes its state as a new base (after COMPACT_EVERY deltas)."""
    state = rt.repo.checkpoint(rt.repo.latest_epoch()).result.state
    return sum(1 for p in state.parts if p.kind == "delta") >= COMPACT_EVERY


@pytest.mark.parametrize("points", POINTS)
def test_a_sigkill_at_each_fault_point_of_one_pipeline(
    spark: Any, local_workspace: Any, tmp_path: Path, request: Any, points: tuple[str, ...]
) -> None:
    local_workspace.put_files(FILES)
    body = click_spec_dict(local_workspace, name="matrix")
    body["source"]["max_files_per_epoch"] = 1
    # read files are archived once no kept checkpoint can replay them: every commit reaches
    # the release points
    body["source"]["clean_source"] = {
        "mode": "archive",
        "archive_path": local_workspace.uri("archive"),
    }
    body["checkpoint"]["retained"] = 3
    body["checkpoint"]["compact_every"] = COMPACT_EVERY
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    stats: dict[int, Any] = {}

    def collect() -> None:  # before retention deletes them
        for e in rt.repo.committed_epochs():
            stats.setdefault(e, rt.repo.checkpoint(e).result.stats)

    run_until_drained(rt, spark, max_epochs=3, max_units=1, on_epoch=lambda _: collect())
    lines = []
    for point in points:
        while point in COMPACTION_FAULT_POINTS and not _compacts_next(rt):
            run_epoch(rt, spark, max_units=1)
            collect()
        epoch = rt.repo.latest_epoch() + 1
        code = crash_step(rt, spark, spec_path, point, epoch, log=tmp_path / "cli.log")
        assert code == -signal.SIGKILL, (point, code, (tmp_path / "cli.log").read_text()[-3000:])
        committed = rt.repo.checkpoint(epoch) is not None
        outcome = run_epoch(rt, spark, max_units=1)  # recovers, then the next epoch
        assert outcome is not None
        collect()
        state = "committed" if committed else "not committed"
        lines.append(f"{point:<26} epoch {epoch}: killed ({state}); the resume committed "
                     f"epoch {outcome.checkpoint.epoch}")  # fmt: skip
    run_until_drained(rt, spark, max_units=1, on_epoch=lambda _: collect())
    report(request.config, f"crash matrix, fast size (one pipeline, {len(points)} points)", lines)

    out = committed_rows(spec, "out")
    archived = sorted(i.key for i in local_workspace.store("archive").list())
    assert archived == [k for k, _ in FILES][: len(archived)] and len(archived) >= len(FILES) - 3
    assert [k for k, n in Counter(row_key(r, KEYS) for r in out).items() if n > 1] == []
    assert compare_rows(out, REFERENCE.emitted, keys=KEYS) == []
    late = [(r["source_file"], r["source_line"]) for r in committed_rows(spec, "late_records")]
    assert sorted(late) == sorted(REFERENCE.late)
    dead = [(r["file"], r["line"], r["reason_code"]) for r in committed_rows(spec, "dead_letters")]
    assert sorted(dead) == sorted(REFERENCE.dead)
    assert staged_keys(spec) == []
    assert _files_left_in_staging(spec) == []  # on disk: Spark's hidden .crc files included
    assert sorted(stats) == list(range(1, rt.repo.latest_epoch() + 1))
    assert sum(s.records_read for s in stats.values()) == REFERENCE.records_read
    assert all(s.records_read == s.accepted + s.late + s.dead + s.filtered for s in stats.values())
    assert len(rt.repo.committed_epochs()) <= 3  # retention ran through its fault points
