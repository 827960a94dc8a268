"""Pipeline specs: YAML in, frozen validated config objects out."""

from sluice.spec.durations import format_duration, parse_duration_us
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.loader import load_spec, parse_spec
from sluice.spec.model import (
    AggregateSpec,
    CheckpointSpec,
    EventTimeSpec,
    PipelineSpec,
    RestartSpec,
    SinkSpec,
    SourceSpec,
    WindowSpec,
)

__all__ = [
    "AggregateSpec",
    "CheckpointSpec",
    "EventTimeSpec",
    "PipelineSpec",
    "RestartSpec",
    "SinkSpec",
    "SourceSpec",
    "SpecError",
    "SpecProblem",
    "WindowSpec",
    "format_duration",
    "load_spec",
    "parse_duration_us",
    "parse_spec",
]
