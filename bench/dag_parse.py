"""What the DAG file costs a parse: ``import airflow.sdk`` alone, then running
``dags/sluice_pipelines.py`` on top of it, in one fresh process, ``--runs`` times.

    .venv/bin/python bench/dag_parse.py [--runs 7] [--pipelines DIR] [--no-bytecode]

Prints each run and the medians (seconds); the target (issue #25) is a DAG file at most 0.3 s
over ``airflow.sdk``. Also names the heavy libraries the parse left in ``sys.modules``. The
package is taken from this checkout's ``include/`` first.

As a DAG processor does, the runs use compiled bytecode: Airflow's comes with its install, the
``sluice`` package's is written to a temporary ``PYTHONPYCACHEPREFIX`` by one uncounted run
first (``PYTHONDONTWRITEBYTECODE`` is ignored). ``--no-bytecode`` compiles every ``sluice``
module in every run instead. A busy machine shifts both figures: compare medians taken on one
machine at one time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.3
HEAVY = ("pyspark", "py4j", "pandas", "pyarrow", "numpy", "sqlalchemy", "fastapi", "yaml")

# One run: both timings in the same process, the DAG file after airflow.sdk is imported.
CHILD = """
import json, runpy, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import airflow.sdk
t1, c1 = time.perf_counter(), time.process_time()
runpy.run_path(sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
heavy = [m for m in sys.argv[2].split(",") if m in sys.modules]
print(json.dumps({"sdk_s": t1 - t0, "dag_s": t2 - t1, "sdk_cpu_s": c1 - c0, "dag_cpu_s": c2 - c1,
                  "heavy": heavy}))
"""


def one_run(pipelines: str | None, pycache: str | None) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "include"), env.get("PYTHONPATH", "")])
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    if pipelines:
        env["SLUICE_PIPELINES_DIR"] = pipelines
    dag_file = str(REPO / "dags" / "sluice_pipelines.py")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, dag_file, ",".join(HEAVY)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh processes (default 7)")
    parser.add_argument("--pipelines", default=None, help="spec folder (default: shipped specs)")
    parser.add_argument("--no-bytecode", action="store_true", help="compile sluice every run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-pycache-") as folder:
        pycache = None if args.no_bytecode else folder
        if pycache is not None:
            one_run(args.pipelines, pycache)  # writes the bytecode; not counted
        runs = [one_run(args.pipelines, pycache) for _ in range(args.runs)]
    for i, run in enumerate(runs, 1):
        print(f"run {i}: airflow.sdk {run['sdk_s']:.3f} s, DAG file +{run['dag_s']:.3f} s "
              f"(CPU {run['sdk_cpu_s']:.3f} s, +{run['dag_cpu_s']:.3f} s)")  # fmt: skip
    sdk, dag, sdk_cpu, dag_cpu = (
        statistics.median(float(str(r[k])) for r in runs)
        for k in ("sdk_s", "dag_s", "sdk_cpu_s", "dag_cpu_s")
    )
    verdict = "met" if dag <= TARGET_S else "NOT met"
    print(f"median of {len(runs)}: airflow.sdk {sdk:.3f} s, DAG file +{dag:.3f} s "
          f"(target +{TARGET_S} s: {verdict}); CPU time {sdk_cpu:.3f} s, +{dag_cpu:.3f} s "
          f"(less moved by other processes on a busy machine)")  # fmt: skip
    print("heavy modules loaded by the parse:", ", ".join(map(str, runs[-1]["heavy"])) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
