"""Errors of the Airflow integration: building a deployment's DAGs, refusing a run."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.exceptions import SluiceError

__all__ = ["PipelineClash", "RunRefused"]


class PipelineClash(SluiceError, ValueError):
    """Two pipelines of one deployment share a location. ``clashes`` holds one line per clash
    (both specs, their pipelines, fields and URIs), as the message lists them; ``hint`` is
    the extra advice appended (or "")."""

    def __init__(self, clashes: Sequence[str], hint: str = "") -> None:
        super().__init__(
            "pipelines of one deployment share locations:\n  - "
            + "\n  - ".join(clashes)
            + "\nFix: give each spec its own input, output and checkpoint paths."
            + hint
        )
        self.clashes, self.hint = tuple(clashes), hint


class RunRefused(SluiceError, SystemExit):
    """A refused run request ends the ``plan`` task: an expected outcome, not a bug, so no
    traceback.

    Airflow's task runner logs every exception but ``SystemExit`` with its traceback (it
    catches Airflow's own exceptions first, then ``SystemExit``, then the rest); a
    ``SystemExit`` it logs as the one line ``Task exited exit_code=...``. ``plan_task`` logs
    the refusal itself (``refusal_line``) and raises this; the ``plan`` task's retry policy
    fails it without retries (the same request would be refused again). ``message`` (and
    ``str()``) is the refusal line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = "run request refused"
