"""The chaos soak: hundreds of qos-2 epochs under random crashes, races and storage faults.

``python -m tests.faults.soak --epochs 300`` (``make soak``; ``make chaos`` runs it after the
slow tests) starts a SeaweedFS S3 server and a fault-injecting proxy in front of it
(tests/fixtures/s3proxy.py), then drives the click pipeline (files source, files sinks, all on
S3 through the proxy, boto3 and s3a alike) one epoch per step until ``--epochs`` epochs are
committed. Each step is drawn from a seeded generator:

* ``clean``: plan, process, commit in this process (a warm Spark session);
* ``crash``: a ``sluice plan|process|commit`` subprocess killed (SIGKILL) at a named fault
  point, retention's included (``checkpoint.retained`` is small, so commits retire epochs);
* ``kill``: a ``sluice process`` subprocess killed at a random moment inside its Spark job;
* ``race``: two attempts of one epoch, committed at once from two threads;
* ``zombie``: an attempt that commits after a newer epoch committed.

Storage faults (503 SlowDown, 500, resets before and after the server acted, hangs, slow
answers) hit every request at ``--fault-rate`` all along. A step that fails (retries
exhausted) is counted and the next step recovers. At the end every committed checkpoint's
counts are reconciled and the committed output is compared with the independent reference of
the whole input: the summary prints epochs, faults by kind, retries, records in and out,
duplicates and losses, and the exit code is non-zero unless duplicates and losses are 0.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from sluice.demo import render_click_files
from sluice.protocol import (
    FAULT_POINTS,
    RETENTION_FAULT_POINTS,
    commit_epoch,
    plan_epoch,
    process_epoch,
    run_epoch,
)
from sluice.spec import parse_spec

from tests.faults.crashing import crash_step
from tests.fixtures.pipelines import (
    Workspace,
    click_reference,
    click_spec_dict,
    committed_rows,
    runtime,
    staged_keys,
)
from tests.fixtures.s3proxy import FaultProxy
from tests.fixtures.seaweed import ACCESS_KEY, SECRET_KEY, start_seaweed
from tests.reference import compare_rows, row_key

# A JVM subprocess (crash at a process.* point, kill) costs ~30 s: kept to ~5% of steps.
KINDS = {"clean": 50, "crash": 20, "kill": 2, "race": 12, "zombie": 16}
PROCESS_POINT_SHARE = 0.15
KEYS = ["user", "window_start"]
# Shares of --fault-rate. A hang costs a client timeout (boto3 15 s, s3a longer): kept rare.
FAULT_MIX = {
    "slowdown": 0.3,
    "internal_error": 0.15,
    "reset_before": 0.15,
    "reset_after": 0.2,
    "slow": 0.18,
    "hang": 0.02,
}
STEP_TIMEOUT_S = 600
RETAINED = 6


class Soak:
    def __init__(
        self,
        args: argparse.Namespace,
        ws: Workspace,
        proxy: FaultProxy,
        files: list[tuple[str, bytes]],
    ) -> None:
        self.args, self.ws, self.proxy, self.files = args, ws, proxy, files
        self.rng = random.Random(args.seed)
        body = click_spec_dict(ws, name="soak", qos=2)
        body["source"]["max_files_per_epoch"] = 1
        body["checkpoint"]["retained"] = RETAINED
        self.spec = parse_spec(body)
        self.spec_path = Path(args.workdir) / "soak.yaml"
        self.spec_path.write_text(yaml.safe_dump(body))
        self.injected: Counter[str] = Counter()
        self.failed_steps: Counter[str] = Counter()
        self.stats: dict[int, Any] = {}  # epoch -> EpochStats, read before retention retires it
        self.spark: Any = None
        self._runtimes: dict[str, Any] = {}

    def rt(self, prefix: str) -> Any:
        """One runtime per role, reused across steps like a long-lived worker's (building one
        opens a boto3 client per store, which costs more than a small epoch's driver work)."""
        if prefix not in self._runtimes:
            self._runtimes[prefix] = runtime(self.spec, prefix=prefix)
        return self._runtimes[prefix]

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        from sluice.spark import spark_session

        rate = self.args.fault_rate
        self.proxy.policy(rates={kind: rate * share for kind, share in FAULT_MIX.items()})
        self.spark = spark_session("sluice-soak", s3=self.spec.s3)
        rt = self.rt("w")
        self.first_epoch = rt.repo.latest_epoch() + 1
        started, steps, failures_in_a_row = time.monotonic(), 0, 0
        while rt.repo.latest_epoch() < self.args.epochs:
            kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
            steps += 1
            try:
                getattr(self, f"_{kind}")(rt.repo.latest_epoch() + 1)
                failures_in_a_row = 0
            except Exception as exc:  # storage retries exhausted, a Spark job failed: recover
                self.failed_steps[type(exc).__name__] += 1
                failures_in_a_row += 1
                print(f"  step {steps} ({kind}) failed: {str(exc).splitlines()[0][:200]}")
                if failures_in_a_row >= 20:
                    raise
            self._collect(rt)
            self._progress(steps, rt.repo.latest_epoch(), started)
        self.proxy.heal()
        while run_epoch(self.rt("z"), self.spark, max_units=1) is not None:
            self._collect(rt)  # the last files, fault-free (the epochs target is reached)
        self._collect(rt)
        return self._summary(rt, steps, time.monotonic() - started)

    def _progress(self, steps: int, epoch: int, started: float) -> None:
        if steps % 10 == 0:
            rate = epoch / max(time.monotonic() - started, 1e-9) * 60
            print(f"step {steps}: epoch {epoch}/{self.args.epochs} ({rate:.1f} epochs/min), "
                  f"faults {sum(self._faults().values())}", flush=True)  # fmt: skip

    # -- the kinds of step ---------------------------------------------------------------

    def _clean(self, epoch: int) -> None:
        run_epoch(self.rt("c"), self.spark, max_units=1)

    def _crash(self, epoch: int) -> None:
        points = FAULT_POINTS + RETENTION_FAULT_POINTS
        in_process = [p for p in points if p.startswith("process.")]
        others = [p for p in points if p not in in_process]
        point = self.rng.choice(in_process if self.rng.random() < PROCESS_POINT_SHARE else others)
        log = Path(self.args.workdir) / "cli.log"
        self._count_kill(
            crash_step(self.rt("p"), self.spark, self.spec_path, point, epoch, log=log), point
        )

    def _kill(self, epoch: int) -> None:
        """SIGKILL ``sluice process`` at a random moment after its attempt started."""
        rt = self.rt("k")
        if rt.repo.plan(epoch) is None:
            plan_epoch(rt, max_units=1)
        before = {a.attempt for a in rt.repo.attempts(epoch)}
        proc = self._cli(["process"])
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while proc.poll() is None and not {a.attempt for a in rt.repo.attempts(epoch)} - before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"sluice process of epoch {epoch} started no attempt")
            time.sleep(0.2)
        time.sleep(self.rng.uniform(0.0, self.args.kill_window))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        self._count_kill(proc.wait(timeout=STEP_TIMEOUT_S), "random moment in process")

    def _race(self, epoch: int) -> None:
        """Two attempts of one epoch (an Airflow retry while the first still runs) commit at
        the same moment: the checkpoint's put-if-absent keeps exactly one."""
        rts = [self.rt("x"), self.rt("y")]
        if plan_epoch(rts[0], max_units=1) is None:
            return
        records = [process_epoch(rt, self.spark, epoch) for rt in rts]
        barrier = threading.Barrier(2)
        results: list[Any] = []

        def commit(i: int) -> None:
            barrier.wait(timeout=60)
            results.append(commit_epoch(rts[i], epoch, records[i].attempt))

        threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=STEP_TIMEOUT_S)
        self.injected["race: two attempts commit at once"] += 1
        if len(results) == 2 and results[0].attempt != results[1].attempt:
            raise AssertionError(f"epoch {epoch}: two winners {results}")

    def _zombie(self, epoch: int) -> None:
        """An attempt of ``epoch`` that wakes and commits after epoch+1 committed."""
        zombie, live = self.rt("zo"), self.rt("li")
        if plan_epoch(zombie, max_units=1) is None:
            return
        stale = process_epoch(zombie, self.spark, epoch)
        fresh = process_epoch(live, self.spark, epoch)
        commit_epoch(live, epoch, fresh.attempt)
        run_epoch(live, self.spark, max_units=1)
        returned = commit_epoch(zombie, epoch, stale.attempt)
        self.injected["zombie: stale attempt commits late"] += 1
        if returned.attempt != fresh.attempt:
            raise AssertionError(f"epoch {epoch}: the zombie {stale.attempt} won")

    # -- helpers ---------------------------------------------------------------------------

    def _cli(self, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        full = dict(os.environ, SLUICE_SPARK_MASTER="local[1]", COLUMNS="200", **env)
        log = (Path(self.args.workdir) / "cli.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", *argv[:1], str(self.spec_path), *argv[1:]],
            env=full, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip

    def _count_kill(self, returncode: int, what: str) -> None:
        if returncode == -signal.SIGKILL:
            self.injected[f"crash: {what}"] += 1
        elif returncode != 0:
            raise RuntimeError(f"sluice CLI ({what}) exited {returncode}: see cli.log")

    def _collect(self, rt: Any) -> None:
        for epoch in rt.repo.committed_epochs():
            if epoch not in self.stats:
                checkpoint = rt.repo.checkpoint(epoch)
                assert checkpoint is not None
                self.stats[epoch] = checkpoint.result.stats

    def _faults(self) -> Counter[str]:
        counts = self.proxy.counts().items()
        return Counter({f"storage: {k}": n for k, n in counts if n and k in FAULT_MIX})

    # -- the verdict ----------------------------------------------------------------------

    def _summary(
        self,
        rt: Any,
        steps: int,
        seconds: float,
        *,
        title: str = "sluice soak",
        module: str = "tests.faults.soak",
        extra: tuple[list[str], bool] = ([], False),
    ) -> int:
        """Print (and write) the reconciliation; non-zero unless it is clean. ``extra``: more
        lines for the summary and whether they fail it (the warm soak's heap/thread rule)."""
        reference = click_reference(self.files)
        out = committed_rows(self.spec, "out")
        keys = Counter(row_key(r, KEYS) for r in out)
        expected = {row_key(r, KEYS) for r in reference.emitted}
        duplicates = sum(n - 1 for n in keys.values() if n > 1)
        losses = len(expected - set(keys))
        unexpected = len(set(keys) - expected)
        first = {row_key(r, KEYS): r for r in out}  # values of one copy per key
        differences = compare_rows(list(first.values()), reference.emitted, keys=list(KEYS))
        wrong = sum(1 for d in differences if not d.startswith(("missing row", "unexpected row")))
        read = sum(s.records_read for s in self.stats.values())
        unbalanced = [e for e, s in self.stats.items()
                      if s.records_read != s.accepted + s.late + s.dead + s.filtered]  # fmt: skip
        gaps = sorted(set(range(1, rt.repo.latest_epoch() + 1)) - set(self.stats))
        # a resumed soak never saw the checkpoints retention deleted before it started
        before = [e for e in gaps if e < self.first_epoch] if self.args.resume else []
        gaps = [e for e in gaps if e not in before]
        faults = self.injected + self._faults()
        rows = [
            ("epochs committed", rt.repo.latest_epoch()),
            ("S3 requests through the proxy", self.proxy.counts().get("requests", 0)),
            ("steps", steps),
            ("faults injected", sum(faults.values())),
            *((f"  {k}", n) for k, n in sorted(faults.items())),
            ("retries (failed steps, recovered)", sum(self.failed_steps.values())),
            *((f"  {k}", n) for k, n in sorted(self.failed_steps.items())),
            ("records in (input lines)", reference.records_read),
            ("records read (sum over checkpoints)", read),
            *((("  epochs retired before a resume", len(before)),) if before else ()),
            ("epochs with unbalanced counts", len(unbalanced)),
            ("epochs without stats", len(gaps)),
            ("records out (window rows)", len(out)),
            ("expected window rows", len(expected)),
            ("duplicates", duplicates),
            ("losses", losses),
            ("unexpected rows", unexpected),
            ("rows with wrong values", wrong),
            ("staged leftovers", len(staged_keys(self.spec))),
            ("seconds", round(seconds)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [
            f"{title}: qos 2, seed {self.args.seed}, fault rate {self.args.fault_rate}, "
            f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}",
            f"command: python -m {module} {' '.join(self.args.argv)}",
            *(f"{k:<{width}}  {v}" for k, v in rows),
            *extra[0],
        ]
        print("\n" + "\n".join(lines))
        if self.args.summary:
            Path(self.args.summary).write_text("\n".join(lines) + "\n")
        bad = duplicates or losses or unexpected or wrong or unbalanced or gaps
        bad = bad or (read != reference.records_read and not before) or staged_keys(self.spec)
        bad = bad or extra[1]
        return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fault-rate", type=float, default=0.02, help="of S3 requests")
    parser.add_argument("--kill-window", type=float, default=8.0, help="seconds")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--summary", default=None, help="also write the summary here")
    parser.add_argument(
        "--resume",
        default=None,
        metavar="ROOT",
        help="go on with an earlier soak's pipeline at s3://bucket/prefix after the soak itself "
        "was killed (its S3 server, at --resume-endpoint, still running)",
    )
    parser.add_argument("--resume-endpoint", default=None, metavar="URL")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sluice-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.workdir = str(workdir)
    print(f"soak workdir: {workdir}")
    if args.resume:  # the pipeline of an earlier soak whose S3 server still runs
        os.environ["SLUICE_TEST_S3_ENDPOINT"] = args.resume_endpoint
        os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    with (
        start_seaweed(workdir / "s3") as server,
        FaultProxy.start(server.endpoint_url, seed=args.seed) as proxy,
    ):
        os.environ.update(server.aws_env())
        files = render_click_files(files=args.epochs + 5, events_per_file=40, seed=11)
        if args.resume:
            ws = Workspace("s3", args.resume)
        else:
            ws = Workspace("s3", f"s3://{server.bucket('sluice-soak')}/{uuid.uuid4().hex[:8]}")
            ws.put_files(files)  # the outside world writes straight to the server
        print(f"soak pipeline root: {ws.root} on {server.endpoint_url}", flush=True)
        # from here on, every request of the pipeline (boto3, s3a, CLI subprocesses) goes
        # through the proxy
        os.environ.update(AWS_ENDPOINT_URL=proxy.endpoint, AWS_ENDPOINT_URL_S3=proxy.endpoint)
        return Soak(args, ws, proxy, files).run()


if __name__ == "__main__":
    sys.exit(main())
