"""Everything one protocol step needs, built once from a spec (by
:func:`sluice.pipeline.open_pipeline`, which chooses the source, sinks and operator).

Time, attempt ids and fault injection come in as parameters, so tests can drive them: the
engine never reads the wall clock, a random source or the environment on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.contracts.lookups import LookupTable
from sluice.contracts.operators import Operator
from sluice.contracts.sinks import Sink
from sluice.contracts.sources import Source
from sluice.protocol.exceptions import ProtocolError
from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.loader import NAME_RE
from sluice.spec.model import PipelineSpec
from sluice.storage import open_store

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
    source: Source[Any, Any]
    sinks: tuple[SinkRole, ...]
    clock: Callable[[], float]
    new_attempt_id: Callable[[], str]
    faults: Faults = field(default_factory=Faults)
    run_id: str | None = None
    # the spec's operator, made on first use (plan and commit never need one)
    operator: Callable[[], Operator[PipelineSpec]] = field(default=lambda: _no_operator())
    # connection URIs by id, for what the protocol itself reaches (a postgres lookup table)
    connections: Mapping[str, str] = field(default_factory=dict)
    # the lookup table kinds by type (sluice.pipeline.LOOKUP_KINDS): what pins and reads them
    lookup_kinds: Mapping[str, LookupTable] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def sink(self, name: str) -> Sink:
        return next(r.sink for r in self.sinks if r.sink.name == name)


def _no_operator() -> Operator[PipelineSpec]:
    raise ProtocolError("this runtime was opened without an operator (see open_pipeline)")


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
