"""The HTTP side of ``sluice serve`` (docs/warm-execution.md): a FastAPI app over one
:class:`ServeState`; every body is a model of :mod:`sluice.serve.model`.

======  ==========================  ==========================================================
method  path                        what
======  ==========================  ==========================================================
POST    /v1/attempts                start an attempt: ``{spec, epoch, run_id, connections}``
GET     /v1/attempts/<id>?wait=S    its status (held up to S seconds while it runs)
DELETE  /v1/attempts/<id>           cancel it (Spark job group); recorded FAILED
GET     /v1/attempts                recent requests
GET     /v1/health?gc=1&threads=1   Spark app id, master, uptime, counts, driver heap
GET     /livez                      ``ok`` without a token (for liveness probes)
======  ==========================  ==========================================================

Everything but ``/livez`` needs ``Authorization: Bearer <token>`` (unknown routes too: 401
before 404). Every refusal is ``{"error": ...}`` (:class:`~sluice.serve.model.ErrorBody`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from sluice import __version__
from sluice.protocol import EpochBeyondNext
from sluice.protocol.process import refuse_beyond_next
from sluice.protocol.runtime import open_repository
from sluice.serve.attempts import Attempt, AttemptRegistry, Busy
from sluice.serve.exceptions import HttpError
from sluice.serve.model import (
    MAX_WAIT_S,
    AttemptList,
    AttemptRequest,
    AttemptTally,
    AttemptView,
    BadRequest,
    DriverHeap,
    ErrorBody,
    Liveness,
    ServerHealth,
)
from sluice.serve.security import OutsideRoots, SpecRoots, bearer_matches
from sluice.spec import PipelineSpec, SpecError, load_spec
from sluice.storage import StorageError

__all__ = ["MAX_BODY_BYTES", "HttpError", "ServeState", "create_app", "health"]

log = logging.getLogger("sluice.serve")

MAX_BODY_BYTES = 1 << 20
ATTEMPTS = "/v1/attempts"
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass
class ServeState:
    """What the routes share: the token, the spec roots and the attempts (one Spark session)."""

    token: str
    roots: SpecRoots
    registry: AttemptRegistry
    started: float = field(default_factory=time.time)
    started_monotonic: float = field(default_factory=time.monotonic)
    long_polls: int = 0  # ``?wait=`` requests held right now (the event loop's only)


class JsonAnswer(JSONResponse):
    """Sorted keys, a final newline, never cached."""

    def __init__(
        self,
        content: Any,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(
            content, status_code, {"Cache-Control": "no-store", **(headers or {})}, **kw
        )

    def render(self, content: Any) -> bytes:
        return (json.dumps(content, sort_keys=True, default=str) + "\n").encode()


# -- dependencies -----------------------------------------------------------------------------


# The dependencies that do not block are async: a sync one would cost a hop to a worker thread.


async def _state(request: Request) -> ServeState:
    state: ServeState = request.app.state.serve
    return state


State = Annotated[ServeState, Depends(_state)]


async def require_token(request: Request, state: State) -> None:
    """``Authorization: Bearer <token>`` (security.bearer_matches: constant time), else 401."""
    if not bearer_matches(request.headers.get("Authorization"), state.token):
        raise HttpError(401, "missing or wrong bearer token (Authorization: Bearer ...)")


async def json_body(request: Request) -> Any:
    """The parsed JSON body: 411 without ``Content-Length``, 413 over :data:`MAX_BODY_BYTES`
    (refused on the header, before reading), 400 if it is not JSON."""
    try:
        length = int(request.headers.get("Content-Length") or "")
    except ValueError:
        raise HttpError(411, "a JSON body with Content-Length is required") from None
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"body of {length} bytes; at most {MAX_BODY_BYTES} (1 MiB)")
    try:
        return json.loads(await request.body() or b"null")
    except ValueError as exc:
        raise HttpError(400, f"the body is not JSON: {exc}") from exc


Body = Annotated[Any, Depends(json_body)]


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true", "yes")


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise HttpError(400, f"{name}={raw!r} is not a number of seconds")
    return max(0.0, value)


# -- routes -----------------------------------------------------------------------------------

api = APIRouter(dependencies=[Depends(require_token)])


@api.get("/v1/health", response_model=ServerHealth)
def get_health(state: State, gc: str = "0", threads: str = "0") -> ServerHealth:
    return health(state, gc=_flag(gc), threads=_flag(threads))


@api.get(ATTEMPTS, response_model=AttemptList)
def list_attempts(state: State) -> AttemptList:
    return AttemptList(attempts=[a.view() for a in state.registry.listing()])


@api.post(ATTEMPTS, status_code=202, response_model=AttemptView)
def start_attempt(state: State, body: Body) -> AttemptView:
    """Validate, resolve the spec under the roots, load it, submit (or say what is in the way)."""
    try:
        request = AttemptRequest.from_dict(body)
        spec_path = state.roots.resolve(request.spec)
    except BadRequest as exc:
        raise HttpError(400, f"bad attempt request: {exc}") from exc
    except OutsideRoots as exc:
        raise HttpError(403, str(exc), spec=exc.path) from exc
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        raise HttpError(422, str(exc)) from exc
    _check_epoch(spec, request.epoch)
    resolved = request.model_copy(update={"spec": str(spec_path)})
    try:
        attempt = state.registry.submit(resolved, spec)
    except Busy as exc:
        running = state.registry.view(exc.running) if exc.running else None
        raise HttpError(exc.status, str(exc), running=running) from exc
    return state.registry.view(attempt)


def _check_epoch(spec: PipelineSpec, epoch: int) -> None:
    """422 for an epoch after the next one, before any Spark work (the attempt would refuse
    it too, but only once it ran: the client would see a failed attempt, not a refusal);
    503 if the checkpoint storage cannot tell."""
    try:
        refuse_beyond_next(spec.name, open_repository(spec), epoch)
    except EpochBeyondNext as exc:
        raise HttpError(422, str(exc), pipeline=spec.name, next_epoch=exc.next_epoch) from exc
    except StorageError as exc:
        raise HttpError(503, f"pipeline {spec.name}: checkpoint storage: {exc}") from exc


@api.get(ATTEMPTS + "/{request_id}", response_model=AttemptView)
async def get_attempt(state: State, request_id: str, wait: str = "0") -> AttemptView:
    """Held until the attempt ends or ``wait`` seconds pass (no thread held meanwhile)."""
    seconds = min(_seconds("wait", wait), MAX_WAIT_S)
    attempt = _known(state, request_id)
    state.long_polls += 1
    try:
        await _until_done(attempt, seconds)
    finally:
        state.long_polls -= 1
    return await run_in_threadpool(state.registry.view, attempt)


@api.delete(ATTEMPTS + "/{request_id}", response_model=AttemptView)
def cancel_attempt(state: State, request_id: str, response: Response) -> AttemptView:
    attempt = _known(state, request_id)
    state.registry.cancel(attempt.id)
    response.status_code = 200 if attempt.status.done else 202
    return state.registry.view(attempt)


@api.api_route("/{path:path}", methods=_METHODS, include_in_schema=False)
def no_route(request: Request, path: str) -> None:
    raise HttpError(404, f"no route {request.method} /{path}")


def livez() -> Liveness:
    return Liveness()


def _known(state: ServeState, request_id: str) -> Attempt:
    attempt = state.registry.get(request_id)
    if attempt is None:
        raise HttpError(404, f"no attempt request {request_id!r} "
                        "(unknown, or forgotten: the server restarted?)")  # fmt: skip
    return attempt


async def _until_done(attempt: Attempt, seconds: float) -> None:
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(ended.set)

    forget = attempt.on_done(wake)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), seconds)
    finally:
        forget()


# -- errors -----------------------------------------------------------------------------------


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    if exc.status != 404:
        log.info("%s %s refused: HTTP %d: %s", request.method, request.url.path, exc.status,
                 exc.message)  # fmt: skip
    headers = {"WWW-Authenticate": 'Bearer realm="sluice-serve"'} if exc.status == 401 else None
    body = ErrorBody(error=exc.message, **exc.extra).to_dict()
    return JsonAnswer(body, exc.status, headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JsonAnswer({"error": str(exc.detail)}, exc.status_code, exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return await _refused(request, HttpError(400, "; ".join(problems)))


async def _internal(request: Request, exc: Exception) -> Response:
    """A bug of ours: say so without details that may hold secrets (the log has the trace)."""
    log.error("%s %s: internal error (%s)", request.method, request.url.path, type(exc).__name__)
    return JsonAnswer({"error": f"internal error ({type(exc).__name__}); see server log"}, 500)


def create_app(state: ServeState) -> FastAPI:
    """The app over ``state`` (no OpenAPI pages: every route but ``/livez`` needs the token)."""
    app = FastAPI(title="sluice serve", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url=None, default_response_class=JsonAnswer)  # fmt: skip
    app.state.serve = state
    app.add_api_route("/livez", livez, methods=["GET"], response_model=Liveness)
    app.include_router(api)
    app.add_exception_handler(HttpError, _refused)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(Exception, _internal)
    return app


# -- health -----------------------------------------------------------------------------------


def health(state: ServeState, *, gc: bool, threads: bool = False) -> ServerHealth:
    """What ops (and tests) look at; ``gc``: collect garbage before measuring the heap.

    Threads are counted before that collection: it makes Spark's ContextCleaner remove the
    shuffles and broadcasts it freed, which starts threads of Spark's block-manager pools (they
    idle out after 60 s) — a count taken after it would show threads the request itself made."""
    registry = state.registry
    context = registry.spark.sparkContext
    jvm: Any = context._jvm
    management = jvm.java.lang.management.ManagementFactory
    jvm_threads = int(management.getThreadMXBean().getThreadCount())
    groups = jvm_thread_groups(registry) if threads else None
    if gc:
        jvm.java.lang.System.gc()
    heap = management.getMemoryMXBean().getHeapMemoryUsage()
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    counts = {str(k): v for k, v in registry.counts.items()}
    return ServerHealth(
        status="ok",
        pid=os.getpid(),
        sluice_version=__version__,
        spark_version=context.version,
        spark_master=str(context.master),
        spark_application_id=context.applicationId,
        started_at=state.started,
        uptime_s=round(time.monotonic() - state.started_monotonic, 3),
        epochs=AttemptTally.model_validate({**counts, "running": registry.running()}),
        driver_heap=DriverHeap(
            used_bytes=int(heap.getUsed()),
            committed_bytes=int(heap.getCommitted()),
            max_bytes=int(heap.getMax()),
        ),
        jvm_threads=jvm_threads,
        python_threads=threading.active_count(),
        long_polls=state.long_polls,
        pipelines_dirs=[str(r) for r in state.roots.roots],
        jvm_thread_groups=groups,
        rss_bytes=rss_bytes(os.getpid()),
        jvm_pid=jvm_pid,
        jvm_rss_bytes=rss_bytes(jvm_pid),
    )


def rss_bytes(pid: int) -> int | None:
    """The resident set size of process ``pid`` (``VmRSS`` of ``/proc/<pid>/status``; None
    where there is no ``/proc``, or the process is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+([0-9]+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def jvm_thread_groups(registry: AttemptRegistry, top: int = 12) -> dict[str, int]:
    """The driver JVM's threads by name, digits folded (``shuffle-exchange-N``): Spark's cached
    pools grow with load and shrink after 60 s idle; ``Thread-N`` are mostly Py4J's."""
    jvm: Any = registry.spark.sparkContext._jvm
    infos = jvm.java.lang.management.ManagementFactory.getThreadMXBean().dumpAllThreads(
        False, False
    )
    names = Counter(re.sub(r"[0-9]+", "N", str(info.getThreadName())) for info in infos)
    return dict(names.most_common(top))
