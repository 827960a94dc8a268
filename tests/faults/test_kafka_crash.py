"""Crash recovery with the kafka source and a real broker (issue #8's acceptance).

A topic of 3 partitions holds half of the click events; ``sluice run`` (a subprocess, epochs of
at most 50 records) is SIGKILLed at a fault point of epoch 2. The other half and a flush
record per partition are produced while the pipeline is down; the pipeline then resumes
in-process and drains the topic. At qos 2 the committed windows equal the reference over
everything produced, and every offset of every partition was read into a committed epoch
exactly once (the epochs' ranges are disjoint and cover the topic). make chaos runs every fault
point (about 2 min each); make test covers the kafka source in tests/sources/test_kafka_source.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.protocol import FAULT_POINTS, run_until_drained
from sluice.spec import parse_spec

from tests.fixtures.kafka import KafkaServer
from tests.fixtures.pipelines import click_reference, committed_rows, runtime
from tests.reference import compare_rows
from tests.sources.test_kafka_source import FILES, KEYS, _flush, _records, _spec_dict

CASES = [pytest.param(point, id=point, marks=[pytest.mark.slow]) for point in FAULT_POINTS]


@pytest.mark.parametrize("point", CASES)
def test_crash_at_a_fault_point_then_resume_reads_every_record_once(
    spark: Any, local_workspace: Any, kafka_server: KafkaServer, tmp_path: Path, point: str
) -> None:
    topic = kafka_server.create_topic(f"crash-{uuid.uuid4().hex[:6]}", partitions=3)
    body = _spec_dict(local_workspace, kafka_server, topic, max_records_per_epoch=50)
    spec = parse_spec(body)
    produced = kafka_server.produce(topic, _records(FILES[:2]))
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))

    env = dict(os.environ, SLUICE_FAULT=point, SLUICE_FAULT_EPOCH="2",
               SLUICE_SPARK_MASTER="local[1]", COLUMNS="500")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "run", str(spec_path), "--quiet"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr[-3000:])

    produced += kafka_server.produce(topic, _records(FILES[2:]))
    flush, flush_file = _flush(3)
    produced += kafka_server.produce(topic, flush)
    rt = runtime(spec)
    run_until_drained(rt, spark)

    seen: list[tuple[str, int, int]] = []
    for epoch in rt.repo.committed_epochs():
        rng = rt.source.decode_range(rt.repo.checkpoint(epoch).plan.source_range)  # type: ignore[union-attr]
        seen += [(t, p, o) for t, ps in rng.starts.items() for p, lo in ps.items()
                 for o in range(lo, rng.ends[t][p])]  # fmt: skip
    assert sorted(seen) == sorted((topic, w.partition, w.offset) for w in produced)
    records = sum(rt.repo.checkpoint(e).result.stats.records_read  # type: ignore[union-attr]
                  for e in rt.repo.committed_epochs())  # fmt: skip
    assert records == len(produced)
    want = click_reference([*FILES, flush_file])
    assert compare_rows(committed_rows(spec, "out"), want.emitted, keys=KEYS) == []
    assert len(committed_rows(spec, "dead_letters")) == len(want.dead)
