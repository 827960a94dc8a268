"""Everything one protocol step needs, built once from a spec.

Time, attempt ids and fault injection come in as parameters (STYLE.md §7): the engine never
reads the wall clock, a random source or the environment on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.sinks import Sink
from sluice.sources import Source
from sluice.spec.components.base import BuildContext
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.loader import NAME_RE
from sluice.spec.model import PipelineSpec
from sluice.storage import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Runtime", "SinkRole", "open_repository"]


@dataclass(frozen=True)
class SinkRole:
    """A sink and which of the epoch's outputs it receives: results, late or dead."""

    sink: Sink
    role: str


@dataclass(frozen=True)
class Runtime:
    spec: PipelineSpec
    repo: Repository
    source: Source
    sinks: tuple[SinkRole, ...]
    clock: Callable[[], float]
    new_attempt_id: Callable[[], str]
    faults: Faults = field(default_factory=Faults)
    run_id: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def sink(self, name: str) -> Sink:
        return next(r.sink for r in self.sinks if r.sink.name == name)

    @classmethod
    def build(
        cls,
        spec: PipelineSpec,
        *,
        clock: Callable[[], float],
        new_attempt_id: Callable[[], str],
        faults: Faults | None = None,
        run_id: str | None = None,
        connections: Mapping[str, str] | None = None,
        spark: Callable[[], SparkSession] | None = None,
    ) -> Runtime:
        """Open the checkpoint store, the source and every sink named by ``spec`` (each
        built by its config, :mod:`sluice.spec.registry`).

        ``connections`` maps connection ids to URIs (:mod:`sluice.connections`; use
        :func:`sluice.pipeline.open_pipeline` to open a spec with them);
        ``spark`` returns a Spark session for sinks whose commit runs Spark (Delta), called
        only when one does.
        """
        repo = open_repository(spec)
        ctx = BuildContext(repo, connections or {}, spark or _default_spark(spec))
        source: Source = spec.source.build(spec, ctx)
        roles = [SinkRole(s.build(spec, ctx, f"sinks.{s.name}"), "results") for s in spec.sinks]
        roles.append(SinkRole(spec.late_records.build(spec, ctx, "late_records"), "late"))
        roles.append(SinkRole(spec.dead_letters.build(spec, ctx, "dead_letters"), "dead"))
        return cls(
            spec, repo, source, tuple(roles), clock, new_attempt_id, faults or Faults(), run_id
        )


def open_repository(spec: PipelineSpec) -> Repository:
    """The pipeline's checkpoint repository alone: no source, no sinks, no connections."""
    _check_name(spec)
    return Repository(open_store(spec.checkpoint.storage, s3=spec.s3).child(spec.name))


def _check_name(spec: PipelineSpec) -> None:
    """The name is the storage prefix ``<storage>/<name>/``: one plain segment, also for a
    spec built in code rather than by the loader (``a/b`` would share another's prefix)."""
    if not NAME_RE.match(spec.name):
        problem = SpecProblem("name", f"{spec.name!r} is not a valid pipeline name",
                              "use lower-case letters, digits and '_' only")  # fmt: skip
        raise SpecError(spec.origin, [problem])


def _default_spark(spec: PipelineSpec) -> Callable[[], SparkSession]:
    def get() -> SparkSession:
        from sluice.spark import spark_session

        return spark_session(f"sluice-{spec.name}", s3=spec.s3)

    return get
