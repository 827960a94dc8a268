"""The warm execution mode: ``sluice serve`` keeps one Spark session and runs the process step
of planned epochs on request, so an epoch does not pay for a new driver (docs/warm-execution.md).

This package's top level is the client side (standard library only, cheap to import); the
server is :mod:`sluice.serve.server`, started by ``sluice serve``.
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
from sluice.serve.model import DEFAULT_PORT, AttemptRequest, RequestStatus

__all__ = [
    "DEFAULT_PORT",
    "AttemptCancelled",
    "AttemptFailed",
    "AttemptRequest",
    "PipelineBusy",
    "RequestStatus",
    "ServeClient",
    "ServeError",
    "ServeRefused",
    "ServeUnavailable",
]
