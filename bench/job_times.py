"""The Spark jobs of each epoch of one Nexmark query, with their wall times: which job of a
steady epoch runs when, and whether two of them overlap (the state part and the staged output
run at once: #35 item 3).

    .venv/bin/python bench/job_times.py q7 parquet [EPOCHS]

Reads the quick dataset (``make bench-quick`` writes it: 500k events, files of 50k), two files
an epoch, qos 2, in this process's own Spark session; prints per epoch the process step's time
and each job's start (ms after the epoch's first job), duration and call site.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench.nexmark as nx
import bench.probe as pr


def main(argv: list[str]) -> int:
    from sluice.spark import spark_session

    query, fmt = argv[0], argv[1]
    epochs = int(argv[2]) if len(argv) > 2 else 5
    ds = nx.Dataset(nx.CACHE / "nexmark" / "500000-50000", 500_000, 50_000)
    if not ds.files(fmt):
        print(f"no {fmt} data in {ds.dir(fmt)}: run make bench-quick first", file=sys.stderr)
        return 2
    spark = spark_session("job-times", master="local[2]", extra_conf=pr.PROBE_CONF)
    work = nx.WORK / "job-times" / f"{query}-{fmt}"
    shutil.rmtree(work, ignore_errors=True)
    spec = nx.sluice_spec(f"jt_{query}", nx.SPECS[query], nx.bid_source(ds, fmt, 2), 2, work)
    status = pr._Status(spark)
    for n in range(epochs):
        first = status.next_job()
        ran = nx.run_sluice_epochs(spark, spec, max_epochs=1, probe=False)
        if not ran:
            break
        status.drain()
        jobs = [status.json(status.app.job(i)) for i in range(first, status.next_job())]
        print(f"epoch {n + 1}: process {ran[0].process:.3f} s")
        start = min((_ms(j["submissionTime"]) for j in jobs), default=0)
        for job in jobs:
            begun, ended = _ms(job["submissionTime"]), _ms(job["completionTime"])
            site = (job.get("description") or job.get("name") or "")[:70]
            print(f"  job {job['jobId']:>4}  +{begun - start:>5} ms  {ended - begun:>5} ms  {site}")
    return 0


def _ms(value: object) -> int:
    """A status-store time (epoch milliseconds, as Jackson writes a Date) as an int."""
    return int(value)  # type: ignore[call-overload]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
