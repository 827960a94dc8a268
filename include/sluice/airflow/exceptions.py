"""Errors of the Airflow integration raised while building a deployment's DAGs."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.exceptions import SluiceError

__all__ = ["PipelineClash"]


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
