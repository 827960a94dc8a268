"""What travels over the wire: the attempt request (POST body) and the request statuses.

A request carries the sinks' connection URIs (the cold path passes them as ``SLUICE_CONN_<ID>``
environment variables): they are kept out of ``repr`` and never sent back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["DEFAULT_PORT", "MAX_WAIT_S", "AttemptRequest", "BadRequest", "RequestStatus"]

DEFAULT_PORT = 8790
# The longest a status poll (GET ...?wait=S) is held before it answers "still running".
MAX_WAIT_S = 60.0
_CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}\Z")
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


class BadRequest(ValueError):
    """A request body that is not a valid :class:`AttemptRequest` (each problem named)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class AttemptRequest:
    """``POST /v1/attempts``: one attempt of planned epoch ``epoch`` of the pipeline ``spec``
    (a spec file path on the server's machine, under one of its ``--pipelines-dir`` roots)."""

    spec: str
    epoch: int
    run_id: str | None = None
    connections: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "epoch": self.epoch,
            "run_id": self.run_id,
            "connections": dict(self.connections),
        }

    @classmethod
    def from_dict(cls, body: Any) -> AttemptRequest:
        if not isinstance(body, dict):
            raise BadRequest(["the body must be a JSON object"])
        problems = [f"{k}: unknown field" for k in body if k not in _FIELDS]
        spec, epoch, run_id = body.get("spec"), body.get("epoch"), body.get("run_id")
        if not isinstance(spec, str) or not spec.strip() or "\0" in spec:
            problems.append("spec: a path to a pipeline spec file is required")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            problems.append(f"epoch: {epoch!r} is not a whole number >= 1")
        if run_id is not None and (not isinstance(run_id, str) or len(run_id) > _RUN_ID_MAX):
            problems.append("run_id: must be a string (at most 1000 characters) or null")
        connections = body.get("connections") or {}
        problems += _connection_problems(connections)
        if problems:
            raise BadRequest(problems)
        assert isinstance(spec, str) and isinstance(epoch, int)
        return cls(spec, epoch, run_id, dict(connections))


_FIELDS = ("spec", "epoch", "run_id", "connections")


def _connection_problems(value: Any) -> list[str]:
    """Names only: a connection's URI is never echoed back, even when it is malformed."""
    if not isinstance(value, dict):
        return ["connections: must be an object {connection id: URI}"]
    problems = []
    for conn_id, uri in value.items():
        if not _CONN_ID.match(str(conn_id)):
            problems.append(f"connections: {str(conn_id)[:60]!r} is not a connection id")
        elif not isinstance(uri, str) or not uri:
            problems.append(f"connections.{conn_id}: the URI must be a non-empty string")
    return problems
