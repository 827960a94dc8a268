"""The attempts a ``sluice serve`` process runs: one thread each, one Spark job group each.

``AttemptRegistry.submit`` starts an attempt in its own thread. The thread tags every Spark job
it starts with the request's job group (``setJobGroup(..., interruptOnCancel=True)``; PySpark's
pinned-thread mode gives each Python thread its own JVM thread, so the group is the thread's
own), takes its pipeline's session (``newSession()`` of the server's session, so SQL settings
and temp views stay inside one pipeline) and runs :func:`sluice.jobs.attempt_summary`, the code
``spark-submit jobs/run_epoch.py`` runs, its jobs in the pipeline's own FAIR scheduler pool.
``cancel`` cancels the group; the attempt's next Spark action then fails and ``process_epoch``
records the attempt FAILED and removes what it staged, as for any failure.

Per pipeline one attempt at a time; different pipelines run side by side.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.contracts.records import EngineInfo
from sluice.exceptions import SluiceError
from sluice.jobs import attempt_summary
from sluice.pipeline import open_pipeline
from sluice.protocol import Faults
from sluice.serve.exceptions import Busy
from sluice.serve.model import (
    AttemptError,
    AttemptRequest,
    AttemptView,
    RequestStatus,
    SparkJobs,
)
from sluice.serve.security import connection_secrets, redact
from sluice.spark import configure_s3, s3a_conf
from sluice.words import count

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sluice.spec import PipelineSpec

__all__ = ["Attempt", "AttemptRegistry", "Busy"]

log = logging.getLogger("sluice.serve")

MAX_MESSAGE_CHARS = 4000
# Each pipeline's jobs go to their own pool of the FAIR scheduler (the server's session sets
# spark.scheduler.mode=FAIR): pipelines share the cores instead of queueing behind each other.
POOL = "spark.scheduler.pool"
KEEP_FINISHED = 256
_DONE_LOCK = threading.Lock()  # an attempt's end and the callbacks waiting for it


@dataclass
class Attempt:
    """One served attempt request and what became of it."""

    id: str
    request: AttemptRequest  # its spec is the resolved path
    spec: PipelineSpec
    started_at: float
    status: RequestStatus = RequestStatus.RUNNING
    attempt: str | None = None  # the protocol's attempt id, once process_epoch made one
    finished_at: float | None = None
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    _callbacks: list[Callable[[], None]] = field(default_factory=list, init=False, repr=False)

    def on_done(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` once the attempt has ended (from its thread; at once if it has).
        Returns a function that forgets the callback (a long poll that gave up)."""
        with _DONE_LOCK:
            if not self.done.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with _DONE_LOCK:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def _ended(self) -> None:
        with _DONE_LOCK:
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    @property
    def key(self) -> tuple[str, str]:
        """One pipeline = one name in one checkpoint storage."""
        return (self.spec.checkpoint.storage, self.spec.name)

    @property
    def group(self) -> str:
        return f"sluice-serve-{self.id}"

    def view(self, spark_jobs: SparkJobs | None = None) -> AttemptView:
        """Its status as the wire carries it (``spark_jobs``: while it runs)."""
        end = self.finished_at if self.finished_at is not None else time.time()
        return AttemptView(
            id=self.id,
            pipeline=self.spec.name,
            spec=self.request.spec,
            epoch=self.request.epoch,
            run_id=self.request.run_id,
            status=self.status,
            attempt=self.attempt,
            spark_job_group=self.group,
            started_at=self.started_at,
            finished_at=self.finished_at,
            seconds=round(end - self.started_at, 3),
            cancel_requested=self.cancel_requested,
            spark_jobs=spark_jobs,
            summary=self.summary,
            error=None if self.error is None else AttemptError.model_validate(self.error),
        )


class AttemptRegistry:
    """Starts, tracks and cancels the attempts of one server (one Spark session)."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        executor_sluice: str,
        faults: Faults | None = None,
        max_running: int = 4,
    ) -> None:
        self.spark = spark
        self.executor_sluice = executor_sluice
        self.faults = faults or Faults()
        self.max_running = max_running
        self.counts = {s: 0 for s in RequestStatus if s.done}
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], Attempt] = {}
        self._all: OrderedDict[str, Attempt] = OrderedDict()
        self._sessions: dict[tuple[str, str], SparkSession] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._s3: dict[str, str] | None = None

    # -- requests ---------------------------------------------------------------------------

    def submit(self, request: AttemptRequest, spec: PipelineSpec) -> Attempt:
        """Start ``request`` (its spec already resolved and loaded) in a new thread, or raise
        :class:`Busy`."""
        attempt = Attempt(secrets.token_hex(6), request, spec, time.time())
        with self._lock:
            self._admit(attempt)
            self._running[attempt.key] = attempt
            self._all[attempt.id] = attempt
            thread = threading.Thread(
                target=self._run, args=(attempt,), name=f"attempt-{attempt.id}", daemon=True
            )
            self._threads[attempt.id] = thread
        log.info("request %s: pipeline %s epoch %d (run %s): started", attempt.id, spec.name,
                 request.epoch, request.run_id)  # fmt: skip
        thread.start()
        return attempt

    def _admit(self, attempt: Attempt) -> None:
        """Refuse a second attempt of a pipeline, too many at once, or another S3 endpoint
        while attempts run (s3a settings are shared by the whole Spark context)."""
        running = self._running.get(attempt.key)
        name = attempt.spec.name
        if running is not None:
            raise Busy(f"pipeline {name!r}: attempt request {running.id} (epoch "
                       f"{running.request.epoch}, run {running.request.run_id}) is still "
                       "running; wait for it or cancel it", 409, running)  # fmt: skip
        if len(self._running) >= self.max_running:
            running_now = count(len(self._running), "attempts")
            raise Busy(f"pipeline {name!r}: {running_now} running, the most this server runs "
                       "at once (--max-running)", 429)  # fmt: skip
        wanted = s3a_conf(attempt.spec.s3)
        if wanted != self._s3:
            if self._running:
                other = next(iter(self._running.values()))
                raise Busy(f"pipeline {name!r}: its S3 settings differ from those of the "
                           f"running pipeline {other.spec.name!r} (request {other.id}); "
                           "one Spark context has one s3a configuration: retry when it "
                           "ends, or serve them from separate servers", 409, other)  # fmt: skip
            configure_s3(self.spark, attempt.spec.s3)
            self._s3 = wanted

    def get(self, request_id: str) -> Attempt | None:
        with self._lock:
            return self._all.get(request_id)

    def listing(self) -> list[Attempt]:
        with self._lock:
            return list(self._all.values())

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def cancel(self, request_id: str, stopping: bool = False) -> Attempt | None:
        """Cancel the request's Spark job group: its running jobs and the ones it starts
        after (the attempt's Python code between two jobs cannot be interrupted, so a plain
        ``cancelJobGroup`` could miss it)."""
        with self._lock:
            attempt = self._all.get(request_id)
            if attempt is None or attempt.status.done:
                return attempt
            attempt.cancel_requested = True
        cause = "sluice serve stopping (SIGTERM / SIGINT)" if stopping else "a DELETE"
        reason = f"cancelled by {cause}: sluice serve request {request_id}"
        jsc: Any = self.spark.sparkContext._jsc
        jsc.sc().cancelJobGroupAndFutureJobs(attempt.group, reason)
        log.info("request %s: pipeline %s epoch %d: cancel requested", request_id,
                 attempt.spec.name, attempt.request.epoch)  # fmt: skip
        return attempt

    def spark_jobs(self, attempt: Attempt) -> SparkJobs:
        """How many Spark jobs of the attempt's group run now, and how many it has started
        (as far as the status store still remembers)."""
        tracker = self.spark.sparkContext.statusTracker()
        ids = tracker.getJobIdsForGroup(attempt.group)
        infos = [tracker.getJobInfo(i) for i in ids]
        active = sum(1 for i in infos if i is not None and i.status == "RUNNING")
        return SparkJobs(active=active, started=len(ids))

    def view(self, attempt: Attempt) -> AttemptView:
        """The attempt's status, with its Spark jobs while it runs."""
        return attempt.view(None if attempt.status.done else self.spark_jobs(attempt))

    def cancel_all(self) -> None:
        """Cancel every running attempt: the server is stopping."""
        for attempt in self.listing():
            self.cancel(attempt.id, stopping=True)

    def shutdown(self, grace_s: float) -> None:
        """Cancel what runs and wait up to ``grace_s`` for the attempts to record it."""
        self.cancel_all()
        deadline = time.monotonic() + grace_s
        for thread in list(self._threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- the attempt's thread ---------------------------------------------------------------

    def _run(self, attempt: Attempt) -> None:
        context = self.spark.sparkContext
        what = f"sluice serve {attempt.id}: {attempt.spec.name} epoch {attempt.request.epoch}"
        context.setJobGroup(attempt.group, what, interruptOnCancel=True)
        context.setLocalProperty(POOL, f"sluice-{attempt.spec.name}")
        secrets_ = connection_secrets(attempt.request.connections)
        try:
            summary = self._process(attempt)
        except BaseException as exc:  # whatever it was, the request must end (and say why)
            self._finish(attempt, error=_describe(exc, secrets_))
            detail = redact("".join(traceback.format_exception(exc)), secrets_)
            log.debug("request %s failed:\n%s", attempt.id, detail)
        else:
            self._finish(attempt, summary=summary)
        finally:
            jsc: Any = context._jsc
            jsc.sc().clearJobGroup()
            jsc.sc().setLocalProperty(POOL, None)

    def _process(self, attempt: Attempt) -> dict[str, Any]:
        session = self._session(attempt)
        jvm: Any = session._jvm
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)

        def new_attempt_id() -> str:
            attempt.attempt = uuid.uuid4().hex[:12]
            return attempt.attempt

        rt = open_pipeline(attempt.spec, run_id=attempt.request.run_id,
                           connections=attempt.request.connections, faults=self.faults,
                           spark=lambda: session, attempt_ids=new_attempt_id)  # fmt: skip
        engine: EngineInfo = {"execution": "warm", "serve_request": attempt.id}
        return attempt_summary(rt, session, attempt.request.epoch,
                               executor_sluice=self.executor_sluice, engine=engine)  # fmt: skip

    def _session(self, attempt: Attempt) -> SparkSession:
        """The pipeline's own session (its SQL conf, temp views and UDFs), made once."""
        with self._lock:
            session = self._sessions.get(attempt.key)
            if session is None:
                session = self._sessions[attempt.key] = self.spark.newSession()
            return session

    def _finish(
        self,
        attempt: Attempt,
        *,
        summary: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        with self._lock:
            attempt.summary, attempt.error = summary, error
            if summary is not None:
                attempt.status = RequestStatus.SUCCEEDED
            else:
                cancelled = attempt.cancel_requested
                attempt.status = RequestStatus.CANCELLED if cancelled else RequestStatus.FAILED
            attempt.finished_at = time.time()
            self.counts[attempt.status] += 1
            self._running.pop(attempt.key, None)
            self._threads.pop(attempt.id, None)
            self._forget_old()
        attempt._ended()
        what = f"error {error['type']}" if error else f"protocol attempt {attempt.attempt}"
        log.info("request %s: pipeline %s epoch %d: %s (%s) in %.1f s", attempt.id,
                 attempt.spec.name, attempt.request.epoch, attempt.status, what,
                 attempt.finished_at - attempt.started_at)  # fmt: skip

    def _forget_old(self) -> None:
        """Keep the last :data:`KEEP_FINISHED` finished requests (memory stays bounded)."""
        finished = [a.id for a in self._all.values() if a.status.done]
        for request_id in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._all[request_id]


def _describe(exc: BaseException, secret_values: list[str]) -> dict[str, Any]:
    """A failure as the client sees it: a SluiceError's own message (it names pipeline, epoch
    and key), any other exception's message cut to size; connection secrets cut out."""
    is_sluice = isinstance(exc, SluiceError)
    message = str(exc) if is_sluice else str(exc)[:MAX_MESSAGE_CHARS]
    return {
        "type": type(exc).__name__,
        "message": redact(message, secret_values),
        "sluice_error": is_sluice,
    }
