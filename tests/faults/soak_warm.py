"""The warm soak: qos-2 epochs through ONE ``sluice serve`` lifetime under faults that do not
kill the server, with its heap after GC and thread counts followed all along.

``python -m tests.faults.soak_warm --epochs 1000 --minutes 70`` (``make soak SOAK_MODE=warm``)
builds what the cold soak (:mod:`tests.faults.soak`) builds (SeaweedFS, the fault proxy, the
click pipeline on S3 with ``max_files_per_epoch: 1`` and a small ``retained``), starts one
``sluice serve`` (tests/fixtures/serve.py; its s3a and boto3 go through the proxy too) and
drives one epoch per step, planned and committed here, processed by the server:

* ``clean``: plan here, process served, commit here (what a warm DAG run does);
* ``crash``: a ``sluice plan|commit`` subprocess SIGKILLed at a named fault point (plan,
  commit, retention: the server's own process points would kill the server, which the cold
  soak and tests/serve/test_crashes.py cover);
* ``client_kill``: a client (a Python subprocess long-polling its served attempt, as the
  Airflow task does) SIGKILLed while the attempt runs; the retry follows the running attempt;
* ``cancel``: a served attempt cancelled (``DELETE /v1/attempts/<id>``) at a random moment
  inside its Spark jobs, then retried;
* ``race``: two attempts of one epoch at once, one served and one local (this process's own
  Spark session), committed at the same moment from two threads;
* ``zombie``: a served attempt that commits after a newer epoch committed.

Storage faults hit every request at ``--fault-rate``. The input arrives while the soak runs (a
few files ahead of the committed epochs), so ``--minutes`` can end it early: then the files not
yet written are never written, the faults stop and the written ones are drained. Every
``--sample-every`` epochs ``GET /v1/health?gc=1&threads=1`` measures the server: heap used
after a full GC, JVM threads (and Py4J's ``Thread-N``), Python threads, RSS of the server and
of its JVM. The summary is the cold soak's reconciliation plus that curve and the flatness rule
(:func:`flatness`); the exit code is non-zero unless duplicates and losses are 0 and the curve
is flat.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sluice.demo import render_click_files
from sluice.protocol import (
    FAULT_POINTS,
    RETENTION_FAULT_POINTS,
    commit_epoch,
    plan_epoch,
    process_epoch,
)
from sluice.serve import ServeClient
from sluice.storage import open_store
from sluice.storage.s3options import S3Options

from tests.faults.crashing import step_of
from tests.faults.soak import FAULT_MIX, Soak
from tests.fixtures.pipelines import Workspace
from tests.fixtures.s3proxy import FaultProxy
from tests.fixtures.seaweed import start_seaweed
from tests.fixtures.serve import ServeProcess

KINDS = {"clean": 45, "crash": 15, "client_kill": 8, "cancel": 8, "race": 12, "zombie": 12}
CLIENT_POINTS = [p for p in FAULT_POINTS + RETENTION_FAULT_POINTS if step_of(p) != "process"]
STEP_TIMEOUT_S = 600
LOOKAHEAD = 3  # input files written ahead of the committed epochs
MiB = 1 << 20
# The flatness rule (printed with the values), over the samples taken at rest in the second half
# of the run: the heap after GC's least-squares slope, and the JVM threads against their median.
HEAP_SLOPE_MIB_PER_100 = 2.0
REST_THREAD_BAND = 8
PY4J_THREAD_SPREAD = 8
PYTHON_THREAD_SPREAD = 4
CLIENT = (
    "import os, sys\n"
    "from sluice.serve import ServeClient\n"
    "ServeClient(sys.argv[1], os.environ['SLUICE_SERVE_TOKEN'], timeout=60)"
    ".process(sys.argv[2], int(sys.argv[3]), run_id=sys.argv[4])\n"
)


class WarmSoak(Soak):
    def __init__(
        self,
        args: argparse.Namespace,
        ws: Workspace,
        proxy: FaultProxy,
        files: list[tuple[str, bytes]],
        server: ServeProcess,
        inbox: Any,
    ) -> None:
        super().__init__(args, ws, proxy, files)
        self.server, self.inbox, self.client = server, inbox, server.client()
        self.written = self.rested = 0
        self.samples: list[dict[str, Any]] = []
        self.kinds = dict(KINDS, **dict(_weight(k) for k in args.kinds.split(",") if k))
        self.kind_seconds: dict[str, list[float]] = {kind: [] for kind in self.kinds}

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        from sluice.spark import spark_session

        self.proxy.policy(rates={k: self.args.fault_rate * s for k, s in FAULT_MIX.items()})
        self.spark = spark_session("sluice-soak-warm", s3=self.spec.s3)  # the local attempts
        rt = self.rt("w")
        self.first_epoch = rt.repo.latest_epoch() + 1
        started, steps, failures_in_a_row = time.monotonic(), 0, 0
        deadline = started + self.args.minutes * 60
        self._feed(rt)
        self._sample(rt, started)
        while rt.repo.latest_epoch() < self.args.epochs and time.monotonic() < deadline:
            kind = self.rng.choices(list(self.kinds), weights=list(self.kinds.values()))[0]
            steps += 1
            began = time.monotonic()
            try:
                self._settle()
                getattr(self, f"_{kind}")(rt.repo.latest_epoch() + 1)
                failures_in_a_row = 0
            except Exception as exc:  # storage retries exhausted, a failed attempt: recover
                self.failed_steps[type(exc).__name__] += 1
                failures_in_a_row += 1
                print(f"  step {steps} ({kind}) failed: {str(exc).splitlines()[0][:200]}")
                if failures_in_a_row >= 20:
                    raise
            self.kind_seconds[kind].append(time.monotonic() - began)
            self._collect(rt)
            self._feed(rt)
            self._progress(steps, rt.repo.latest_epoch(), started)
            epoch, last = rt.repo.latest_epoch(), self.samples[-1]["epoch"]
            if epoch // self.args.sample_every > last // self.args.sample_every:
                self._sample(rt, started)
            rest = self.args.rest_every
            if epoch >= self.args.warmup and epoch // rest > self.rested // rest:
                self._sample(rt, started, rest=True)
        self.proxy.heal()  # the written files, fault-free; no more are written
        self._settle()
        while self._clean(rt.repo.latest_epoch() + 1, prefix="z"):
            self._collect(rt)
        self._collect(rt)
        if not (self.samples[-1]["rest"] and self.rested == rt.repo.latest_epoch()):
            self._sample(rt, started, rest=True)
        self.files = self.files[: self.written]  # the input the reference is computed over
        seconds = time.monotonic() - started
        return self._summary(
            rt, steps, seconds, title="sluice warm soak", module="tests.faults.soak_warm",
            extra=self._curve(rt, seconds),
        )  # fmt: skip

    def _feed(self, rt: Any) -> None:
        """The outside world writes the next files, straight to S3 (no faults)."""
        until = min(len(self.files), rt.repo.latest_epoch() + LOOKAHEAD)
        while self.written < until:
            key, data = self.files[self.written]
            self.inbox.put(key, data)
            self.written += 1

    def _settle(self) -> None:
        """Wait for the server's running attempts to end (a step that failed while its served
        attempt went on): the next attempt of the pipeline would get a 409."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while any(a["status"] == "running" for a in self.client.attempts()):
            if time.monotonic() > deadline:
                raise TimeoutError("the server's attempts did not end")
            time.sleep(0.2)

    def _sample(self, rt: Any, started: float, *, rest: bool = False) -> None:
        """The server's health; ``rest``: after --rest-seconds without requests, when Spark's
        cached pools have let their idle threads go (60 s keep-alive): the JVM threads left
        are the ones that could leak."""
        if rest:
            self.rested = rt.repo.latest_epoch()
            # a GC first: the shuffles and broadcasts it frees are removed by Spark's cleaner
            # on block-manager pool threads, which then idle out within the rest (60 s)
            self.client.health(gc=True)
            time.sleep(self.args.rest_seconds)
        health = self.client.health(gc=True, threads=True)  # threads counted before its GC
        sample = {
            "epoch": rt.repo.latest_epoch(),
            "rest": rest,
            "minutes": (time.monotonic() - started) / 60,
            "heap_mib": health["driver_heap"]["used_bytes"] / MiB,
            "heap_max_mib": health["driver_heap"]["max_bytes"] / MiB,
            "jvm_threads": health["jvm_threads"],
            "py4j_threads": (health["jvm_thread_groups"] or {}).get("Thread-N", 0),
            "python_threads": health["python_threads"],
            "rss_mib": (health["rss_bytes"] or 0) / MiB,
            "jvm_rss_mib": (health["jvm_rss_bytes"] or 0) / MiB,
            "pid": health["pid"],
            "succeeded": health["epochs"]["succeeded"],
            "groups": health["jvm_thread_groups"] or {},
        }
        self.samples.append(sample)
        print("health " + _row(sample), flush=True)

    # -- the kinds of step ---------------------------------------------------------------

    def _plan(self, rt: Any, epoch: int) -> bool:
        return rt.repo.plan(epoch) is not None or plan_epoch(rt, max_units=1) is not None

    def _served(self, epoch: int) -> str:
        """One served attempt of ``epoch``, start to end: its attempt id."""
        run_id = f"soak__{epoch}_{uuid.uuid4().hex[:6]}"
        summary = self.client.process(self.spec_path, epoch, run_id, timeout=STEP_TIMEOUT_S)
        return str(summary["attempt"])

    def _clean(self, epoch: int, prefix: str = "c") -> bool:
        rt = self.rt(prefix)
        if not self._plan(rt, epoch):
            return False
        commit_epoch(rt, epoch, self._served(epoch))
        return True

    def _crash(self, epoch: int) -> None:
        point = self.rng.choice(CLIENT_POINTS)
        rt = self.rt("p")
        argv = ["plan", str(self.spec_path), "--max-files", "1"]
        if step_of(point) == "commit":
            if not self._plan(rt, epoch):
                return
            argv = ["commit", str(self.spec_path), "--epoch", str(epoch),
                    "--attempt", self._served(epoch)]  # fmt: skip
        env = dict(os.environ, SLUICE_FAULT=point, SLUICE_FAULT_EPOCH=str(epoch), COLUMNS="200")
        with (Path(self.args.workdir) / "cli.log").open("ab") as log:
            cmd = [sys.executable, "-m", "sluice.cli", *argv]
            proc = subprocess.run(
                cmd, env=env, stdout=log, stderr=log, timeout=STEP_TIMEOUT_S, check=False
            )
        self._count_kill(proc.returncode, point)

    def _client_kill(self, epoch: int) -> None:
        """SIGKILL a client while its served attempt runs; the retry follows the attempt (as
        the operator's retry does) and commits it."""
        rt = self.rt("k")
        if not self._plan(rt, epoch):
            return
        before = {a["id"] for a in self.client.attempts()}
        env = dict(os.environ, SLUICE_SERVE_TOKEN=self.server.token)
        argv = [self.server.url, str(self.spec_path), str(epoch), f"soak__{epoch}_client"]
        proc = subprocess.Popen([sys.executable, "-c", CLIENT, *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        request = self._await(lambda: next((a for a in self.client.attempts()
                                            if a["id"] not in before), None), proc)  # fmt: skip
        time.sleep(self.rng.uniform(0.0, self.args.kill_window))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        self._count_kill(proc.wait(timeout=60), "client killed while its attempt ran")
        status = self.client.wait(request["id"], STEP_TIMEOUT_S)
        commit_epoch(rt, epoch, str(ServeClient.result(status)["attempt"]))

    def _cancel(self, epoch: int) -> None:
        """Cancel a served attempt inside its Spark jobs, then retry the epoch."""
        rt = self.rt("n")
        if not self._plan(rt, epoch):
            return
        started = self.client.start(self.spec_path, epoch, f"soak__{epoch}_cancelled")
        self._await(lambda: self._in_spark(started["id"]))
        time.sleep(self.rng.uniform(0.0, self.args.cancel_window))
        self.client.cancel(started["id"])
        status = self.client.wait(started["id"], STEP_TIMEOUT_S)
        if status["status"] == "succeeded":  # too late: its attempt is PREPARED, commit it
            self.injected["cancel: too late (attempt already prepared)"] += 1
            commit_epoch(rt, epoch, str(status["summary"]["attempt"]))
            return
        self.injected[f"cancel: served attempt {status['status']} mid-run"] += 1
        commit_epoch(rt, epoch, self._served(epoch))

    def _in_spark(self, request_id: str) -> bool:
        status = self.client.status(request_id)
        return status["status"] != "running" or (status["spark_jobs"] or {}).get("started", 0) > 0

    def _race(self, epoch: int) -> None:
        """A served and a local attempt of one epoch run at once (an Airflow retry of a warm
        task while a manual cold one runs) and commit at the same moment."""
        rts = [self.rt("x"), self.rt("y")]
        if not self._plan(rts[0], epoch):
            return
        attempts: dict[int, str] = {}
        failures: list[BaseException] = []

        def served() -> None:
            try:
                attempts[0] = self._served(epoch)
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=served)
        thread.start()
        attempts[1] = process_epoch(rts[1], self.spark, epoch).attempt
        thread.join(timeout=STEP_TIMEOUT_S)
        if failures or 0 not in attempts:
            commit_epoch(rts[1], epoch, attempts[1])
            raise RuntimeError(f"the served attempt of the race failed: {failures}")
        barrier = threading.Barrier(2)
        results: list[Any] = []

        def commit(i: int) -> None:
            barrier.wait(timeout=60)
            results.append(commit_epoch(rts[i], epoch, attempts[i]))

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=STEP_TIMEOUT_S)
        self.injected["race: a served and a local attempt commit at once"] += 1
        if len(results) == 2 and results[0].attempt != results[1].attempt:
            raise AssertionError(f"epoch {epoch}: two winners {results}")

    def _zombie(self, epoch: int) -> None:
        """A served attempt of ``epoch`` that commits after epoch+1 committed."""
        zombie, live = self.rt("zo"), self.rt("li")
        if not self._plan(zombie, epoch):
            return
        stale = self._served(epoch)
        fresh = self._served(epoch)
        commit_epoch(live, epoch, fresh)
        self._feed(live)
        self._clean(epoch + 1, prefix="li")
        returned = commit_epoch(zombie, epoch, stale)
        self.injected["zombie: stale served attempt commits late"] += 1
        if returned.attempt != fresh:
            raise AssertionError(f"epoch {epoch}: the zombie {stale} won")

    def _await(self, check: Any, proc: subprocess.Popen[bytes] | None = None) -> Any:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not (found := check()):
            if time.monotonic() > deadline or (proc is not None and proc.poll() not in (None, 0)):
                raise TimeoutError("the served attempt did not show up")
            time.sleep(0.05)
        return found

    # -- the curve ------------------------------------------------------------------------

    def _curve(self, rt: Any, seconds: float) -> tuple[list[str], bool]:
        epochs = rt.repo.latest_epoch() - self.first_epoch + 1
        every = self.args.table_every
        shown = self.samples[:1]
        for s in self.samples[1:]:
            if s["epoch"] // every > shown[-1]["epoch"] // every or s["rest"]:
                shown.append(s)
        lines = [
            f"rate: {epochs} epochs in {seconds / 60:.1f} min = {epochs / seconds * 60:.1f} "
            f"epochs/min ({os.cpu_count()} cores shared; load average "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end)",
            f"server: one lifetime (pid {sorted({s['pid'] for s in self.samples})}), "
            f"{self.samples[-1]['succeeded']} served attempts succeeded, "
            f"driver heap max {self.samples[-1]['heap_max_mib']:.0f} MiB, log {self.server.log}",
            "steps by kind (median seconds): "
            + ", ".join(
                f"{k} {len(v)} ({statistics.median(v) if v else 0:.1f} s)"
                for k, v in self.kind_seconds.items()
            ),
            "",
            f"server health (GET /v1/health?gc=1&threads=1), every {every} epochs, and at rest "
            f"({self.args.rest_seconds:.0f} s without requests) every {self.args.rest_every}:",
            HEADER,
            *(_row(s) for s in shown),
            "",
        ]
        rested = [s for s in self.samples if s["rest"]]
        usual = statistics.median(s["jvm_threads"] for s in rested) if rested else 0
        named = [s for s in rested if s in rested[:1] + rested[-1:]
                 or abs(s["jvm_threads"] - usual) > REST_THREAD_BAND / 2]  # fmt: skip
        lines += [f"JVM threads at rest by name, epoch {s['epoch']}: {s['groups']}"
                  for s in named]  # fmt: skip
        rule, flat = flatness(self.samples, self.args.warmup)
        one_lifetime = len({s["pid"] for s in self.samples}) == 1
        return [*lines, *rule, f"flat: {'yes' if flat else 'NO'}"], not (flat and one_lifetime)


def _weight(item: str) -> tuple[str, int]:
    kind, _, weight = item.partition("=")
    if kind not in KINDS:
        raise SystemExit(f"--kinds: {kind!r} is not one of {', '.join(KINDS)}")
    return kind, int(weight)


HEADER = (
    f"{'epoch':>6} {'':>4} {'min':>6} {'heap after GC MiB':>18} {'JVM threads':>12} "
    f"{'Py4J Thread-N':>14} {'Python threads':>15} {'RSS MiB':>8} {'JVM RSS MiB':>12}"
)


def _row(s: dict[str, Any]) -> str:
    return (
        f"{s['epoch']:>6} {'rest' if s['rest'] else '':>4} {s['minutes']:>6.1f} "
        f"{s['heap_mib']:>18.1f} {s['jvm_threads']:>12} {s['py4j_threads']:>14} "
        f"{s['python_threads']:>15} {s['rss_mib']:>8.0f} {s['jvm_rss_mib']:>12.0f}"
    )


def slope_per_100(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(epoch, value)`` points, per 100 epochs."""
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 100 * sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def flatness(samples: list[dict[str, Any]], warmup: int) -> tuple[list[str], bool]:
    """The rule and its values, over the samples at rest in the second half of the run (epoch
    at least half the last one, and past ``warmup``): the heap after GC's least-squares slope
    is at most HEAP_SLOPE_MIB_PER_100 MiB per 100 epochs; every JVM thread count at rest is
    within REST_THREAD_BAND of their median. Py4J ``Thread-N`` and Python threads vary by at
    most PY4J_THREAD_SPREAD / PYTHON_THREAD_SPREAD over every sample after ``warmup``. The JVM
    threads while epochs run are shown, not judged: Spark's cached pools (a new thread per task
    until their cap while none has idled 60 s) follow the epoch rate, i.e. the machine's load."""
    kept = [s for s in samples if s["epoch"] >= warmup]
    half = max(warmup, samples[-1]["epoch"] / 2) if samples else warmup
    rested = [s for s in kept if s["rest"] and s["epoch"] >= half]
    if len(kept) < 4 or len(rested) < 3:
        return [f"flatness: {len(kept)} samples after {warmup} epochs, {len(rested)} at rest "
                f"from epoch {half:.0f} (need 4 and 3)"], False  # fmt: skip
    low, high = kept[0]["epoch"], kept[-1]["epoch"]

    def spread(key: str) -> int:
        return int(max(s[key] for s in kept) - min(s[key] for s in kept))

    heap = [(float(s["epoch"]), float(s["heap_mib"])) for s in rested]
    slope = slope_per_100(heap)
    threads = [int(s["jvm_threads"]) for s in rested]
    middle = statistics.median(threads)
    worst = max(abs(t - middle) for t in threads)
    epochs = ", ".join(str(s["epoch"]) for s in rested)
    checks = [
        (f"heap after GC at rest, epochs {epochs}: "
         f"{', '.join(f'{y:.1f}' for _, y in heap)} MiB; least-squares slope "
         f"{slope:+.2f} MiB per 100 epochs (rule: <= {HEAP_SLOPE_MIB_PER_100})",
         slope <= HEAP_SLOPE_MIB_PER_100),
        (f"JVM threads at rest, same epochs: {threads}, median {middle:g}, farthest "
         f"{worst:g} from it (rule: <= {REST_THREAD_BAND})", worst <= REST_THREAD_BAND),
        (f"Py4J Thread-N max-min over epochs {low}-{high}: {spread('py4j_threads')} "
         f"(rule: <= {PY4J_THREAD_SPREAD})", spread("py4j_threads") <= PY4J_THREAD_SPREAD),
        (f"Python threads max-min over epochs {low}-{high}: {spread('python_threads')} "
         f"(rule: <= {PYTHON_THREAD_SPREAD})", spread("python_threads") <= PYTHON_THREAD_SPREAD),
    ]  # fmt: skip
    running = [s["jvm_threads"] for s in kept if not s["rest"]]
    lines = [f"flatness ({len(rested)} samples at rest from epoch {half:.0f}, "
             f"{len(kept)} after the first {warmup} epochs):"]  # fmt: skip
    lines += [f"  {'ok ' if ok else 'BAD'} {text}" for text, ok in checks]
    if running:
        lines.append(f"  (not judged) JVM threads while epochs run: median "
                     f"{statistics.median(running):.0f}, max {max(running)}")  # fmt: skip
    return lines, all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=120.0, help="stop feeding input then")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fault-rate", type=float, default=0.02, help="of S3 requests")
    parser.add_argument("--kill-window", type=float, default=3.0, help="seconds")
    parser.add_argument("--cancel-window", type=float, default=1.5, help="seconds")
    parser.add_argument("--sample-every", type=int, default=10, help="epochs")
    parser.add_argument("--table-every", type=int, default=50, help="epochs")
    parser.add_argument("--warmup", type=int, default=50, help="epochs the rule ignores")
    parser.add_argument("--rest-every", type=int, default=50, help="epochs")
    parser.add_argument("--rest-seconds", type=float, default=70.0)
    parser.add_argument("--kinds", default="", help="weights to change, e.g. cancel=20,race=0")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--summary", default=None, help="also write the summary here")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.resume = None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sluice-soak-warm-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.workdir = str(workdir)
    print(f"warm soak workdir: {workdir}")
    with (
        start_seaweed(workdir / "s3") as s3,
        FaultProxy.start(s3.endpoint_url, seed=args.seed) as proxy,
    ):
        os.environ.update(s3.aws_env())
        files = render_click_files(files=args.epochs, events_per_file=40, seed=11)
        ws = Workspace("s3", f"s3://{s3.bucket('sluice-soak')}/{uuid.uuid4().hex[:8]}")
        inbox = open_store(ws.uri("in"), s3=S3Options(endpoint_url=s3.endpoint_url))
        print(f"soak pipeline root: {ws.root} on {s3.endpoint_url}", flush=True)
        # from here on every request of the pipeline (the server, boto3 and s3a here, CLI
        # subprocesses) goes through the proxy; only the input is written around it
        os.environ.update(AWS_ENDPOINT_URL=proxy.endpoint, AWS_ENDPOINT_URL_S3=proxy.endpoint)
        server = ServeProcess([workdir], workdir / "serve")
        server.start()
        print(f"sluice serve: pid {server.proc.pid if server.proc else '?'} at {server.url}")
        try:
            return WarmSoak(args, ws, proxy, files, server, inbox).run()
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
