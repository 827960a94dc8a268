"""Where a pipeline's Py4J calls come from: each call of the process step counted at the
Sluice line that made it (the innermost frame under ``include/sluice``).

    .venv/bin/python bench/py4j_sites.py q7 parquet [EPOCHS] [TOP]

Runs the bench's Nexmark query (``bench/nexmark.py``'s spec, or the join spec of q3 / q8:
``bench/nexmark_joins.py``), 2 files an epoch (of each side) of the quick
dataset, which ``make bench-quick`` writes) for EPOCHS epochs (default 3) on local[2] and
prints each epoch's calls and py4j's deletes of released JVM objects (not counted as calls),
then the TOP (default 30) lines of the last epoch. A count, not a time: noise cannot move it.
"""

from __future__ import annotations

import collections
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "include")]

from bench import nexmark as nx  # noqa: E402
from bench import probe as pr  # noqa: E402


def main(argv: list[str]) -> int:
    query, fmt = argv[0], argv[1]
    epochs = int(argv[2]) if len(argv) > 2 else 3
    top = int(argv[3]) if len(argv) > 3 else 30
    from sluice.protocol import commit_epoch, plan_epoch, process_epoch
    from sluice.spark import spark_session
    from sluice.spec import load_spec

    from tests.fixtures.pipelines import runtime

    ds = nx.Dataset(nx.CACHE / "nexmark" / "500000-50000", 500_000, 50_000)
    if not ds.files(fmt):
        print(f"no {fmt} data in {ds.dir(fmt)}: run make bench-quick first", file=sys.stderr)
        return 2
    spark = spark_session("py4j-sites", master="local[2]", extra_conf=pr.PROBE_CONF)
    work = Path("/tmp/sluice-py4j-sites") / f"{query}-{fmt}"
    if query in nx.joins.PAIR_QUERIES:  # q3, q8: persons and auctions, 2 files of each
        spec = nx.join_spec_file(ds, query, f"sites_{query}", fmt, 2, 2, work)
    else:
        source = nx.bid_source(ds, fmt, 2)
        spec = nx.sluice_spec(f"sites_{query}", nx.SPECS[query], source, 2, work)
    sites: collections.Counter[str] = collections.Counter()

    class Sites(pr.Py4JCounter):
        def _see(self, command: str) -> None:
            super()._see(command)
            if command.startswith(pr._DELETE):
                return
            stack = traceback.extract_stack()
            own = [f for f in stack if "/include/sluice/" in f.filename]
            frame = own[-1] if own else stack[-4]
            where = frame.filename.split("/include/")[-1]
            sites[f"{where}:{frame.lineno} {frame.name}"] += 1

    rt = runtime(load_spec(str(spec)))
    for _ in range(epochs):
        plan = plan_epoch(rt)
        if plan is None:
            break
        sites.clear()
        with Sites() as counter:
            record = process_epoch(rt, spark, plan.epoch)
        commit_epoch(rt, plan.epoch, record.attempt)
        print(f"epoch {plan.epoch}: {counter.calls} calls, {counter.deletes} deletes")
    for site, n in sites.most_common(top):
        print(f"{n:5d} {site}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
