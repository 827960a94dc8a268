"""make chaos: 150 epochs (two pipelines taking turns, 75 each) through one server. The driver
heap after a full GC, the JVM's threads and the server's Python threads stop growing once the
run has warmed up, and both outputs are exactly their references.

"Warmed up" takes a while: the heap after GC grows fast for the first ~25 epochs of each
pipeline, then slowly (measured on 2 cores, 1 GiB driver heap: 295, 551, 586, 605, 651 MiB
after 10, 25, 38, 50, 75 epochs each, i.e. about 0.6 MiB per epoch after 38). The same growth
shows in one in-process session (``sluice run``), so it is the engine's and Spark's, not the
server's: a heap dump finds each epoch's broadcast hash relations (a 4-8 MiB Tungsten page each,
however few rows) still held through recent executed AQE plans. The test bounds the second half
of the run against the first half's end, and the heap against its maximum.

The JVM's thread count grows too (634 to 963 over the run), the same in-process: idle threads
of Spark's cached pools (``ResultQueryStageExecution``, ``shuffle-exchange``,
``broadcast-exchange``; 60 s keep-alive, bounded). The threads a server could leak per request
are Python threads and Py4J's (``Thread-N``): those must stay flat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.demo import render_click_files

from tests.fixtures.pipelines import (
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
)
from tests.fixtures.serve import ServeProcess
from tests.serve.pipelines import write_spec

EPOCHS_EACH = 75
SAMPLES = (10, 25, 38, 50, 75)  # epochs each after which the heap is measured
MIDDLE = 38
MiB = 1 << 20


@pytest.mark.slow
def test_a_long_run_does_not_grow_the_driver(serve_server: ServeProcess, tmp_path: Path) -> None:
    client = serve_server.client()
    pipelines, references = [], []
    for n in range(2):
        files = render_click_files(files=EPOCHS_EACH, events_per_file=6, seed=40 + n)
        ws = Workspace("local", (tmp_path / f"ws{n}").as_uri())
        ws.put_files(files)
        body = click_spec_dict(ws, name=f"long_{n}")
        body["source"]["max_files_per_epoch"] = 1
        body["checkpoint"]["retained"] = 3
        pipelines.append(write_spec(tmp_path / "specs", body))
        references.append(click_reference(files))

    samples: list[dict[str, Any]] = []
    for epoch in range(1, EPOCHS_EACH + 1):
        for pipeline in pipelines:
            assert pipeline.epoch(client) is not None
        if epoch in SAMPLES:
            health = client.health(gc=True, threads=True)
            max_heap = health["driver_heap"]["max_bytes"]
            groups = health["jvm_thread_groups"]
            samples.append({
                "epoch": epoch, "heap": health["driver_heap"]["used_bytes"],
                "jvm_threads": health["jvm_threads"], "py4j": groups.get("Thread-N", 0),
                "python_threads": health["python_threads"], "groups": groups,
            })  # fmt: skip
    for s in samples:
        print(
            f"after {s['epoch']:3d} epochs each: heap {s['heap'] / MiB:7.1f} MiB, "
            f"{s['jvm_threads']} JVM threads ({s['py4j']} Thread-N), "
            f"{s['python_threads']} Python threads; {s['groups']}"
        )

    middle = next(s for s in samples if s["epoch"] == MIDDLE)
    last = samples[-1]
    assert last["heap"] <= middle["heap"] * 1.10 + 48 * MiB, samples
    assert last["heap"] < 0.85 * max_heap, (samples, max_heap)
    assert last["py4j"] <= middle["py4j"] + 10, samples
    assert last["python_threads"] <= middle["python_threads"] + 2, samples
    for pipeline, reference in zip(pipelines, references, strict=True):
        assert pipeline.epoch(client) is None
        assert_click_output_exact(pipeline.spec, reference)
