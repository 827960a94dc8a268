"""The fixed cost of a near-empty epoch, cold vs warm (docs/warm-execution.md).

Each round adds one 1-record file to each of two identical pipelines and runs one epoch of
each: plan and commit in this process (as the DAG's Python tasks do), process either cold
(``spark-submit jobs/run_epoch.py``, a new driver, as the cold DAG task) or warm (one request
to a ``sluice serve`` started here). Rounds alternate the two so both see the same machine
load. The first epoch of each (state start) is not counted.

    .venv/bin/python scripts/serve-fixed-cost.py [--rounds 8] [--workdir /tmp/sluice-fixed]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sluice-fixed"))
    args = parser.parse_args()
    from sluice.protocol import Faults, Runtime, commit_epoch, plan_epoch

    shutil.rmtree(args.workdir, ignore_errors=True)
    specs = {mode: _spec(args.workdir, mode) for mode in ("cold", "warm")}
    rts = {m: Runtime.build(_load(p), clock=time.time, new_attempt_id=lambda: secrets.token_hex(6),
                            faults=Faults()) for m, p in specs.items()}  # fmt: skip
    server, client = _start_server(args.workdir)
    steps: dict[str, list[dict[str, float]]] = {"cold": [], "warm": []}
    try:
        for n in range(args.rounds + 1):
            for mode in ("cold", "warm"):
                _event_file(args.workdir / mode / "in", n)
                t0 = time.perf_counter()
                plan = plan_epoch(rts[mode])
                assert plan is not None
                t1 = time.perf_counter()
                if mode == "cold":
                    _spark_submit(specs[mode], plan.epoch)
                else:
                    client.process(specs[mode], plan.epoch, f"fixed_{n}")
                t2 = time.perf_counter()
                commit_epoch(rts[mode], plan.epoch)
                t3 = time.perf_counter()
                if n:
                    steps[mode].append({"plan": t1 - t0, "process": t2 - t1, "commit": t3 - t2})
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=120)
    summary = {
        mode: {
            **{k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]},
            "total": round(statistics.median(sum(r.values()) for r in runs), 3),
            "process_min": round(min(r["process"] for r in runs), 3),
            "process_max": round(max(r["process"] for r in runs), 3),
            "epochs": len(runs),
        }
        for mode, runs in steps.items()
    }
    print(json.dumps(summary, indent=2))
    return 0


def _spec(workdir: Path, mode: str) -> Path:
    folder = workdir / mode
    (folder / "in").mkdir(parents=True)
    body = {
        "name": f"fixed_{mode}",
        "source": {"type": "files", "path": str(folder / "in"), "format": "jsonl",
                   "schema": {"user": "string", "ts": "timestamp", "amount": "double"}},
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"n": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": str(folder / "out")}],
        "checkpoint": {"storage": str(folder / "ckpt"), "retained": 3},
    }  # fmt: skip
    path = workdir / "specs" / f"{mode}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(body))
    return path


def _load(path: Path) -> Any:
    from sluice.spec import load_spec

    return load_spec(path)


def _event_file(folder: Path, n: int) -> None:
    ts = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z"
    (folder / f"part-{n:06d}.jsonl").write_text(json.dumps({"user": "u", "ts": ts,
                                                            "amount": 1.0}) + "\n")  # fmt: skip


def _spark_submit(spec: Path, epoch: int) -> None:
    from sluice.spark import s3a_jars, submit_conf

    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in submit_conf().items():
        cmd += ["--conf", f"{key}={value}"]
    if jars := ",".join(str(p) for p in s3a_jars()):
        cmd += ["--jars", jars]
    cmd += [str(ROOT / "jobs" / "run_epoch.py"), "--spec", str(spec), "--epoch", str(epoch)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    subprocess.run(cmd, env=env, check=True, capture_output=True)


def _start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], Any]:
    from sluice.serve import ServeClient, ServeError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "SLUICE_SERVE_TOKEN": token}
    cmd = [sys.executable, "-m", "sluice.cli", "serve", "--port", str(port), "--master",
           "local[2]", "--pipelines-dir", str(workdir / "specs")]  # fmt: skip
    log = (workdir / "serve.log").open("wb")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    client = ServeClient(f"http://127.0.0.1:{port}", token)
    deadline = time.monotonic() + 300
    while True:
        try:
            client.health()
            return server, client
        except ServeError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise
            time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
