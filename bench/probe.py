"""Counts of the Spark work a block of code does: counts that timing noise cannot move.

    with SparkProbe(spark, inputs=[input_folder]) as probe:
        ...  # any code that runs Spark queries in this process
    probe.counts  # Counts(jobs=13, input_passes=3, py4j_calls=2578, cpu_s=0.3, ...)

Measured around the block, in the process that owns the live SparkSession:

* **jobs**: the Spark jobs started (their ids, from the driver's status store);
* **executor CPU / run time**: ``executorCpuTime`` / ``executorRunTime`` summed over every
  attempt of the stages those jobs ran (each stage once: a stage shared by two jobs ran once).
  JVM task threads only: Python worker processes (Python UDFs) are not included;
* **input passes**: the file scans (``Scan parquet``, ``Scan json``, ``Scan text``,
  ``Scan csv``...) of the block's SQL executions whose location is under one of ``inputs``
  and that ran (their ``number of files read`` or ``number of output rows`` > 0 in that
  execution). A scan of anything else (a state snapshot) counts in ``other_scans``; a cached
  relation read again runs no scan (its ``InMemoryTableScan`` serves the rows), so it is not
  a pass;
* **compiled**: the classes Spark's code generator compiled during the block: generated
  code it had not seen before (a literal that changes each run makes new code, compiled and
  run cold by the JVM);
* **Py4J calls**: the commands Python sent to the JVM (both py4j connection classes patched
  while the block runs); py4j's asynchronous deletes of garbage-collected Java references
  are counted apart (``py4j_deletes``).

The probe reads the status store after the block (its own Py4J calls are not counted) and
first waits for the listener bus to drain, so every job and execution of the block is there.
The store keeps a bounded history: build the session with :data:`PROBE_CONF` (a block's
jobs, stages and executions must all still be retained when it ends; the probe raises
otherwise), which also keeps file-scan locations long enough to be matched.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "PROBE_CONF",
    "Counts",
    "Py4JCounter",
    "SparkProbe",
    "Work",
    "streaming_batch",
]

# Session settings for a probed session (spark_session(..., extra_conf=...)): retention well
# above a block's jobs / stages / executions (the engine keeps 50 / 50 / 20), and scan
# locations printed whole (the default abbreviates them to 100 characters).
PROBE_CONF = {
    "spark.ui.retainedJobs": "1000",
    "spark.ui.retainedStages": "1000",
    "spark.sql.ui.retainedExecutions": "200",
    "spark.sql.maxMetadataStringLength": "100000",
}

FILE_SCANS = re.compile(r"^(Scan (parquet|json|text|csv|orc|avro)\b|BatchScan)")
RAN_METRICS = ("number of files read", "number of output rows")


@dataclass(frozen=True)
class Counts:
    """The work of a block (or of the part of it :meth:`Work.counts` selects)."""

    jobs: int = 0
    input_passes: int = 0
    py4j_calls: int = 0
    cpu_s: float = 0.0
    run_s: float = 0.0
    stages: int = 0  # stages that ran tasks (skipped ones not counted)
    tasks: int = 0
    executions: int = 0  # SQL executions
    other_scans: int = 0  # file scans that ran outside the inputs (state snapshots)
    py4j_deletes: int = 0
    compiled: int = 0  # classes Spark's code generator compiled (new generated code)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def median(runs: Sequence[Counts]) -> dict[str, float]:
        """Each count's median over ``runs`` (an even number of runs may give ``x.5``)."""
        if not runs:
            return {}
        return {k: statistics.median(getattr(r, k) for r in runs) for k in runs[0].as_dict()}


# --- Py4J -------------------------------------------------------------------------------

_lock = threading.Lock()
_active: list[Py4JCounter] = []
_originals: dict[type, Callable[..., Any]] = {}
_DELETE = "m\nd\n"  # py4j's memory-delete command (a Java reference Python dropped)


def _connection_classes() -> list[type]:
    from py4j.clientserver import ClientServerConnection
    from py4j.java_gateway import GatewayConnection

    return [ClientServerConnection, GatewayConnection]


def _install() -> None:
    for cls in _connection_classes():
        original = cls.send_command  # type: ignore[attr-defined]

        def counted(
            self: Any, command: str, *args: Any, _original: Any = original, **kwargs: Any
        ) -> Any:
            with _lock:
                for counter in _active:
                    counter._see(command)
            return _original(self, command, *args, **kwargs)

        _originals[cls] = original
        cls.send_command = counted  # type: ignore[attr-defined]


def _uninstall() -> None:
    for cls, original in _originals.items():
        cls.send_command = original  # type: ignore[attr-defined]
    _originals.clear()


class Py4JCounter:
    """Counts the commands Python sends to the JVM while active (from every thread).
    Counters nest: the connection classes are patched while at least one is active."""

    def __init__(self) -> None:
        self.calls = 0
        self.deletes = 0

    def _see(self, command: str) -> None:
        if command.startswith(_DELETE):
            self.deletes += 1
        else:
            self.calls += 1

    def __enter__(self) -> Py4JCounter:
        with _lock:
            if not _active:
                _install()
            _active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _active.remove(self)
            if not _active:
                _uninstall()


# --- the status stores ------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    id: int
    description: str
    stages: tuple[int, ...]


@dataclass(frozen=True)
class Stage:
    id: int
    ran: bool  # some attempt ran tasks (not SKIPPED)
    cpu_ns: int
    run_ms: int
    tasks: int


@dataclass(frozen=True)
class Execution:
    id: int
    description: str
    input_passes: int
    other_scans: int
    scans: tuple[str, ...]  # the scans that ran: "<node name> <location>"


@dataclass
class Work:
    """What a probed block ran: its jobs, their stages, its SQL executions, its Py4J calls."""

    jobs: list[Job] = field(default_factory=list)
    stages: dict[int, Stage] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)
    py4j_calls: int = 0
    py4j_deletes: int = 0
    compiled: int = 0

    def counts(self, where: Callable[[str], bool] | None = None) -> Counts:
        """The counts of the jobs and executions whose description ``where`` accepts (all
        when None). Py4J calls are the whole block's: they cannot be split by description."""
        jobs = [j for j in self.jobs if where is None or where(j.description)]
        execs = [e for e in self.executions if where is None or where(e.description)]
        stages = [self.stages[s] for s in sorted({s for j in jobs for s in j.stages})]
        return Counts(
            jobs=len(jobs),
            input_passes=sum(e.input_passes for e in execs),
            py4j_calls=self.py4j_calls,
            cpu_s=sum(s.cpu_ns for s in stages) / 1e9,
            run_s=sum(s.run_ms for s in stages) / 1e3,
            stages=sum(s.ran for s in stages),
            tasks=sum(s.tasks for s in stages),
            executions=len(execs),
            other_scans=sum(e.other_scans for e in execs),
            py4j_deletes=self.py4j_deletes,
            compiled=self.compiled,
        )


class _Status:
    """The driver's status stores (jobs / stages, SQL executions), read through Jackson: one
    Py4J call returns a whole object as JSON."""

    def __init__(self, spark: Any) -> None:
        jvm = self.jvm = spark.sparkContext._jvm
        self.context = spark.sparkContext._jsc.sc()
        self.app = self.context.statusStore()
        self.sql = spark._jsparkSession.sharedState().statusStore()
        scala_module = getattr(jvm.com.fasterxml.jackson.module.scala, "DefaultScalaModule$")
        self.mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
        self.mapper.registerModule(getattr(scala_module, "MODULE$"))

    def json(self, obj: Any) -> Any:
        return json.loads(self.mapper.writeValueAsString(obj))

    def drain(self) -> None:
        """Wait until the listener bus has delivered every event posted so far."""
        self.context.listenerBus().waitUntilEmpty()

    def compilations(self) -> int:
        """Classes compiled so far by Spark's code generator (its cache misses: code it had
        not generated before), a JVM-wide count."""
        metrics = getattr(self.jvm.org.apache.spark.metrics.source, "CodegenMetrics$")
        return int(getattr(metrics, "MODULE$").METRIC_COMPILATION_TIME().getCount())

    def next_job(self) -> int:
        """The id the next job will get (job ids count up from 0, whatever their group; the
        store's job list by group leaves out grouped jobs, Structured Streaming's among them).
        ``nextJobId`` is an ``AtomicInteger``: py4j returns its value."""
        return int(self.context.dagScheduler().nextJobId())

    def last_execution(self) -> int:
        count = self.sql.executionsCount()
        if not count:
            return -1
        return max(int(e["executionId"]) for e in self.json(self.sql.executionsList(count - 1, 1)))

    def job(self, job_id: int) -> Job:
        from py4j.protocol import Py4JJavaError

        try:
            data = self.json(self.app.job(job_id))
        except Py4JJavaError:  # NoSuchElementException: not retained
            raise RuntimeError(
                f"the status store dropped job {job_id} of the probed block: build the "
                "session with bench.probe.PROBE_CONF"
            ) from None
        return Job(job_id, data.get("description") or "", tuple(data["stageIds"]))

    def stage(self, stage_id: int) -> Stage:
        attempts = self.json(self.app.stageData(stage_id, False, None, False, None))
        return Stage(
            stage_id,
            any(a["status"] != "SKIPPED" for a in attempts),
            sum(int(a["executorCpuTime"]) for a in attempts),
            sum(int(a["executorRunTime"]) for a in attempts),
            sum(int(a["numCompleteTasks"]) + int(a["numFailedTasks"]) for a in attempts),
        )

    def execution(self, execution_id: int, inputs: list[re.Pattern[str]]) -> Execution | None:
        found = self.sql.execution(execution_id)  # an Option (its plan text is large: not read)
        if found.isEmpty():
            return None
        description = found.get().description() or ""
        nodes = self.json(self.sql.planGraph(execution_id).allNodes())
        values = self.json(self.sql.executionMetrics(execution_id))
        passes = others = 0
        scans: list[str] = []
        for node in nodes:
            if not FILE_SCANS.match(node["name"]) or not _ran(node, values):
                continue
            location = _location(node["desc"])
            scans.append(f"{node['name'].strip()} {location}")
            if any(p.search(location) for p in inputs):
                passes += 1
            else:
                others += 1
        return Execution(execution_id, description, passes, others, tuple(scans))


_statuses: list[tuple[Any, _Status]] = []  # per session: Jackson's mapper learns classes once


def _status(spark: Any) -> _Status:
    for known, status in _statuses:
        if known is spark:
            return status
    _statuses[:] = [(spark, _Status(spark))]
    return _statuses[0][1]


def _ran(node: dict[str, Any], values: dict[str, str]) -> bool:
    for metric in node["metrics"]:
        if metric["name"] in RAN_METRICS and _number(values.get(str(metric["accumulatorId"]))):
            return True
    return False


def _number(value: str | None) -> int:
    """A sum metric's value as the store prints it (``460,000``)."""
    if not value:
        return 0
    digits = value.split("\n", 1)[0].replace(",", "").strip()
    return int(digits) if digits.isdigit() else 0


def _location(desc: str) -> str:
    found = re.search(r"Location: ([^\[,]*\[[^\]]*\])", desc)
    return found.group(1) if found else desc


def _folder_pattern(folder: str | Path) -> re.Pattern[str]:
    """A path under ``folder`` in a scan location (``file:/a/b/x.parquet``, not ``/a/b2``)."""
    text = str(folder).rstrip("/")
    return re.compile(re.escape(text) + r"(?=[/,\]\s]|$)")


def streaming_batch(description: str) -> int | None:
    """The micro-batch a Structured Streaming job or execution belongs to: its description
    (the stream thread's job description) ends ``batch = N``."""
    found = re.search(r"\bbatch = (\d+)\s*$", description)
    return int(found.group(1)) if found else None


class SparkProbe:
    """Counts the Spark work of a ``with`` block: see the module's docstring. ``inputs``:
    the folders whose scans are input passes (symlinked paths are matched both ways)."""

    def __init__(self, spark: Any, inputs: Iterable[str | Path] = ()) -> None:
        self.spark = spark
        folders = {str(p) for p in inputs} | {str(Path(p).resolve()) for p in inputs}
        self.inputs = [_folder_pattern(f) for f in sorted(folders)]
        self.work = Work()
        self._status: _Status | None = None
        self._py4j = Py4JCounter()  # a new one per block
        self._first_job = 0
        self._first_execution = 0
        self._compiled = 0

    def __enter__(self) -> SparkProbe:
        status = self._status = _status(self.spark)
        status.drain()
        self._first_job = status.next_job()
        self._first_execution = status.last_execution() + 1
        self._compiled = status.compilations()
        self._py4j = Py4JCounter().__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._py4j.__exit__()
        if kind is None:
            self.work = self.collect()

    @property
    def counts(self) -> Counts:
        return self.work.counts()

    def collect(self) -> Work:
        status = self._status
        assert status is not None, "collect() after the block"
        status.drain()
        jobs = [status.job(j) for j in range(self._first_job, status.next_job())]
        last_execution = status.last_execution()
        stages = {s: status.stage(s) for s in sorted({s for j in jobs for s in j.stages})}
        executions = []
        for execution_id in range(self._first_execution, last_execution + 1):
            found = status.execution(execution_id, self.inputs)
            if found is None:
                raise RuntimeError(
                    f"the SQL status store dropped execution {execution_id} of the probed "
                    "block: build the session with bench.probe.PROBE_CONF"
                )
            executions.append(found)
        compiled = status.compilations() - self._compiled
        return Work(jobs, stages, executions, self._py4j.calls, self._py4j.deletes, compiled)
