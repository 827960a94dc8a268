"""The input watcher never blocks the triggerer's event loop.

The triggerer runs every trigger on one asyncio loop and warns ("async thread was blocked ...
badly-written trigger") when it stalls. The check runs in a fresh interpreter holding what a
triggerer holds before it loads a trigger: there, on a running loop with a coroutine that
ticks every 10 ms, it loads :class:`NewInputTrigger` as Airflow does (``import_string`` on the
loop) and runs its ``run()`` against a real files pipeline whose checkpoint store listing,
source listing and DagRun count each take 0.5 s. No tick may come more than 0.25 s late
(a known 0.5 s sleep on the loop would make one that late), and loading the class imports no
part of the engine or the DAG factory (they cost the loop 0.3-0.5 s).

Along the way the trigger must still fire exactly when a run would have work: not while the
input folder is empty (its looks then list the source only: the checkpoint store is read
again once a run was created), not while a run is active (and then it does not list the
source), once when the run ends and two files wait, and not again before the run it asked for
exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import sluice
import yaml

from tests.fixtures.pipelines import Workspace, click_spec_dict

SLOW_S = 0.5
MAX_LATE_S = 0.25
# Loading the trigger class must not import these (the triggerer imports it on its loop).
HEAVY = ("sluice.airflow.factory", "sluice.airflow.tasks", "sluice.protocol",
         "airflow.providers.apache.spark.operators.spark_submit")  # fmt: skip

CHILD = """
import asyncio, json, sys, time
import airflow.jobs.triggerer_job_runner  # what a triggerer holds before loading a trigger
import airflow.sdk.execution_time.task_runner
from airflow._shared.module_loading import import_string

spec_path, inputs, slow_s, heavy = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
late, calls, runs = [], {"list": 0, "pending": 0, "count": 0}, {"active": 0, "total": 0}
measuring = True


async def tick():
    last = time.monotonic()
    while True:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        if measuring:
            late.append(now - last - 0.01)
        last = now


def slowed(name, method):
    def call(*args, **kwargs):
        calls[name] += 1
        time.sleep(slow_s)
        return method(*args, **kwargs)
    return call


def slow_runtime():  # the test's own set-up, in a thread (not measured)
    from sluice.airflow.tasks import runtime_for
    rt = runtime_for(spec_path, None)
    rt.repo.store.list = slowed("list", rt.repo.store.list)
    rt.source.pending_units = slowed("pending", rt.source.pending_units)
    return rt


def count_runs(states):  # RuntimeTaskInstance.get_dr_count: a request to the API server
    calls["count"] += 1
    time.sleep(slow_s)
    return runs["active"] if states else runs["total"]


async def until(what, deadline_s=60):
    deadline = time.monotonic() + deadline_s
    while not what():
        assert time.monotonic() < deadline, f"timed out; calls {calls}"
        await asyncio.sleep(0.05)


async def main():
    global measuring
    report = {}
    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.1)
    cls = import_string("sluice.airflow.triggers.NewInputTrigger")  # as TriggerRunner does
    report["heavy"] = [m for m in heavy if m in sys.modules]
    await asyncio.sleep(0.1)  # the ticker's turn: a late tick is recorded before set-up
    measuring = False
    rt = await asyncio.to_thread(slow_runtime)
    measuring = True
    await asyncio.sleep(0.1)
    trigger = cls(spec_path, "sluice__watched", 60.0, 0.2)  # interval 60 s, a look per 0.2 s
    trigger._runtime = lambda: rt
    trigger._count_runs = count_runs
    events = trigger.run()
    fired = asyncio.ensure_future(events.__anext__())

    looked = calls["pending"]  # empty input, no run: it looks, thrice, and fires nothing
    await until(lambda: calls["pending"] >= looked + 1)
    read = calls["list"]  # the first look read the checkpoint store; the next ones list the
    await until(lambda: calls["pending"] >= looked + 3)  # source only (no run came meanwhile)
    report["idle_fired"] = fired.done()
    report["idle_store_reads"] = calls["list"] - read
    read = calls["list"]

    runs["active"] = runs["total"] = 1  # a run is active (the trigger sees it), then two
    counted = calls["count"]            # files arrive
    await until(lambda: calls["count"] >= counted + 2)
    for name in ("part-0000.jsonl", "part-0001.jsonl"):
        open(f"{inputs}/{name}", "w").write('{"user": "u"}\\n')
    looked, counted = calls["pending"], calls["count"]
    await until(lambda: fired.done() or calls["count"] >= counted + 3)
    report["busy_fired"] = fired.done()
    report["busy_looked"] = calls["pending"] - looked

    runs["active"] = 0  # the run ends: the trigger looks and fires once
    event = await asyncio.wait_for(fired, 60)
    report["reason"] = event.payload["reason"]
    report["store_read_after_the_run"] = calls["list"] > read
    again = asyncio.ensure_future(events.__anext__())
    counted = calls["count"]  # it waits for the run it asked for, counting runs
    await until(lambda: again.done() or calls["count"] >= counted + 3)
    report["fired_before_the_run"] = again.done()
    runs["active"] = runs["total"] = 2  # that run exists and is active: still no event
    counted = calls["count"]
    await until(lambda: again.done() or calls["count"] >= counted + 3)
    report["fired_while_it_runs"] = again.done()

    again.cancel()
    await asyncio.gather(again, return_exceptions=True)
    ticker.cancel()
    report["worst_late_s"] = max(late)
    report["ticks"] = len(late)
    print(json.dumps(report))


asyncio.run(main())
"""


def test_the_input_watcher_never_blocks_the_loop_and_fires_when_input_waits(
    tmp_path: Path,
) -> None:
    ws = Workspace("local", tmp_path.as_uri())
    inputs = tmp_path / "in"
    inputs.mkdir()
    spec = tmp_path / "watched.yaml"
    spec.write_text(yaml.safe_dump(click_spec_dict(ws, name="watched")))
    code = str(Path(sluice.__file__).resolve().parents[1])  # this checkout's package first
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([code, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec), str(inputs), str(SLOW_S), *HEAVY],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])

    assert report["heavy"] == [], "loading the trigger class imported these on the loop"
    assert report["idle_fired"] is False and report["idle_store_reads"] == 0
    assert report["busy_fired"] is False and report["busy_looked"] == 0
    assert report["reason"] == f"2 new input units at {ws.uri('in')}"
    assert report["store_read_after_the_run"] is True  # a run was created: its commit counts
    assert report["fired_before_the_run"] is False and report["fired_while_it_runs"] is False
    assert report["ticks"] > 100  # the loop ran all along
    assert report["worst_late_s"] < MAX_LATE_S, report
