"""A stateless pipeline is exactly-once too: SIGKILLed in a real ``sluice`` subprocess at a
process and at a commit fault point, then resumed, it commits exactly the reference — no
record lost or written twice, every dead letter once, nothing left staged."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from sluice.protocol import run_until_drained
from sluice.spec import parse_spec

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import committed_rows, runtime, staged_keys
from tests.stateless.data import OUTPUT, make_items, normalised, reference, render_jsonl, spec_body


def test_a_sigkill_in_process_and_in_commit_then_resume(spark: Any, tmp_path: Path) -> None:
    written = render_jsonl(make_items(files=3), tmp_path / "in")
    body = spec_body(tmp_path)
    body["source"]["max_files_per_epoch"] = 1
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    log = tmp_path / "cli.log"
    run_until_drained(rt, spark, max_units=1, max_epochs=1)
    # epoch 2 dies between publishing one sink and the others (the next plan finishes its
    # commit); epoch 3 with its output staged (the resume aborts it and processes again)
    for point, epoch in (("commit.mid_sinks", 2), ("process.after_prepare", 3)):
        code = crash_step(rt, spark, spec_path, point, epoch, log=log)
        assert code == -signal.SIGKILL, (point, code, log.read_text()[-3000:])
        assert (rt.repo.checkpoint(epoch) is not None) == point.startswith("commit")
    assert rt.repo.sinks_committed(2) is not None
    run_until_drained(rt, spark, max_units=1)
    assert rt.repo.latest_epoch() == len(written)

    ref = reference(written, OUTPUT)
    rows = [tuple(normalised(r[c]) for c in OUTPUT) for r in committed_rows(spec, "out")]
    assert [r for r, n in Counter(rows).items() if n > 1] == []
    assert sorted(rows) == sorted(ref.rows)
    dead = [(d["file"], d["line"], d["reason_code"]) for d in committed_rows(spec, "dead_letters")]
    assert sorted(dead) == sorted(ref.dead)
    assert staged_keys(spec) == []
    stats = [rt.repo.checkpoint(e).result.stats for e in rt.repo.committed_epochs()]
    assert sum(s.records_read for s in stats) == ref.read  # every line read once
