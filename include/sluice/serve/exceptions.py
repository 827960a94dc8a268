"""Errors of the warm execution mode: the server refusing a request, an attempt that failed or
was cancelled, a server that cannot be reached. Each names what it is about."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sluice.exceptions import Problem, SluiceError

__all__ = [
    "AttemptCancelled",
    "AttemptFailed",
    "BadRequest",
    "Busy",
    "HttpError",
    "OutsideRoots",
    "PipelineBusy",
    "ServeError",
    "ServeRefused",
    "ServeUnavailable",
]


class ServeError(SluiceError):
    """Root of the ``sluice serve`` errors."""


class ServeUnavailable(ServeError):
    """The server could not be reached or went away mid-request (a retry may reach a
    restarted one)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"sluice serve at {url}: {reason}")


class ServeRefused(ServeError):
    """The server answered with a 4xx/5xx: ``status`` and its message."""

    def __init__(self, url: str, status: int, message: str, body: dict[str, Any] | None = None):
        self.url = url
        self.status = status
        self.message = message
        self.body = body or {}
        super().__init__(f"sluice serve at {url}: HTTP {status}: {message}")


class PipelineBusy(ServeRefused):
    """HTTP 409: an attempt of the same pipeline is running (``running`` is its status)."""

    @property
    def running(self) -> dict[str, Any]:
        found: dict[str, Any] = self.body.get("running") or {}
        return found


class AttemptFailed(ServeError):
    """The attempt ran and failed. ``error_type`` is the exception's class name; the message
    is a :class:`~sluice.exceptions.SluiceError`'s own (it names pipeline, epoch and key), any
    other exception's prefixed with its type."""

    def __init__(self, request_id: str, error: dict[str, Any]) -> None:
        self.request_id = request_id
        self.error = dict(error)  # the attempt's error record: type, message, sluice_error
        self.error_type = str(error.get("type") or "Exception")
        self.sluice_error = bool(error.get("sluice_error"))
        self.error_message = str(error.get("message") or "")
        text = self.error_message
        if not self.sluice_error:
            text = f"{self.error_type}: {text}"
        super().__init__(text)


class AttemptCancelled(AttemptFailed):
    """The attempt was cancelled (``DELETE``) and recorded FAILED by the process step."""

    def __init__(self, request_id: str, error: dict[str, Any]) -> None:
        super().__init__(request_id, error)
        self.args = (f"attempt request {request_id} was cancelled: {self.args[0]}",)


class HttpError(ServeError):
    """A refusal: answered ``status`` with ``{"error": message, **extra}``."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        self.status = status
        self.message = message
        self.extra = extra
        super().__init__(message)


class Busy(ServeError):
    """The request cannot start now (HTTP 409 or 429); ``running`` is the attempt in the way."""

    def __init__(self, message: str, status: int, running: Any = None) -> None:
        # running: the sluice.serve.attempts.Attempt in the way, if any
        self.status = status
        self.running = running
        super().__init__(message)


class BadRequest(ServeError, ValueError):
    """A request body that is not a valid :class:`AttemptRequest` (each problem named): the
    server answers it with 400, the client raises it before sending."""

    def __init__(self, problems: Sequence[str | Problem]) -> None:
        self.details = tuple(Problem.parse(p) for p in problems)  # field, message, fix
        self.problems = [str(p) for p in self.details]  # one line each: "field: message"
        super().__init__("; ".join(self.problems))


class OutsideRoots(ServeError):
    """A spec path outside the folders this server serves (or not a spec file)."""

    def __init__(self, path: str, reason: str, roots: Sequence[Path]) -> None:
        self.path = path
        self.reason = reason
        self.roots = tuple(roots)
        shown = ", ".join(str(r) for r in self.roots)
        super().__init__(f"spec {path!r}: {reason} (this server serves specs under: {shown})")
