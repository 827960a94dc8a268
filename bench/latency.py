"""Latency from arrival: files dropped into a running `make airflow` deployment, landing to
committed, with where the time went.

    .venv/bin/python bench/latency.py [--files 20] [--min-gap 6] [--max-gap 11] [--keep]
    .venv/bin/python bench/latency.py --attach --home .airflow --data-root data/airflow

By default it starts its own deployment with ``scripts/airflow-local.sh`` (warm, the demo DAG
unpaused, its own ``AIRFLOW_LOCAL_HOME``, data root and free ports in a temporary folder), waits
until the 20 seeded demo files are committed and no run is active, then drops ``--files`` new
click files into the demo's input folder one at a time: each after the previous one's epoch
committed, its run ended and a random pause of ``--min-gap``..``--max-gap`` s. The pause is
longer than the watcher's look while a run is active (5 s), so the watcher is back to its idle
looks, and spread over more than one idle look, so a file lands at a random moment of the
watcher's cycle (give ``--max-gap`` at least ``--min-gap`` plus the idle look's period). A
file is written beside the folder under a hidden name and renamed into it, so it lands whole at
one instant. The deployment is stopped at the end (``--keep``: left running). ``--attach``
uses a running deployment instead (its ``AIRFLOW_LOCAL_HOME`` and data root; the URL is read
from its API server's command line).

For each file (all times on this machine's clock):

* **total**: landing (the rename) to the epoch's sinks committed (``sinks-committed.json``'s
  ``committed_at``: the output is visible);
* **detect**: landing to the input watcher's event (its payload's ``at``);
* **plan / process / commit**: each step's own work: the plan's ``plan_seconds`` and the
  commit's ``commit_seconds`` as the engine records them, and for ``process`` the request on
  ``sluice serve`` from its start to its end (opening the pipeline, recovery, the attempt's
  records and its Spark work); ``spark`` is the part the engine records as the attempt's
  ``process_seconds``, what the monitor's duration chart shows (cold: process = spark);
* **hand-offs**: the rest, ``total - detect - plan - process - commit``: Airflow between the
  event and the run, the scheduler's pick-up of each task, each task's process start (fork,
  DAG file parse, imports) and its report, and the warm request's round trip. Split further
  into ``to_run`` (event to the run's ``queued_at``), ``to_plan`` (run queued to the plan
  task's start), the gaps ``plan>process`` and ``process>commit`` (one task's end to the
  next one's start), and ``in_tasks`` (each task's duration minus its own work, up to the
  commit point: the task process's start, the DAG file's parse, its report; for ``process``
  the request's round trip and its long poll).

Prints a row per file and a table of p50 / p95 (nearest rank); ``--json PATH`` writes the rows.
Then, with no input arriving, what each service costs idle: CPU seconds per minute of each
process tree (the scheduler's loop, the triggerer's looks, the API server answering them),
over ``--idle`` seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))  # this checkout's package first

SCRIPT = REPO / "scripts" / "airflow-local.sh"
SPEC = REPO / "include" / "pipelines" / "clicks_per_minute.yaml"
DAG = "sluice__clicks_per_minute"
POLL_S = 0.2
START_TIMEOUT_S = 600
EPOCH_TIMEOUT_S = 300
EVENTS_PER_FILE = 50
SPLIT = ("total", "detect", "plan", "process", "commit", "hand_offs", "spark")
HAND_OFFS = ("to_run", "to_plan", "plan>process", "process>commit", "in_tasks")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ts(text: str) -> float:
    """Seconds since the epoch of one of the API's ISO timestamps."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Deployment:
    """A `make airflow`-style deployment: its AIRFLOW_LOCAL_HOME, data root and API URL."""

    home: Path
    data_root: Path
    url: str
    started: bool = False

    def serve(self) -> tuple[str, str] | None:
        """``sluice serve``'s URL and token (None: cold, no server)."""
        if not (self.home / "serve.pid").exists():
            return None
        pid = int((self.home / "serve.pid").read_text())
        port = re.search(r"--port\s+(\d+)", " ".join(psutil.Process(pid).cmdline()))
        token = (self.home / "serve" / "token").read_text().strip()
        return f"http://127.0.0.1:{port.group(1) if port else 8790}", token

    @classmethod
    def new(cls, folder: Path) -> Deployment:
        """One in ``folder`` on free ports, not started yet."""
        return cls(folder / "airflow", folder / "data", f"http://127.0.0.1:{free_port()}")

    def start(self) -> None:
        env = dict(os.environ, AIRFLOW_LOCAL_HOME=str(self.home),
                   SLUICE_DATA_ROOT=str(self.data_root), AIRFLOW_PORT=self.url.rsplit(":", 1)[1],
                   SLUICE_SERVE_PORT=str(free_port()), SLUICE_EXECUTION="warm",
                   SLUICE_UNPAUSED="clicks_per_minute")  # fmt: skip
        env.pop("SLUICE_DATA", None)
        self.started, t0 = True, time.monotonic()
        done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)  # fmt: skip
        if done.returncode != 0:
            tail = done.stdout[-3000:] + done.stderr[-3000:]
            raise SystemExit(f"airflow-local.sh failed:\n{tail}")
        print(f"deployment up in {time.monotonic() - t0:.0f} s (home {self.home})", flush=True)

    @classmethod
    def attach(cls, home: Path, data_root: Path) -> Deployment:
        pid = int((home / "api-server.pid").read_text())
        port = re.search(r"port[:=\s]+(\d+)", " ".join(psutil.Process(pid).cmdline()))
        return cls(home, data_root, f"http://127.0.0.1:{port.group(1) if port else 8080}")

    def stop(self) -> None:
        env = dict(os.environ, AIRFLOW_LOCAL_HOME=str(self.home))
        subprocess.run([str(SCRIPT), "stop"], env=env, check=False, timeout=600)


def call(url: str, token: str | None, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


class Api:
    """The deployment's REST API, as admin, and its ``sluice serve``."""

    def __init__(self, dep: Deployment) -> None:
        self.url = dep.url
        password = json.loads((dep.home / "passwords.json").read_text())["admin"]
        body = {"username": "admin", "password": password}
        self.token = call(self.url + "/auth/token", None, "POST", body)["access_token"]
        self.serve = dep.serve()

    def get(self, path: str) -> Any:
        return call(self.url + path, self.token)

    def served_seconds(self, run_id: str, epoch: int) -> float | None:
        """How long the successful ``sluice serve`` request of the run's epoch took, start to
        end (None: cold)."""
        if self.serve is None:
            return None
        found = call(self.serve[0] + "/v1/attempts", self.serve[1])["attempts"]
        [mine] = [a for a in found if (a["run_id"], a["epoch"], a["status"]) ==
                  (run_id, epoch, "succeeded")]  # fmt: skip
        return float(mine["finished_at"] - mine["started_at"])

    def active_runs(self) -> int:
        runs = self.get(f"/api/v2/dags/{DAG}/dagRuns?state=queued&state=running&limit=10")
        return int(runs["total_entries"])

    def run_timeline(self, run_id: str) -> dict[str, Any]:
        quoted = urllib.parse.quote(run_id, safe="")
        run = self.get(f"/api/v2/dags/{DAG}/dagRuns/{quoted}")
        tis = self.get(f"/api/v2/dags/{DAG}/dagRuns/{quoted}/taskInstances")["task_instances"]
        events = self.get(f"/api/v2/dags/{DAG}/dagRuns/{quoted}/upstreamAssetEvents")
        return {"run": run, "tasks": {t["task_id"]: t for t in tis},
                "events": events.get("asset_events", [])}  # fmt: skip


@dataclass
class Row:
    file: str
    epoch: int
    run_id: str
    files_in_epoch: int
    total: float
    detect: float
    plan: float
    process: float
    commit: float
    hand_offs: float
    spark: float
    to_run: float
    to_plan: float
    plan_process: float
    process_commit: float
    in_tasks: float
    tries: str

    def part(self, name: str) -> float:
        return float(getattr(self, name.replace(">", "_")))


def repository(data_root: Path) -> Any:
    os.environ["SLUICE_DATA_ROOT"] = str(data_root)
    os.environ.pop("SLUICE_DATA", None)
    from sluice.pipeline import open_pipeline

    return open_pipeline(SPEC)


def input_dir(data_root: Path) -> Path:
    return data_root / "demo" / "in"


def wait_for(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(POLL_S)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def committed_with(rt: Any, name: str) -> Any:
    """The checkpoint whose plan read ``name`` once its sinks are committed, else None."""
    latest = rt.repo.latest_checkpoint()
    if latest is None or name not in rt.source.units_of(latest.plan.source_range):
        return None
    return latest if rt.repo.sinks_committed(latest.epoch) is not None else None


def settle(rt: Any, api: Api) -> None:
    """Until every file in the input is committed and no run is active."""

    def idle() -> bool:
        latest = rt.repo.latest_checkpoint()
        start = rt.source.decode_offset(latest.end_offset) if latest else rt.source.initial_offset()
        done = latest is None or rt.repo.sinks_committed(latest.epoch) is not None
        return rt.source.pending_units(start) == 0 and done and api.active_runs() == 0

    wait_for("the input to be committed and no run active", idle, START_TIMEOUT_S)


def drop(folder: Path, index: int) -> tuple[str, float]:
    """Write one click file (event times now) under a hidden name beside the folder, rename it
    in; returns its name and the landing time."""
    from sluice.demo import click_file_name, render_click_files

    name = click_file_name(index)
    [(_, content)] = render_click_files(
        files=1, events_per_file=EVENTS_PER_FILE, seed=index, start=datetime.now().astimezone(),
        late_every=0, malformed_every=0,
    )  # fmt: skip
    hidden = folder.parent / f".landing-{name}"
    hidden.write_bytes(content)
    os.rename(hidden, folder / name)
    return name, time.time()


def measure(rt: Any, api: Api, name: str, landed: float) -> Row:
    checkpoint = wait_for(f"{name} to be committed", lambda: committed_with(rt, name),
                          EPOCH_TIMEOUT_S)  # fmt: skip
    sinks = rt.repo.sinks_committed(checkpoint.epoch)
    wait_for("its run to end", lambda: api.active_runs() == 0, EPOCH_TIMEOUT_S)
    line = api.run_timeline(checkpoint.run_id)
    run, tasks = line["run"], line["tasks"]
    fired = [e.get("extra", {}).get("payload", {}).get("at") for e in line["events"]]
    fired_at = float(max((f for f in fired if f), default=None) or ts(run["queued_at"]))
    start = {k: ts(t["start_date"]) for k, t in tasks.items()}
    end = {k: ts(t["end_date"]) for k, t in tasks.items()}
    served = api.served_seconds(checkpoint.run_id, checkpoint.epoch)
    plan_s = checkpoint.plan.plan_seconds
    process_s = checkpoint.result.process_seconds if served is None else served
    commit_s = sinks.commit_seconds
    total = sinks.committed_at - landed
    detect = fired_at - landed
    in_tasks = ((end["plan"] - start["plan"] - plan_s) + (end["process"] - start["process"]
                - process_s) + (sinks.committed_at - start["commit"] - commit_s))  # fmt: skip
    return Row(
        file=name, epoch=checkpoint.epoch, run_id=checkpoint.run_id,
        files_in_epoch=len(rt.source.units_of(checkpoint.plan.source_range)),
        total=total, detect=detect, plan=plan_s, process=process_s, commit=commit_s,
        hand_offs=total - detect - plan_s - process_s - commit_s,
        spark=checkpoint.result.process_seconds,
        to_run=ts(run["queued_at"]) - fired_at, to_plan=start["plan"] - ts(run["queued_at"]),
        plan_process=start["process"] - end["plan"],
        process_commit=start["commit"] - end["process"], in_tasks=in_tasks,
        tries="/".join(str(tasks[k]["try_number"]) for k in ("plan", "process", "commit")),
    )  # fmt: skip


SERVICES = ("scheduler", "triggerer", "api-server", "dag-processor", "serve")


def cpu_seconds(home: Path) -> dict[str, float]:
    """CPU seconds used so far by each service's process tree (live processes only)."""
    used: dict[str, float] = {}
    for name in SERVICES:
        try:
            root = psutil.Process(int((home / f"{name}.pid").read_text()))
            procs = [root, *root.children(recursive=True)]
        except (OSError, ValueError, psutil.Error):
            continue
        total = 0.0
        for proc in procs:
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        used[name] = total
    return used


def idle_cost(home: Path, seconds: float) -> str:
    """CPU seconds per minute of each service over ``seconds`` with nothing arriving."""
    before = cpu_seconds(home)
    time.sleep(seconds)
    after = cpu_seconds(home)
    parts = [f"{k} {(after[k] - before[k]) * 60 / seconds:.2f}" for k in after if k in before]
    return f"idle, CPU s per minute over {seconds:.0f} s: " + ", ".join(parts)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def report(rows: list[Row]) -> str:
    head = "| seconds | " + " | ".join(SPLIT) + " | " + " | ".join(HAND_OFFS) + " |"
    lines = [head, "|" + "---|" * (1 + len(SPLIT) + len(HAND_OFFS))]
    for label, f in (("p50", lambda v: pct(v, 50)), ("p95", lambda v: pct(v, 95)),
                     ("mean", statistics.fmean), ("max", max)):  # fmt: skip
        cells = [f"{f([r.part(k) for r in rows]):.2f}" for k in (*SPLIT, *HAND_OFFS)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace, dep: Deployment) -> list[Row]:
    rt, api = repository(dep.data_root), Api(dep)
    folder = input_dir(dep.data_root)
    settle(rt, api)
    names = (re.fullmatch(r"clicks-(\d+)\.jsonl", p.name) for p in folder.iterdir())
    index = 1 + max((int(m.group(1)) for m in names if m), default=-1)
    rng, rows = random.Random(args.seed), []
    print(f"load average {os.getloadavg()}; dropping {args.files} files", flush=True)
    for i in range(args.files):
        time.sleep(rng.uniform(args.min_gap, args.max_gap))
        name, landed = drop(folder, index + i)
        row = measure(rt, api, name, landed)
        rows.append(row)
        print(f"{row.file} epoch {row.epoch}: total {row.total:.1f} = detect {row.detect:.1f}"
              f" + plan {row.plan:.2f} + process {row.process:.2f} (spark {row.spark:.2f})"
              f" + commit {row.commit:.2f}"
              f" + hand-offs {row.hand_offs:.1f} (to_run {row.to_run:.1f}, to_plan "
              f"{row.to_plan:.1f}, gaps {row.plan_process:.1f}/{row.process_commit:.1f}, in "
              f"tasks {row.in_tasks:.1f}; tries {row.tries})", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--min-gap", type=float, default=6.0, help="least pause before a file, s")
    parser.add_argument("--max-gap", type=float, default=11.0, help="most pause before a file, s")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--attach", action="store_true", help="use a running deployment")
    parser.add_argument("--home", type=Path, default=REPO / ".airflow")
    parser.add_argument("--data-root", type=Path, default=REPO / "data" / "airflow")
    parser.add_argument("--keep", action="store_true", help="leave the deployment running")
    parser.add_argument("--idle", type=float, default=60.0, help="idle cost measured over, s")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sluice-latency-"))
    dep = Deployment.attach(args.home, args.data_root) if args.attach else Deployment.new(folder)
    try:
        if not args.attach:
            dep.start()
        rows = run(args, dep)
        wait_for("the last run to end", lambda: Api(dep).active_runs() == 0, EPOCH_TIMEOUT_S)
        idle = idle_cost(dep.home, args.idle) if args.idle > 0 else ""
    finally:
        if dep.started and not args.keep:
            dep.stop()
            shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{len(rows)} files, load average {os.getloadavg()}, {os.cpu_count()} cores\n")
    if rows:
        print(report(rows))
    print(f"\n{idle}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
