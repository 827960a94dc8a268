"""Pipeline specs: YAML in, frozen validated config objects out.

The source, the sinks and the window are components: each ``type`` has its own config class
(:mod:`sluice.spec.registry`) with a ``build`` that makes the runtime object.
"""

from sluice.spec.components.base import SinkConfig, SourceConfig, WindowConfig
from sluice.spec.components.delta_sink import DeltaSinkConfig
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.spec.components.files_source import FilesSourceConfig
from sluice.spec.components.iceberg_sink import IcebergSinkConfig
from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.spec.components.kafka_source import KafkaSourceConfig
from sluice.spec.components.nexmark_source import NexmarkSourceConfig
from sluice.spec.components.plugins import PluginSinkConfig, PluginSourceConfig
from sluice.spec.components.postgres_sink import PostgresSinkConfig
from sluice.spec.components.windows import CountWindow, HoppingWindow, SessionWindow, TumblingWindow
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
    "CountWindow",
    "DeltaSinkConfig",
    "EventTimeSpec",
    "FilesSinkConfig",
    "FilesSourceConfig",
    "HoppingWindow",
    "IcebergSinkConfig",
    "KafkaSinkConfig",
    "KafkaSourceConfig",
    "NexmarkSourceConfig",
    "PipelineSpec",
    "PluginSinkConfig",
    "PluginSourceConfig",
    "PostgresSinkConfig",
    "RestartSpec",
    "SessionWindow",
    "SinkConfig",
    "SinkSpec",
    "SourceConfig",
    "SourceSpec",
    "SpecError",
    "SpecProblem",
    "TumblingWindow",
    "WindowConfig",
    "WindowSpec",
    "format_duration",
    "load_spec",
    "parse_duration_us",
    "parse_spec",
]
