"""Files as other systems land them: random ``part-<uuid>`` names over several epochs, a name
that sorts before every other one landing late, two writers landing into one prefix at once —
every record exactly once, on local disk and on SeaweedFS S3; the same with a SIGKILL at every
fault point of plan, process and commit, and with a rewind to epoch 2 replayed to the end.

The reference is computed independently over the whole input in one go, in the order the
source read the files (lateness depends on it): the epochs' plans, each checked to hold the
files that had landed and were unread, in (modification time, name) order.
"""

from __future__ import annotations

import random
import signal
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.demo import render_click_files
from sluice.protocol import FAULT_POINTS, RunRequest, run_epoch, run_until_drained
from sluice.spec import parse_spec

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import (
    LOCAL_NOW_S3_EXTENDED,
    Workspace,
    assert_click_output_exact,
    click_reference,
    click_spec_dict,
    new_workspace,
    runtime,
)

SEED = 47
# make test kills one point of each step; the rest of the points in make test-extended
ONE_PER_STEP = ("plan.before_write", "process.after_prepare", "commit.after_checkpoint")
POINTS = [
    pytest.param(p, marks=() if p in ONE_PER_STEP else pytest.mark.extended) for p in FAULT_POINTS
]


def landing_files(count: int, seed: int = SEED) -> list[tuple[str, bytes]]:
    """``count`` files of clicks (late and malformed lines among them) named as Spark and
    Flink name their output, ``part-<uuid>-c000.jsonl``, in landing order."""
    rng = random.Random(seed)
    files = render_click_files(files=count, events_per_file=40, seed=seed)
    names = [f"part-{uuid.UUID(int=rng.getrandbits(128))}-c000.jsonl" for _ in files]
    return [(name, body) for name, (_, body) in zip(names, files, strict=True)]


def read_order(rt: Any) -> list[str]:
    """The files every committed epoch read, epoch after epoch (a rewind's epochs too)."""
    order: list[str] = []
    for epoch in rt.repo.committed_epochs():
        checkpoint = rt.repo.checkpoint(epoch)
        order += checkpoint.plan.source_range["files"]
    return order


def assert_plans_take_what_landed_in_order(rt: Any, ws: Workspace) -> None:
    """Each plan reads files in (modification time, name) order (the store's listing)."""
    modified = {i.key: i.modified_ns for i in ws.store("in").list()}
    for epoch in rt.repo.committed_epochs():
        files = rt.repo.checkpoint(epoch).plan.source_range["files"]
        assert files == sorted(files, key=lambda k: (modified[k], k.encode())), epoch


def reference_in_read_order(rt: Any, files: list[tuple[str, bytes]]) -> Any:
    body = dict(files)
    order = read_order(rt)
    assert sorted(order) == sorted(body), "every landed file read exactly once"
    return click_reference([(k, body[k]) for k in order], read_order=True)


@pytest.fixture(params=LOCAL_NOW_S3_EXTENDED)
def landing(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    return new_workspace(request, tmp_path)


def test_random_names_land_over_epochs_and_every_record_is_read_once(
    spark: Any, workspace: Workspace
) -> None:
    ws = workspace
    files = landing_files(14)
    early = ("part-00000000-0000-0000-0000-000000000000-c000.jsonl", files[9][1])
    batches = [files[0:3], files[3:5], [*files[5:9], early], files[10:12], files[12:14]]
    spec = parse_spec(click_spec_dict(ws))
    rt = runtime(spec)
    for batch in batches:
        ws.put_files(batch)
        outcome = run_epoch(rt, spark)
        assert outcome is not None
        assert sorted(outcome.checkpoint.plan.source_range["files"]) == sorted(k for k, _ in batch)
    assert run_epoch(rt, spark) is None
    assert rt.repo.latest_epoch() == 5
    assert_plans_take_what_landed_in_order(rt, ws)
    everything = [f for batch in batches for f in batch]
    assert_click_output_exact(spec, reference_in_read_order(rt, everything))


def test_two_writers_landing_at_once_while_epochs_run(spark: Any, workspace: Workspace) -> None:
    ws = workspace
    files = landing_files(16, seed=SEED + 1)
    spec = parse_spec(click_spec_dict(ws, source={**click_spec_dict(ws)["source"],
                                                  "max_files_per_epoch": 3}))  # fmt: skip
    rt = runtime(spec)
    landed = threading.Barrier(3)

    def writer(mine: list[tuple[str, bytes]]) -> None:
        store = ws.store("in")
        landed.wait()
        for key, body in mine:
            store.put(key, body)  # atomic: a reader sees all of it or nothing

    threads = [threading.Thread(target=writer, args=(files[i::2],)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    landed.wait()
    while any(t.is_alive() for t in threads):
        run_epoch(rt, spark)
    for thread in threads:
        thread.join()
    run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() >= 6  # 16 files, 3 an epoch
    assert_plans_take_what_landed_in_order(rt, ws)
    assert_click_output_exact(spec, reference_in_read_order(rt, files))


def test_a_rewind_to_epoch_2_replays_to_the_end_exactly(spark: Any, landing: Workspace) -> None:
    ws = landing
    files = landing_files(8, seed=SEED + 2)
    spec = parse_spec(click_spec_dict(ws, emit="on_close"))
    rt = runtime(spec)
    for batch in (files[0:2], files[2:4], files[4:6], files[6:8]):
        ws.put_files(batch)
        assert run_epoch(rt, spark) is not None
    request = RunRequest.from_conf(rt.name, {"restore_from": "checkpoint", "epoch": 2})
    plan = request.resolve(rt).plan(rt)
    assert plan is not None and plan.epoch == 5
    assert sorted(plan.source_range["files"]) == sorted(k for k, _ in files[4:8])
    run_until_drained(rt, spark)
    assert run_epoch(rt, spark) is None
    live = [e for e in rt.repo.committed_epochs() if e not in rt.repo.rewound()]
    order = [k for e in live for k in rt.repo.checkpoint(e).plan.source_range["files"]]
    assert sorted(order) == sorted(k for k, _ in files)
    body = dict(files)
    assert_click_output_exact(spec, click_reference([(k, body[k]) for k in order], read_order=True))


@pytest.mark.parametrize("point", POINTS)
def test_a_sigkill_at_each_fault_point_while_files_land(
    spark: Any, landing: Workspace, tmp_path: Path, point: str
) -> None:
    """Random names land between epochs; the step holding ``point`` dies there (SIGKILL, in a
    ``sluice`` subprocess) in the third epoch; the resume and the rest are exact."""
    ws = landing
    files = landing_files(7, seed=SEED + 3)
    body = click_spec_dict(ws, name="landing")
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(body))
    spec = parse_spec(body)
    rt = runtime(spec)
    for batch in (files[0:2], files[2:3]):
        ws.put_files(batch)
        assert run_epoch(rt, spark) is not None
    ws.put_files(files[3:5])
    code = crash_step(rt, spark, spec_path, point, 3, max_units=10, log=tmp_path / "cli.log")
    assert code == -signal.SIGKILL, (point, code, (tmp_path / "cli.log").read_text()[-3000:])
    ws.put_files(files[5:7])  # lands while the pipeline is down
    run_until_drained(rt, spark)
    assert run_epoch(rt, spark) is None
    counts = Counter(read_order(rt))
    assert [k for k, n in counts.items() if n > 1] == []
    assert_click_output_exact(spec, reference_in_read_order(rt, files))
