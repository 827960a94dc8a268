"""The warm execution mode: ``sluice serve`` keeps one Spark session and runs the process step
of planned epochs on request, so an epoch does not pay for a new driver (docs/warm-execution.md).

This package's top level is the client side (the standard library's HTTP and the pydantic wire
models of :mod:`sluice.serve.model`; no Spark, no FastAPI); the server is
:mod:`sluice.serve.server` (FastAPI on uvicorn), started by ``sluice serve``.
"""

from sluice.serve.client import ServeClient
from sluice.serve.exceptions import (
    AttemptCancelled,
    AttemptFailed,
    PipelineBusy,
    ServeError,
    ServeRefused,
    ServeUnavailable,
)
from sluice.serve.model import DEFAULT_PORT, AttemptRequest, AttemptView, BadRequest, RequestStatus

__all__ = [
    "DEFAULT_PORT",
    "AttemptCancelled",
    "AttemptFailed",
    "AttemptRequest",
    "AttemptView",
    "BadRequest",
    "PipelineBusy",
    "RequestStatus",
    "ServeClient",
    "ServeError",
    "ServeRefused",
    "ServeUnavailable",
]
