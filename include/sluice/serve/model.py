"""What travels over the wire: one pydantic model per request and response body, shared by the
server (:mod:`sluice.serve.server`) and the client (:mod:`sluice.serve.client`).

A request carries the sinks' connection URIs (the cold path passes them as ``SLUICE_CONN_<ID>``
environment variables): they are kept out of ``repr``, never echoed in an error, never sent back.
Requests refuse unknown fields; responses ignore fields a newer server adds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic_core import ErrorDetails

from sluice.serve.exceptions import BadRequest

__all__ = [
    "DEFAULT_PORT",
    "MAX_WAIT_S",
    "AttemptError",
    "AttemptList",
    "AttemptRequest",
    "AttemptTally",
    "AttemptView",
    "BadRequest",
    "DriverHeap",
    "ErrorBody",
    "Liveness",
    "RequestStatus",
    "ServerHealth",
    "SparkJobs",
]

DEFAULT_PORT = 8790
# The longest a status poll (GET ...?wait=S) is held before it answers "still running".
MAX_WAIT_S = 60.0
_RUN_ID_MAX = 1000


class RequestStatus(StrEnum):
    """A served attempt request: RUNNING, then exactly one of the three final states.
    (The protocol's own attempt record has its statuses; a cancelled request's is FAILED.)"""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def done(self) -> bool:
        return self is not RequestStatus.RUNNING


# -- the request ------------------------------------------------------------------------------


def _spec_path(value: str) -> str:
    if not value.strip() or "\0" in value:
        raise ValueError("blank, or holds a NUL")
    return value


def _no_connections(value: Any) -> Any:
    return {} if value is None else value  # ``"connections": null`` means none


ConnectionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,200}$")]


class AttemptRequest(BaseModel):
    """``POST /v1/attempts``: one attempt of planned epoch ``epoch`` of the pipeline ``spec``
    (a spec file path on the server's machine, under one of its ``--pipelines-dir`` roots)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    spec: Annotated[str, AfterValidator(_spec_path)]
    epoch: int = Field(ge=1)
    run_id: str | None = Field(default=None, max_length=_RUN_ID_MAX)
    connections: Annotated[
        dict[ConnectionId, Annotated[str, StringConstraints(min_length=1)]],
        BeforeValidator(_no_connections),
    ] = Field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, body: Any) -> AttemptRequest:
        """The request in ``body`` (parsed JSON), or :class:`BadRequest` naming every problem
        (never a connection URI, even a malformed one)."""
        if not isinstance(body, dict):
            raise BadRequest(["the body must be a JSON object"])
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            raise BadRequest(_problems(exc, body)) from None


def _problems(exc: ValidationError, body: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        problem = _problem(error, body)
        if problem not in found:
            found.append(problem)
    return found


def _problem(error: ErrorDetails, body: dict[str, Any]) -> str:
    """Our wording of one pydantic error: the field, what is wrong, what would be right."""
    loc = error["loc"]
    name = str(loc[0]) if loc else "(body)"
    if error["type"] == "extra_forbidden":
        return f"{name}: unknown field"
    if name == "spec":
        return "spec: a path to a pipeline spec file is required"
    if name == "epoch":
        return f"epoch: {body.get('epoch')!r} is not a whole number >= 1"
    if name == "run_id":
        return f"run_id: must be a string (at most {_RUN_ID_MAX} characters) or null"
    if name == "connections":
        if len(loc) == 1:
            return "connections: must be an object {connection id: URI}"
        conn_id = str(loc[1])
        if loc[-1] == "[key]":
            return f"connections: {conn_id[:60]!r} is not a connection id"
        return f"connections.{conn_id}: the URI must be a non-empty string"
    return f"{name}: {error['msg']}"


# -- the responses ----------------------------------------------------------------------------


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SparkJobs(_Answer):
    """A running request's Spark jobs: running now, and started so far."""

    active: int
    started: int


class AttemptError(_Answer):
    """Why a request failed: a :class:`~sluice.exceptions.SluiceError` keeps its message."""

    type: str
    message: str
    sluice_error: bool


class AttemptView(_Answer):
    """The status of one served request (``POST`` / ``GET`` / ``DELETE /v1/attempts...``)."""

    id: str
    pipeline: str
    spec: str
    epoch: int
    run_id: str | None = None
    status: RequestStatus
    attempt: str | None = None  # the protocol's attempt id, once process_epoch made one
    spark_job_group: str
    started_at: float
    finished_at: float | None = None
    seconds: float
    cancel_requested: bool
    spark_jobs: SparkJobs | None = None  # while it runs
    summary: dict[str, Any] | None = None  # on success: what run_epoch.py prints
    error: AttemptError | None = None  # on failure


class AttemptList(_Answer):
    """``GET /v1/attempts``: running requests and the last ended ones."""

    attempts: list[AttemptView]


class AttemptTally(_Answer):
    """The server's attempts by outcome since it started."""

    succeeded: int
    failed: int
    cancelled: int
    running: int


class DriverHeap(_Answer):
    used_bytes: int
    committed_bytes: int
    max_bytes: int


class ServerHealth(_Answer):
    """``GET /v1/health``: what ops (and tests) look at."""

    status: Literal["ok"]
    pid: int
    sluice_version: str
    spark_version: str
    spark_master: str
    spark_application_id: str
    started_at: float
    uptime_s: float
    epochs: AttemptTally
    driver_heap: DriverHeap
    jvm_threads: int
    python_threads: int
    long_polls: int = 0  # status requests held with ``?wait=`` right now
    pipelines_dirs: list[str]
    jvm_thread_groups: dict[str, int] | None = None  # with ``?threads=1``
    # resident set sizes (Linux /proc; None elsewhere): the server's Python process, its JVM
    rss_bytes: int | None = None
    jvm_pid: int | None = None
    jvm_rss_bytes: int | None = None


class Liveness(_Answer):
    """``GET /livez`` (no token)."""

    status: Literal["ok"] = "ok"


class ErrorBody(_Answer):
    """Every refusal: ``error`` says what and how to fix it; ``spec`` names a refused spec
    path (403), ``running`` the request in the way (409)."""

    model_config = ConfigDict(extra="allow")

    error: str
    spec: str | None = None
    running: AttemptView | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON body: ``spec`` and ``running`` only when given (the status inside whole)."""
        return {k: v for k, v in self.model_dump(mode="json").items() if v is not None}
