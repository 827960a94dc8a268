"""Rewinds against real servers, with a crash in the middle (issue #7's acceptance).

The crash matrix's pipeline (tests/faults/test_sink_matrix.py) writes its window results
(``emit: on_update``, so windows are updated over several epochs) to three upsert sinks —
files on S3 (SeaweedFS), a PostgreSQL table and a Delta table on S3 — its late records to a
PostgreSQL append table and its dead letters to a Delta append table. It runs uninterrupted
over 3 epochs (2 files each); what every sink holds after epoch 2 and after epoch 3 is kept.

Then ``sluice run --restore-from checkpoint --epoch 1`` (a subprocess) rewinds: epoch 4
replays files 3-4 from checkpoint 1 and is SIGKILLed at ``commit.mid_sinks`` — the first sink
has committed (retracted epochs 2-3 and published epoch 4), the others have not. Each case puts
a different sink first, so each of files, PostgreSQL and Delta is the one caught in the middle.
Recovery finishes epoch 4's commit: every sink then equals the uninterrupted run after epoch 2
(the rewound output is gone, the replacement is there, nothing twice). The rest of the replay
(epoch 5) brings every sink back to the uninterrupted run after epoch 3.

make chaos runs the three cases (~4-7 min each); make test rewinds in-process
(tests/protocol/test_rewind.py) and through Airflow is make chaos too (test_server's rewind).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.protocol import recover, run_until_drained
from sluice.spec import parse_spec

from tests.faults.test_sink_matrix import FILES, FILES_PER_EPOCH, Outputs, _spec
from tests.faults.test_sink_matrix import s3_root as s3_root
from tests.faults.test_sink_matrix import warehouse as warehouse
from tests.fixtures.pipelines import Workspace, runtime

ORDERS = [
    pytest.param(("files", "postgres", "delta"), id="files-first", marks=pytest.mark.slow),
    pytest.param(("postgres", "delta", "files"), id="postgres-first", marks=pytest.mark.slow),
    pytest.param(("delta", "files", "postgres"), id="delta-first", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("order", ORDERS)
def test_rewind_with_a_crash_mid_commit_equals_the_uninterrupted_run(
    spark: Any,
    s3_root: Callable[[], Workspace],
    warehouse: str,
    tmp_path: Path,
    order: tuple[str, ...],
) -> None:
    tag = f"rw_{uuid.uuid4().hex[:6]}"
    ws = s3_root()
    ws.put_files(FILES)
    body = _spec(ws, tag, 2)
    by_name = {s["name"]: s for s in body["sinks"]}
    body["sinks"] = [by_name[name] for name in order]
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    outputs = Outputs(spark, ws, tag, warehouse)
    rt = runtime(parse_spec(body))

    run_until_drained(rt, spark, max_epochs=2)
    after_two = outputs.read()
    run_until_drained(rt, spark)
    after_three = outputs.read()
    assert rt.repo.latest_epoch() == len(FILES) // FILES_PER_EPOCH == 3
    for sink in ("files", "postgres", "delta"):
        assert after_two[sink] != after_three[sink], f"{sink}: epoch 3 changed nothing"
    assert sum(after_three["late→postgres"].values()) > sum(after_two["late→postgres"].values())

    proc = _rewind_and_crash(spec_path)
    assert proc.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at commit.mid_sinks, got rc={proc.returncode}\n{proc.stderr[-3000:]}"
    )
    assert "epoch 4 rewinds to checkpoint 1" in proc.stdout
    assert rt.repo.checkpoint(4) is not None and rt.repo.sinks_committed(4) is None
    midway = outputs.read()
    first = order[0]
    assert midway[first] == after_two[first], f"{first} committed epoch 4 with its retraction"
    for sink in order[1:]:
        assert midway[sink] == after_three[sink], f"{sink} is untouched before its commit"

    recover(rt)  # what any next step does first: finish epoch 4's commit
    assert outputs.read() == after_two
    run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == 5
    assert outputs.read() == after_three
    assert outputs.leftovers() == {"files": 0, "postgres": 0, "delta": 0}


def _rewind_and_crash(spec_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # AWS_* (s3_server) and SLUICE_CONN_* (warehouse) are here
    env.update(SLUICE_FAULT="commit.mid_sinks", SLUICE_FAULT_EPOCH="4",
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="500")  # fmt: skip
    command = [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet",
               "--restore-from", "checkpoint", "--epoch", "1"]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900,
                          check=False)  # fmt: skip
