"""Everything one protocol step needs, built once from a spec.

Time, attempt ids and fault injection come in as parameters (STYLE.md §7): the engine never
reads the wall clock, a random source or the environment on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.sinks import FilesSink, Sink
from sluice.sources import FilesSource, Source
from sluice.sources.nexmark import NexmarkSource
from sluice.spec.model import PipelineSpec, SinkSpec
from sluice.storage import ObjectStore, open_store

__all__ = ["Runtime", "SinkRole"]


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
    ) -> Runtime:
        """Open the checkpoint store, the source and every sink named by ``spec``."""
        root = open_store(spec.checkpoint.storage, s3=spec.s3).child(spec.name)
        repo = Repository(root)
        source = _source(spec, repo)
        roles = [SinkRole(_files_sink(s, spec), "results") for s in spec.sinks]
        roles.append(SinkRole(_files_sink(spec.late_records, spec), "late"))
        roles.append(SinkRole(_files_sink(spec.dead_letters, spec), "dead"))
        return cls(
            spec, repo, source, tuple(roles), clock, new_attempt_id, faults or Faults(), run_id
        )


def _source(spec: PipelineSpec, repo: Repository) -> Source:
    """The source ``spec.source.type`` names."""
    if spec.source.type == "nexmark":
        return NexmarkSource(spec.source)
    return FilesSource(
        spec.source,
        open_store(spec.source.path, s3=spec.s3),
        required=(spec.event_time.column,),
        history=repo.planned_files,
    )


def _files_sink(sink: SinkSpec, spec: PipelineSpec) -> FilesSink:
    store: ObjectStore = open_store(sink.path, s3=spec.s3)
    return FilesSink(sink, store)
