"""Where a query's executor CPU goes: a Java Flight Recorder profile of warm Sluice epochs
(JDK 17's built-in sampler), summed by method over Spark's executor threads.

    .venv/bin/python bench/jfr_profile.py QUERY FORMAT [REPEATS] [TOP] [sss]

Runs the bench's Nexmark QUERY (``bench/nexmark.py``'s spec, one 50,000-event file an epoch
of the quick dataset, written here if ``make bench-quick`` has not) over the whole dataset
REPEATS times (default 7, each a new pipeline) in one local[2] session whose JVM records from
its 25th second on (the first pass warms the JIT), then prints the TOP (default 25) methods
by self samples and by inclusive samples, each with its share of the executor threads'
samples. With ``sss`` last, the same for Structured Streaming's run of the query
(``bench/nexmark.py``'s ``sss_run``: AvailableNow, one file a micro-batch, RocksDB state):
the two method lists side by side show where Sluice's pass differs. The recording stays in
``/tmp/sluice-jfr/QUERY-FORMAT-ENGINE.jfr`` (``jfr print`` and JDK Mission Control read it).
Samples, not times: the shares are what to compare.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "include")]

from bench import nexmark as nx  # noqa: E402

OUT = Path("/tmp/sluice-jfr")


def _run(query: str, fmt: str, repeats: int, recording: Path, engine: str) -> None:
    from sluice.nexmark import write_files
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spark import spark_session
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    ds = nx.Dataset(nx.CACHE / "nexmark" / "500000-50000", 500_000, 50_000)
    if not ds.files(fmt):
        write_files(str(ds.root / fmt), 0, 500_000, format=fmt, events_per_file=50_000)  # type: ignore[arg-type]
    option = (
        f"-XX:StartFlightRecording=filename={recording},settings=profile,delay=25s,dumponexit=true"
    )
    spark = spark_session(
        "jfr-profile", master="local[2]", extra_conf={"spark.driver.extraJavaOptions": option}
    )
    started = time.time()
    if engine == "sss":
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", nx.ROCKSDB)
        for rep in range(repeats):
            work = OUT / f"work-sss-{query}-{fmt}-{rep}"
            progress, _ = nx.sss_run(spark, query, fmt, ds.dir(fmt), work, 1)
            batches = sum(1 for p in progress if p.get("numInputRows", 0) > 0)
            print(f"pass {rep + 1}/{repeats}: {batches} micro-batches, "
                  f"{time.time() - started:.0f} s", flush=True)  # fmt: skip
            shutil.rmtree(work, ignore_errors=True)
        spark.stop()
        return
    for rep in range(repeats):
        work = OUT / f"work-{query}-{fmt}-{rep}"
        spec = nx.sluice_spec(
            f"jfr_{query}_{rep}", nx.SPECS[query], nx.bid_source(ds, fmt, 1), 2, work
        )
        rt = runtime(load_spec(str(spec)))
        epochs = 0
        while (plan := plan_epoch(rt)) is not None:
            record = process_epoch(rt, spark, plan.epoch)
            commit_epoch(rt, plan.epoch, record.attempt)
            epochs += 1
        print(
            f"pass {rep + 1}/{repeats}: {epochs} epochs, {time.time() - started:.0f} s", flush=True
        )
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()  # the JVM writes the recording when this process exits


def _summary(recording: Path, top: int) -> None:
    text = subprocess.run(
        ["jfr", "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    samples = 0
    for event in json.loads(text)["recording"]["events"]:
        # executor threads are renamed while they run a task: the name JFR kept may be either
        if "Executor task" not in (event["values"]["sampledThread"]["javaName"] or ""):
            continue
        frames = event["values"]["stackTrace"]["frames"]
        if not frames:
            continue
        samples += 1
        names = [f"{f['method']['type']['name'].split('/')[-1]}.{f['method']['name']}"
                 for f in frames]  # fmt: skip
        own[names[0]] += 1
        inclusive.update(set(names))
    print(f"{samples} samples of executor threads ({recording})")
    for title, counts in (("self", own), ("inclusive", inclusive)):
        print(f"--- {title}")
        for name, n in counts.most_common(top):
            print(f"{n:6d} {100 * n / max(samples, 1):5.1f}%  {name}")


def main(argv: list[str]) -> int:
    if argv[0] == "--run":  # the recorded process (its JVM writes the recording on exit)
        _run(argv[1], argv[2], int(argv[3]), Path(argv[4]), argv[5])
        return 0
    query, fmt = argv[0], argv[1]
    repeats = int(argv[2]) if len(argv) > 2 else 7
    top = int(argv[3]) if len(argv) > 3 else 25
    engine = argv[4] if len(argv) > 4 else "sluice"
    OUT.mkdir(parents=True, exist_ok=True)
    recording = OUT / f"{query}-{fmt}-{engine}.jfr"
    recording.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--run", query, fmt, str(repeats), str(recording), engine]
    subprocess.run(command, check=True)
    _summary(recording, top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
