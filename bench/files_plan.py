"""What a ``files`` source's plan costs with many files already read: seconds and S3 requests.

    .venv/bin/python bench/files_plan.py [--sizes 10000,100000,1000000] [--quick]
        [--backends local,s3] [--layouts flat,dt] [--discovery listing,events]
        [--repeats 5] [--warm 2] [--new 100] [--threads 64] [--profile-sizes N,...]
        [--out bench/results/files-plan]

A plan is "the listing (or the store's events) minus the set of files read"
(include/sluice/sources/files.py). Each cell is a backend (``local``: a temporary folder;
``s3``: a SeaweedFS server started here on loopback), a layout (``flat``: N files
``part-<uuid>-c000.jsonl`` in one folder; ``dt``: ``dt=YYYY-MM-DD/hour=HH/part-<uuid>.jsonl``,
1,000 files an hour, the source configured with ``layout: {time_prefix:
"dt=%Y-%m-%d/hour=%H/", lookback: 2h}``), a discovery (``listing``; ``events``, S3 only: the
source's ``notifications`` read the SeaweedFS filer's events from a Kafka broker started here)
and N, the files already read (10k, 100k and 1M by default; ``--quick``: 1k and 10k).

For each (backend, layout, N) the script

1. creates the N files (one JSON line each): on local disk written directly; on S3 PUT through
   the SeaweedFS filer's HTTP API by ``--threads`` threads (about 4x the rate of boto3's
   PutObject from Python here; the objects list exactly as PutObject's do, ETag included);
2. builds the "already read" state with a real first plan,
   ``FilesSource.planning(1).plan_range(initial_offset(), None)``, for each discovery (the
   events source's first plan lists in full, as it must), checking it returns exactly the N
   files;
3. lands ``--new`` files (the newest hour partition for ``dt``, random names for ``flat``;
   through S3 PutObject on S3) and, with events, waits until the filer has sent their events;
4. times ``planning(2).plan_range(first plan's end offset, None)`` ``--repeats`` times *cold*
   (a FilesSource opened afresh each time, as a planning process does: the set of files read
   is fetched and decoded every time), then ``--warm`` times on one source (its loaded set
   kept), every plan from the same offset, so each is the same work; every plan must return
   exactly the new files (a plan that returns anything else is reported as a problem).
   One more cold plan runs under cProfile for the sizes in ``--profile-sizes`` (default: the
   largest).

Measured per plan: wall seconds (median, min, max), the split set load (a listing's plan
loads the whole set; an events plan looks up the events' files: deltas, key index, the base
only on a hit; a plan writing a new base loads it inside the write) / discovery (listing or
events) / set write, the S3 requests by operation (botocore's ``before-call`` events on the
source store's client and the checkpoint store's), the bytes of the set of files read that
were fetched, the files listed (or events read). The checkpoint store is on the same backend
(S3: the same server, another prefix of the same bucket).

Writes ``<out>.json`` (raw figures; cells of earlier runs that this run did not measure are
kept, each with its command), ``<out>.md`` (a table per backend, the ratio of the plan at the
largest N to the plan at the smallest against the target, the cost per file listed of a flat
folder, the profiles; a ``## Findings`` section written by hand is kept) and ``<out>.png``.
The temporary data (local folders, the SeaweedFS and Kafka data) is deleted at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import itertools
import json
import math
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fixtures (the SeaweedFS and Kafka launchers)

BODY = b'{"user": "u1", "url": "/", "ts": "2026-06-30T23:00:00Z", "amount": 1.0}\n'
SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}
LAYOUT = {"time_prefix": "dt=%Y-%m-%d/hour=%H/", "lookback": "2h"}
NEWEST_HOUR = datetime(2026, 6, 30, 23, tzinfo=UTC)  # the dt layout's newest partition
BUCKET = "sluice-bench"
TOPIC = "seaweed-events"
MEASURED = (  # the code a plan runs, imported at the start (its version is recorded)
    "sluice.sources.files",
    "sluice.sources.files_read",
    "sluice.sources.file_listing",
    "sluice.sources.store_events",
    "sluice.storage.local",
    "sluice.storage.s3",
)
TARGET_RATIO = 2.0  # plan at the largest N / plan at the smallest: dt layout and events
BATCH = 20_000  # files created per batch of PUTs (progress lines; bounded futures)


# -- the command line ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,1000000", help="files already read")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000")
    parser.add_argument("--backends", default="local,s3")
    parser.add_argument("--layouts", default="flat,dt")
    parser.add_argument("--discovery", default="listing,events", help="events: S3 only")
    parser.add_argument("--repeats", type=int, default=5, help="cold plans timed per cell")
    parser.add_argument("--warm", type=int, default=2, help="plans on one warm source")
    parser.add_argument("--new", type=int, default=100, help="files landed after the first plan")
    parser.add_argument("--per-partition", type=int, default=1000, help="dt: files an hour")
    parser.add_argument("--threads", type=int, default=64, help="S3: parallel PUTs")
    parser.add_argument("--profile-sizes", default=None, help="cProfile one plan (default: max N)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "files-plan"))
    parser.add_argument("--fresh", action="store_true", help="drop the cells of earlier runs")
    return parser


def main() -> int:
    args = _parser().parse_args()
    sizes = [1_000, 10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    profile_sizes = (
        {max(sizes)} if args.profile_sizes is None
        else {int(s) for s in args.profile_sizes.split(",") if s}
    )  # fmt: skip
    backends = args.backends.split(",")
    layouts = args.layouts.split(",")
    discoveries = args.discovery.split(",")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    run = _run_record(args, sizes)
    code = run["code"]
    _log(f"machine: {run['machine']}; load at start {run['load_start']}")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-files-plan-"))
    servers = Servers(tmp)
    try:
        if "s3" in backends:
            servers.start(events="events" in discoveries)
            run["seaweedfs"] = servers.weed_version()
        for backend in backends:
            for layout in layouts:
                for n in sizes:
                    wanted = [d for d in discoveries if backend == "s3" or d == "listing"]
                    if not wanted:
                        continue
                    group = Group(args, backend, layout, n, wanted, n in profile_sizes)
                    cells = [{**c, "code": code["id"]} for c in group.run(servers, tmp)]
                    _save(out, run, cells, fresh=args.fresh)
                    args.fresh = False  # the first save dropped the old cells, later ones add
    finally:
        servers.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    run["load_end"] = _loadavg()
    _save(out, run, [], fresh=False)
    _log(f"wrote {out}.json, {out}.md, {out}.png; load at end {run['load_end']}")
    print(Path(f"{out}.md").read_text())
    return 0


# -- the servers --------------------------------------------------------------------------------


class Servers:
    """A SeaweedFS on loopback (sending its filer events to a Kafka broker started here when
    events are measured); the AWS_* variables point boto3 at it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.seaweed: Any = None
        self.kafka: Any = None
        self.events = False

    def start(self, *, events: bool) -> None:
        from tests.fixtures.seaweed import start_seaweed

        self.events = events
        if events:
            from tests.fixtures.kafka import start_kafka
            from tests.fixtures.seaweed_events import start_seaweed_with_events

            self.kafka = start_kafka(self.tmp / "kafka")
            self.kafka.create_topic(TOPIC, 3)
            self.seaweed = start_seaweed_with_events(self.tmp / "seaweed", self.kafka, TOPIC)
        else:
            self.seaweed = start_seaweed(self.tmp / "seaweed")
        os.environ.update(self.seaweed.aws_env())
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            os.environ.pop(name, None)
        self.seaweed.bucket(BUCKET)

    def weed_version(self) -> str:
        from tests.fixtures.seaweed import _weed_binary

        found = subprocess.run([_weed_binary(), "version"], capture_output=True, text=True)
        return found.stdout.strip().splitlines()[0] if found.stdout else "?"

    def events_total(self) -> int:
        return sum(self.kafka.end_offsets(TOPIC).values())

    def settle_events(self, at_least: int, what: str, timeout_s: float = 900.0) -> int:
        """Wait until the topic holds ``at_least`` events and stops growing (the filer sends
        them after the write answered); the total."""
        deadline = time.monotonic() + timeout_s
        last, still = -1, 0
        while True:
            total = self.events_total()
            still = still + 1 if total == last else 0
            last = total
            if total >= at_least and still >= 4:
                return total
            if time.monotonic() > deadline:
                _log(f"WARNING: {what}: {total} events, expected at least {at_least}")
                return total
            time.sleep(0.5)

    def stop(self) -> None:
        for server in (self.seaweed, self.kafka):
            if server is not None:
                server.stop()


# -- one (backend, layout, N): create, first plans, land the new files, time plans ------------


@dataclass
class Group:
    args: argparse.Namespace
    backend: str
    layout: str
    n: int
    discoveries: list[str]
    profile: bool

    def run(self, servers: Servers, tmp: Path) -> list[dict[str, Any]]:
        name = f"{self.layout}-{self.n}-{uuid.uuid4().hex[:6]}"
        if self.backend == "local":
            root = tmp / name
            base_uri = root.as_uri()
        else:
            root = None
            base_uri = f"s3://{BUCKET}/{name}"
        self.base_uri = base_uri
        self.servers = servers
        _log(f"== {self.backend} {self.layout} N={self.n:,}: {base_uri}")
        try:
            return self._run(root, name)
        finally:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)

    def _run(self, root: Path | None, name: str) -> list[dict[str, Any]]:
        keys = self._keys(self.n)
        load_start = _loadavg()
        events_before = self.servers.events_total() if self._events() else 0
        t0 = time.perf_counter()
        if root is not None:
            _write_local(root / "in", keys)
        else:
            _put_filer(self.servers.seaweed, f"{BUCKET}/{name}/in", keys, self.args.threads)
        create_s = time.perf_counter() - t0
        _log(f"created {self.n:,} files in {create_s:.1f} s ({self.n / create_s:,.0f}/s)")
        settle_s = None
        if self._events():
            t1 = time.perf_counter()
            self.servers.settle_events(events_before + self.n, "creation")
            settle_s = time.perf_counter() - t1
            _log(f"their events are on the topic {settle_s:.1f} s later")
        firsts: dict[str, tuple[Any, float]] = {}
        for discovery in self.discoveries:
            src = self._source(discovery).source
            t1 = time.perf_counter()
            first = src.planning(1).plan_range(src.initial_offset(), None)
            first_s = time.perf_counter() - t1
            problem = _check(first, set(keys), "first plan")
            if problem:
                raise SystemExit(f"{self.backend} {self.layout} {discovery}: {problem}")
            assert first is not None
            firsts[discovery] = (first.end, first_s)
            _log(f"first plan ({discovery}): {first_s:.2f} s, set of {first.end.read.files:,}")
        new = self._new_keys()
        events_before = self.servers.events_total() if self._events() else 0
        t1 = time.perf_counter()
        self._land(root, name, new)
        land_s = time.perf_counter() - t1
        if self._events():
            self.servers.settle_events(events_before + len(new), "new files")
        cells = []
        for discovery in self.discoveries:
            start, first_s = firsts[discovery]
            cell = {
                "backend": self.backend,
                "layout": self.layout,
                "discovery": discovery,
                "n": self.n,
                "new": len(new),
                "create_s": create_s,
                "create_rate": self.n / create_s,
                "create_how": "files written directly"
                if root is not None
                else f"filer HTTP PUT, {self.args.threads} threads",
                "events_settle_s": settle_s if discovery == "events" else None,
                "first_plan_s": first_s,
                "land_s": land_s,
                "set_files": start.read.files,
                "set_objects": len(start.read.objects),
                "load_start": load_start,
                "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
                "command": _command(),
                **self._measure(discovery, start, set(new)),
            }
            cell["load_end"] = _loadavg()
            cells.append(cell)
            _log(_summary(cell))
        return cells

    def _events(self) -> bool:
        return self.backend == "s3" and "events" in self.discoveries

    # -- names -----------------------------------------------------------------------------

    def _keys(self, count: int) -> list[str]:
        if self.layout == "flat":
            return [f"part-{uuid.uuid4()}-c000.jsonl" for _ in range(count)]
        per = self.args.per_partition
        hours = math.ceil(count / per)
        return [
            f"{_partition(NEWEST_HOUR - timedelta(hours=hours - 1 - i // per))}"
            f"part-{uuid.uuid4()}.jsonl"
            for i in range(count)
        ]

    def _new_keys(self) -> list[str]:
        if self.layout == "flat":
            return [f"part-{uuid.uuid4()}-c000.jsonl" for _ in range(self.args.new)]
        return [f"{_partition(NEWEST_HOUR)}part-{uuid.uuid4()}.jsonl" for _ in range(self.args.new)]

    def _land(self, root: Path | None, name: str, keys: list[str]) -> None:
        if root is not None:
            _write_local(root / "in", keys)
            return
        client = self.servers.seaweed.client()
        for key in keys:
            client.put_object(Bucket=BUCKET, Key=f"{name}/in/{key}", Body=BODY)

    # -- sources ---------------------------------------------------------------------------

    def _source(self, discovery: str) -> Probe:
        """A FilesSource as a pipeline opens one (its sets of files read in the checkpoint
        store, on the same backend), with its probes."""
        from sluice.sources.files import FilesSource
        from sluice.sources.files_read import ReadLog
        from sluice.spec import FilesSourceConfig
        from sluice.storage import open_store

        fields: dict[str, Any] = {"path": f"{self.base_uri}/in", "format": "jsonl",
                                  "schema": dict(SCHEMA)}  # fmt: skip
        if self.layout == "dt":
            fields["layout"] = dict(LAYOUT)
        feed = None
        if discovery == "events":
            kafka = self.servers.kafka.bootstrap
            fields["notifications"] = {"topic": TOPIC, "format": "seaweedfs",
                                       "bootstrap_servers": kafka}  # fmt: skip
        config = FilesSourceConfig.model_validate(fields, context={"spec": True})
        if discovery == "events":
            from sluice.sources.store_events import StoreEvents

            assert config.notifications is not None
            feed = StoreEvents(config.notifications, config.path, {})
        ckpt = open_store(f"{self.base_uri}/ckpt-{discovery}")
        log = ReadLog(ckpt, "sources/source/files-read/")
        src = FilesSource(config, open_store(config.path), log=log, required=("ts",), events=feed)
        return Probe(src)

    # -- the timed plans ---------------------------------------------------------------------

    def _measure(self, discovery: str, start: Any, new: set[str]) -> dict[str, Any]:
        probe = self._source(discovery)
        set_bytes = sum(probe.source.log.store.info(k).size for k in start.read.objects)
        runs: list[dict[str, Any]] = []
        problems: list[str] = []
        for _ in range(self.args.repeats):
            probe = self._source(discovery)  # cold: opened afresh, nothing loaded
            runs.append(probe.plan(start))
            if problem := _check(probe.last, new, "timed plan"):
                problems.append(problem)
        warm: list[dict[str, Any]] = []
        for _ in range(self.args.warm):  # the last cold source, its set of files read loaded
            warm.append(probe.plan(start))
            if problem := _check(probe.last, new, "warm plan"):
                problems.append(problem)
        profile = None
        if self.profile:
            probe = self._source(discovery)
            profiler = cProfile.Profile()
            profiled = probe.plan(start, profiler)
            profile = {"seconds": profiled["s"], "top": _top(profiler)}
            if problem := _check(probe.last, new, "profiled plan"):
                problems.append(problem)
        cycle = self._cycle(discovery, start, new, problems)
        for problem in problems:
            _log(f"PROBLEM: {problem}")
        seconds = [r["s"] for r in runs]
        middle = sorted(runs, key=lambda r: r["s"])[len(runs) // 2]
        return {
            "set_bytes": set_bytes,
            "plan_s": seconds,
            "plan_s_median": statistics.median(seconds),
            "warm_s": [r["s"] for r in warm],
            "warm_s_median": statistics.median([r["s"] for r in warm]) if warm else None,
            "phases_median": {
                name: statistics.median(r["phases"].get(name, 0.0) for r in runs)
                for name in ("load", "discover", "events", "write")
            },
            "requests": middle["requests"],
            "requests_all": [r["requests"] for r in runs],
            "fetched_bytes": middle["fetched_bytes"],
            "listed": middle["listed"],
            "events_read": middle["events_read"],
            "end_set_files": middle["end_set_files"],
            "problems": problems,
            "profile": profile,
            **cycle,
        }

    def _cycle(
        self, discovery: str, start: Any, new: set[str], problems: list[str]
    ) -> dict[str, Any]:
        """The plans of the cycle of ten that cost more, one cold plan each: the plan that
        writes a new base of the set (from an offset naming the base and DELTAS_PER_BASE - 1
        deltas, empty ones written as a plan writes its delta) and, with events, the plan
        that lists in full (``since_listing`` = ``full_listing_every`` - 1)."""
        from dataclasses import replace

        from sluice.sources.files_read import DELTAS_PER_BASE, ReadSet

        log = self._source(discovery).source.log
        deltas = tuple(log._put(e, "delta", {}) for e in range(2, DELTAS_PER_BASE + 1))
        full = replace(start, read=ReadSet(start.read.base, deltas, start.read.files))
        probe = self._source(discovery)  # cold again: nothing loaded
        compact = probe.plan(full, epoch=DELTAS_PER_BASE + 1)
        if problem := _check(probe.last, new, "plan writing a new base"):
            problems.append(problem)
        end = probe.last.end.read if probe.last is not None else None
        if end is not None and (end.deltas or end.base is None):
            problems.append(f"plan writing a new base: wrote {end}")
        out: dict[str, Any] = {
            "compact_s": compact["s"],
            "compact_phases": compact["phases"],
            "compact_requests": compact["requests"],
            "compact_set_files": end.files if end is not None else None,
            "compact_bytes": log.store.info(end.base).size if end and end.base else None,
            "full_listing_s": None,
        }
        if discovery == "events":
            every = probe.source.config.notifications.full_listing_every
            probe = self._source(discovery)
            listing = probe.plan(replace(start, since_listing=every - 1))
            if problem := _check(probe.last, new, "events plan listing in full"):
                problems.append(problem)
            out.update(
                full_listing_every=every,
                full_listing_s=listing["s"],
                full_listing_phases=listing["phases"],
                full_listing_requests=listing["requests"],
            )
        return out


class Probe:
    """A FilesSource with timers on its steps and counters on its S3 clients."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.phases: dict[str, float] = Counter()
        self.counts: dict[str, int] = {}
        self.requests: Counter[str] = Counter()
        self.fetched = 0
        self.last: Any = None
        log = source.log
        log.load = self._timed("load", log.load)  # also inside write, for a new base
        log.lookup = self._timed("load", log.lookup)  # events: the entries of their files
        log.write = self._timed("write", log.write)
        source._discover = self._timed("discover", source._discover, lambda r: len(r[0]))
        if source.events is not None:
            source.events.read = self._timed("events", source.events.read, len)
        clients = {
            id(c): c for s in (source.store, log.store) if (c := getattr(s, "_client", None))
        }
        for client in clients.values():
            client.meta.events.register("before-call.s3", self._request)
            client.meta.events.register("after-call.s3.GetObject", self._fetched)

    def _timed(
        self, name: str, fn: Callable[..., Any], count: Callable[[Any], int] | None = None
    ) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            self.phases[name] += time.perf_counter() - t0
            if count is not None:
                self.counts[name] = count(result)
            return result

        return timed

    def _request(self, event_name: str, **_: Any) -> None:
        self.requests[event_name.rsplit(".", 1)[-1]] += 1

    def _fetched(self, parsed: dict[str, Any], **_: Any) -> None:
        self.fetched += int(parsed.get("ContentLength") or 0)

    def plan(
        self, start: Any, profiler: cProfile.Profile | None = None, *, epoch: int = 2
    ) -> dict[str, Any]:
        self.phases.clear()
        self.counts.clear()
        self.requests.clear()
        self.fetched = 0
        planner = self.source.planning(epoch)
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        try:
            self.last = planner.plan_range(start, None)
        finally:
            if profiler is not None:
                profiler.disable()
        seconds = time.perf_counter() - t0
        end = self.last.end.read.files if self.last is not None else None
        return {
            "s": seconds,
            "phases": dict(self.phases),
            "requests": dict(self.requests),
            "fetched_bytes": self.fetched,
            "listed": self.counts.get("discover"),
            "events_read": self.counts.get("events"),
            "end_set_files": end,
        }


def _check(rng: Any, expected: set[str], what: str) -> str | None:
    """Why ``rng`` is not exactly ``expected`` (each once, nothing changed), or None."""
    if rng is None:
        return f"{what}: no range, expected {len(expected)} files"
    files = list(rng.files)
    problems = []
    if len(files) != len(set(files)):
        problems.append(f"{len(files) - len(set(files))} files twice")
    if missing := expected - set(files):
        problems.append(f"{len(missing)} missing (e.g. {sorted(missing)[:2]})")
    if extra := set(files) - expected:
        problems.append(f"{len(extra)} not new (e.g. {sorted(extra)[:2]})")
    if rng.changed:
        problems.append(f"{len(rng.changed)} reported changed")
    return f"{what}: " + "; ".join(problems) if problems else None


def _top(profiler: cProfile.Profile, count: int = 25) -> list[dict[str, Any]]:
    """The functions of a profile by cumulative time, with their own time."""
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, func), (_cc, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{_short(file)}:{line}({func})", "calls": calls,
                     "own_s": own, "cumulative_s": cumulative})  # fmt: skip
    by_cumulative = sorted(rows, key=lambda r: -r["cumulative_s"])[:count]
    by_own = sorted(rows, key=lambda r: -r["own_s"])[:count]
    seen, top = set(), []
    for row in by_cumulative + by_own:
        if row["function"] not in seen:
            seen.add(row["function"])
            top.append(row)
    return top


def _short(file: str) -> str:
    """A profiled function's file, from its package (``sluice/...``, ``botocore/...``)."""
    for marker in ("site-packages/", "include/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return re.sub(r"^.*/lib/python3\.\d+/", "", file)


# -- creating files -----------------------------------------------------------------------------


def _partition(hour: datetime) -> str:
    return hour.strftime(LAYOUT["time_prefix"])


def _write_local(folder: Path, keys: list[str]) -> None:
    made: set[Path] = set()
    for key in keys:
        path = folder / key
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, BODY)
        finally:
            os.close(fd)


def _put_filer(server: Any, folder: str, keys: list[str], threads: int) -> None:
    """PUT each key under ``/buckets/<folder>/`` through the filer's HTTP API (a keep-alive
    connection per thread), in batches; progress on stderr."""
    port = server.ports["filer.port"]
    local = threading.local()

    def put(key: str) -> None:
        path = quote(f"/buckets/{folder}/{key}", safe="/=-_.")
        for attempt in range(6):
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                conn.request("PUT", path, body=BODY)
                response = conn.getresponse()
                response.read()
                if response.status < 300:
                    return
                error = f"HTTP {response.status}"
            except (OSError, http.client.HTTPException) as exc:
                error = repr(exc)
            conn.close()
            local.conn = None
            time.sleep(0.2 * 2**attempt)
        raise RuntimeError(f"PUT {path} failed: {error}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for done in range(0, len(keys), BATCH):
            list(pool.map(put, keys[done : done + BATCH]))
            if len(keys) > BATCH:
                made = min(done + BATCH, len(keys))
                rate = made / (time.perf_counter() - t0)
                _log(f"  {made:,} / {len(keys):,} PUT ({rate:,.0f}/s)")


# -- results ------------------------------------------------------------------------------------


def _save(out: Path, run: dict[str, Any], cells: list[dict[str, Any]], *, fresh: bool) -> None:
    """Merge ``cells`` into ``<out>.json`` (a cell replaces the one of the same key), then
    render ``<out>.md`` and ``<out>.png``."""
    path = Path(f"{out}.json")
    data: dict[str, Any] = {"runs": [], "cells": []}
    if path.exists() and not fresh:
        data = json.loads(path.read_text())
    runs = [r for r in data["runs"] if r["id"] != run["id"]] + [run]
    keys = {_key(c) for c in cells}
    kept = [c for c in data["cells"] if _key(c) not in keys]
    replaced = [c for c in data["cells"] if _key(c) in keys]
    new_code = {_key(c): c.get("code") for c in cells}
    earlier = [  # the figures of the code before, for the comparison (one per key and code)
        c for c in data.get("earlier", [])
        if (_key(c), c.get("code")) not in {(_key(r), r.get("code")) for r in replaced}
    ] + [c for c in replaced if c.get("code") != new_code[_key(c)]]  # fmt: skip
    data = {"runs": runs, "cells": sorted(kept + cells, key=_order),
            "earlier": sorted(earlier, key=_order)}  # fmt: skip
    path.write_text(json.dumps(data, indent=1) + "\n")
    md = Path(f"{out}.md")
    findings = _findings(md)
    md.write_text(_render(data) + findings)
    _chart(data, Path(f"{out}.png"))


def _key(cell: dict[str, Any]) -> tuple[str, str, str, int]:
    return cell["backend"], cell["layout"], cell["discovery"], cell["n"]


def _order(cell: dict[str, Any]) -> tuple[Any, ...]:
    return (["local", "s3"].index(cell["backend"]), cell["discovery"] != "listing",
            cell["layout"], cell["n"])  # fmt: skip


def _findings(md: Path) -> str:
    """The hand-written ``## Findings`` section of ``md`` (kept across renders)."""
    if not md.exists():
        return ""
    text = md.read_text()
    at = text.find("\n## Findings")
    return text[at:] if at >= 0 else ""


def _render(data: dict[str, Any]) -> str:
    cells = data["cells"]
    lines = [
        "# files source: plan cost with many files already read",
        "",
        "`bench/files_plan.py`: a plan is the listing (or the store's events) minus the set of "
        "files read. Each row: N files already read (by a real first plan), then 100 new files "
        "landed, then `planning(2).plan_range(first end offset)` timed, each plan from the same "
        "offset. *Cold*: a FilesSource opened afresh per plan (as a planning process: the set of "
        "files read fetched and decoded each time); *warm*: one source, its set kept loaded. "
        "Every timed plan returned exactly the 100 new files unless a row says otherwise.",
        "",
        "Runs (the machine is shared with other engineers' builds and test runs: the load "
        "average is given, and absolute seconds are inflated by it):",
        "",
    ]
    for run in data["runs"]:
        lines.append(
            f"* `{run['command']}` — {run['date']}; {run['machine']}; load average at start "
            f"{run['load_start']}, at end {run.get('load_end', '?')}"
            + (f"; {run['seaweedfs']}" if run.get("seaweedfs") else "")
            + f"; {_code_text(run.get('code'))}"
        )
    for backend in ("local", "s3"):
        rows = [c for c in cells if c["backend"] == backend]
        if rows:
            lines += ["", f"## {'Local disk' if backend == 'local' else 'S3 (SeaweedFS)'}", ""]
            lines += _table(rows)
    lines += ["", "## Scaling: plan at the largest N / plan at the smallest", ""]
    lines += _ratios(cells)
    flat = [c for c in cells if c["layout"] == "flat" and c["discovery"] == "listing"]
    if flat:
        lines += ["", "## Flat folder: cost per file listed", ""]
        lines += _per_file(cells)
    profiled = [c for c in cells if c.get("profile")]
    if profiled:
        lines += ["", "## Profiles (one more cold plan under cProfile; its overhead inflates "
                  "the total)", ""]  # fmt: skip
        for cell in profiled:
            lines += _profile(cell)
    if data.get("earlier"):
        lines += ["", "## The same cells on earlier code", ""]
        lines += _earlier(cells, data["earlier"])
    problems = [(c, p) for c in cells for p in c.get("problems", [])]
    lines += ["", "## Checks", ""]
    if problems:
        lines += [f"* **{_name(c)} N={c['n']:,}: {p}**" for c, p in problems]
    else:
        lines.append(
            "Every first plan returned exactly the N files and every timed plan (cold, warm, "
            "profiled) exactly the 100 new ones: none twice, none missed, none reported changed."
        )
    return "\n".join(lines) + "\n"


def _code_text(code: dict[str, Any] | None) -> str:
    if not code:
        return "code not recorded"
    dirty = f", with uncommitted changes to {len(code['dirty'])} file(s)" if code["dirty"] else ""
    return f"code `{code['id']}` (HEAD {code['head']}{dirty})"


def _earlier(cells: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[str]:
    now = {_key(c): c for c in cells}
    lines = [
        "| backend | layout / discovery | N | code | plan s (cold median) | set load / discover "
        "/ set write s | warm s | code now | plan s now | set load / discover / set write s "
        "now | warm s now |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for old in earlier:
        new = now.get(_key(old))
        if new is None:
            continue

        def split(c: dict[str, Any]) -> str:
            p = c["phases_median"]
            return f"{p['load']:.3f} / {p['discover']:.3f} / {p['write']:.3f}"

        def warm(c: dict[str, Any]) -> str:
            return f"{c['warm_s_median']:.3f}" if c.get("warm_s_median") is not None else "—"

        lines.append(
            f"| {old['backend']} | {old['layout']} / {old['discovery']} | {old['n']:,} | "
            f"`{old.get('code', '?')}` | {old['plan_s_median']:.3f} | {split(old)} | "
            f"{warm(old)} | `{new.get('code', '?')}` | {new['plan_s_median']:.3f} | "
            f"{split(new)} | {warm(new)} |"
        )
    return lines


def _name(cell: dict[str, Any]) -> str:
    layout = "flat" if cell["layout"] == "flat" else "dt= layout"
    return f"{cell['backend']} {layout}, {cell['discovery']}"


HEAD = (
    "| layout / discovery | N read | plan s median (min–max), cold | warm s | set load / "
    "discover / set write s | S3 requests per plan | set of files read: entries, bytes | "
    "listed (events read) | files/s listed | plan writing a new base: s (base bytes) | "
    "events: plan listing in full s | mean s per plan over 10 | first plan s | creating N |"
)


def _cycle_mean(c: dict[str, Any]) -> float:
    """The mean seconds per plan over a cycle of ten plans: one writes a new base, one (events)
    lists in full, the others are steady plans (the two may coincide: then this is high)."""
    special = [c["compact_s"], *([c["full_listing_s"]] if c.get("full_listing_s") else [])]
    return (c["plan_s_median"] * (10 - len(special)) + sum(special)) / 10


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [HEAD, "|" + "---|" * 14]
    for c in rows:
        p = c["phases_median"]
        split = f"{p['load']:.3f} / {p['discover']:.3f} / {p['write']:.3f}"
        if c["discovery"] == "events":
            split += f" (Kafka {p['events']:.3f})"
        requests = " · ".join(f"{op} {k:,}" for op, k in sorted(c["requests"].items())) or "—"
        if c["discovery"] == "events":
            listed = f"({c['events_read']:,} events)" if c["events_read"] is not None else "—"
            rate = "—"
        else:
            listed = f"{c['listed']:,}"
            rate = f"{c['listed'] / p['discover']:,.0f}" if p["discover"] else "—"
        lo, hi = min(c["plan_s"]), max(c["plan_s"])
        warm = f"{c['warm_s_median']:.3f}" if c.get("warm_s_median") is not None else "—"
        problems = " **(see checks)**" if c.get("problems") else ""
        compact = f"{c['compact_s']:.3f} ({_bytes(c['compact_bytes'] or 0)})"
        listing = f"{c['full_listing_s']:.3f}" if c.get("full_listing_s") else "—"
        lines.append(
            f"| {c['layout']} / {c['discovery']}{problems} | {c['n']:,} | "
            f"{c['plan_s_median']:.3f} ({lo:.3f}–{hi:.3f}) | {warm} | {split} | {requests} | "
            f"{c['set_files']:,}, {_bytes(c['set_bytes'])} | {listed} | {rate} | {compact} | "
            f"{listing} | {_cycle_mean(c):.3f} | {c['first_plan_s']:.2f} | "
            f"{c['create_s']:.0f} s ({c['create_rate']:,.0f}/s) |"
        )
    return lines


def _ratios(cells: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| backend | layout / discovery | N | steady plan s (cold median) | ratio | target | "
        "mean s per plan over 10 | ratio | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["backend"], c["layout"], c["discovery"]), []).append(c)
    for (backend, layout, discovery), rows in groups.items():
        if len(rows) < 2:
            continue
        rows = sorted(rows, key=lambda c: c["n"])
        low, high = rows[0], rows[-1]
        ratio = high["plan_s_median"] / low["plan_s_median"]
        mean_low, mean_high = _cycle_mean(low), _cycle_mean(high)
        mean_ratio = mean_high / mean_low
        lines.append(
            f"| {backend} | {layout} / {discovery} | {low['n']:,} → {high['n']:,} | "
            f"{low['plan_s_median']:.3f} → {high['plan_s_median']:.3f} | {ratio:.2f}x | "
            f"{_verdict(layout, discovery, ratio)} | {mean_low:.3f} → {mean_high:.3f} | "
            f"{mean_ratio:.2f}x | {_verdict(layout, discovery, mean_ratio)} |"
        )
    return lines


def _verdict(layout: str, discovery: str, ratio: float) -> str:
    if layout == "dt" or discovery == "events":
        return f"≤ {TARGET_RATIO:.1f}x: " + ("met" if ratio <= TARGET_RATIO else "**NOT met**")
    return "none (per file listed, below)"


def _per_file(cells: list[dict[str, Any]]) -> list[str]:
    """The slope of the cold plan's seconds over the files listed (flat, listing), between
    each pair of sizes, and the same for the flat layout read by events (its set alone)."""
    lines = [
        "| backend | layout / discovery | between N | µs per file (plan) | µs per file "
        "(discover) | µs per file (set load) |",
        "|---|---|---|---|---|---|",
    ]
    for backend in ("local", "s3"):
        for discovery in ("listing", "events"):
            rows = sorted(
                (c for c in cells if c["backend"] == backend and c["layout"] == "flat"
                 and c["discovery"] == discovery),
                key=lambda c: c["n"],
            )  # fmt: skip
            pairs = list(itertools.pairwise(rows))
            if len(rows) > 2:
                pairs.append((rows[0], rows[-1]))
            for a, b in pairs:
                files = b["n"] - a["n"]

                def slope(get: Callable[[dict[str, Any]], float], a: Any = a, b: Any = b) -> str:
                    return f"{(get(b) - get(a)) / files * 1e6:.1f}"  # noqa: B023

                lines.append(
                    f"| {backend} | flat / {discovery} | {a['n']:,} → {b['n']:,} | "
                    f"{slope(lambda c: c['plan_s_median'])} | "
                    f"{slope(lambda c: c['phases_median']['discover'])} | "
                    f"{slope(lambda c: c['phases_median']['load'])} |"
                )
    return lines


def _profile(cell: dict[str, Any]) -> list[str]:
    """Sluice's functions by cumulative time, then where the time is spent (own time)."""
    prof = cell["profile"]
    total = prof["seconds"]
    lines = [
        f"### {_name(cell)}, N={cell['n']:,}: {total:.2f} s under cProfile",
        "",
        "| function | calls | own s | cumulative s | share |",
        "|---|---|---|---|---|",
    ]
    ours = [r for r in prof["top"] if r["function"].startswith("sluice/")]
    for r in sorted(ours, key=lambda r: -r["cumulative_s"])[:12]:
        lines.append(_profile_row(r, total))
    lines += ["", "Own time (the leaves):", "", "| function | calls | own s | cumulative s | "
              "share |", "|---|---|---|---|---|"]  # fmt: skip
    for r in sorted(prof["top"], key=lambda r: -r["own_s"])[:8]:
        lines.append(_profile_row(r, total, own=True))
    return [*lines, ""]


def _profile_row(r: dict[str, Any], total: float, *, own: bool = False) -> str:
    share = (r["own_s"] if own else r["cumulative_s"]) / total * 100 if total else 0
    return (
        f"| `{r['function']}` | {r['calls']:,} | {r['own_s']:.3f} | {r['cumulative_s']:.3f} | "
        f"{share:.0f}% |"
    )


def _bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return str(count)


def _chart(data: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    backends = [b for b in ("local", "s3") if any(c["backend"] == b for c in data["cells"])]
    if not backends:
        return
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 4.2), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        groups: dict[str, list[dict[str, Any]]] = {}
        for c in data["cells"]:
            if c["backend"] == backend:
                groups.setdefault(f"{c['layout']} / {c['discovery']}", []).append(c)
        for label, rows in sorted(groups.items()):
            rows = sorted(rows, key=lambda c: c["n"])
            xs = [c["n"] for c in rows]
            ys = [c["plan_s_median"] for c in rows]
            err = [[y - min(c["plan_s"]) for y, c in zip(ys, rows, strict=True)],
                   [max(c["plan_s"]) - y for y, c in zip(ys, rows, strict=True)]]  # fmt: skip
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("files already read (N)")
        ax.set_ylabel("plan seconds (cold, median; min–max)")
        ax.set_title("local disk" if backend == "local" else "S3 (SeaweedFS on loopback)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("files source: one plan with 100 new files", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the machine --------------------------------------------------------------------------------


def _run_record(args: argparse.Namespace, sizes: Iterable[int]) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex[:8],
        "command": _command(),
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "machine": f"{os.cpu_count()} cores (nproc), {_memory_gib()} GiB, "
        f"Python {platform.python_version()}, {platform.machine()}",
        "load_start": _loadavg(),
        "sizes": list(sizes),
        "code": _code_version(),
    }


def _code_version() -> dict[str, Any]:
    """The code measured: the modules a plan runs, imported now (a later edit of the
    checkout does not change this process), their hashes, HEAD and what differs from it."""
    import hashlib
    import importlib

    modules = {}
    for name in MEASURED:
        module = importlib.import_module(name)
        modules[name] = hashlib.sha256(Path(module.__file__ or "").read_bytes()).hexdigest()[:10]

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "include/sluice").splitlines()
    combined = hashlib.sha256(json.dumps(modules, sort_keys=True).encode()).hexdigest()[:8]
    return {
        "id": combined,
        "head": git("rev-parse", "--short", "HEAD"),
        "head_subject": git("log", "-1", "--format=%s")[:100],
        "dirty": dirty,
        "modules": modules,
    }


def _command() -> str:
    return ".venv/bin/python bench/files_plan.py " + " ".join(sys.argv[1:])


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _memory_gib() -> int:
    with open("/proc/meminfo") as f:
        kib = int(f.readline().split()[1])
    return round(kib / 1024 / 1024)


def _summary(c: dict[str, Any]) -> str:
    requests = " ".join(f"{op}={k}" for op, k in sorted(c["requests"].items()))
    return (
        f"{c['backend']} {c['layout']}/{c['discovery']} N={c['n']:,}: plan "
        f"{c['plan_s_median']:.3f} s (min {min(c['plan_s']):.3f}, max {max(c['plan_s']):.3f}), "
        f"warm {c['warm_s_median'] or 0:.3f} s, phases {_fmt(c['phases_median'])}, "
        f"listed {c['listed']}, events {c['events_read']}, {requests}, set "
        f"{c['set_files']:,} = {c['set_bytes']:,} B, problems {len(c['problems'])}"
    )


def _fmt(phases: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.3f}" for k, v in phases.items())


def _log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
