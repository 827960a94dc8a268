"""Opening a pipeline: the one place a spec becomes the :class:`~sluice.protocol.Runtime`
every step runs on, for the CLI, the process jobs, ``sluice serve``, Airflow's tasks and the
monitor alike — and the wiring: which runtime each component ``type`` of a spec opens
(:data:`SOURCE_BUILDERS`, :data:`SINK_BUILDERS`), which kind each lookup table type is
(:data:`LOOKUP_KINDS`) and which operator runs it (:func:`operator_for`). Configs are plain
data (:mod:`sluice.spec.components`); each builder imports its runtime when a pipeline opens
one, so loading a spec (DAG parsing) imports none.

What differs between them is passed in, never looked up on the side: the run id of the
orchestrator, connections it resolved (Airflow's), the Spark session a warm server lends, how
attempt ids are made. The wall clock, random attempt ids, fault injection and connections
from the environment are the defaults (the protocol itself reads none of them).
"""

from __future__ import annotations

import copy
import inspect
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.connections import connections_from_env
from sluice.contracts import layout
from sluice.contracts.lookups import LookupTable
from sluice.contracts.sinks import Sink
from sluice.contracts.sources import Source
from sluice.lookups import DeltaTable, FilesTable, IcebergTable, PostgresTable
from sluice.protocol.exceptions import MissingConnection, PluginError
from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.protocol.runtime import Runtime, SinkRole, open_repository
from sluice.spec import PipelineSpec, load_spec
from sluice.spec.components.base import SinkConfig, SourceConfig
from sluice.spec.components.delta_sink import DeltaSinkConfig
from sluice.spec.components.files_sink import FilesSinkConfig
from sluice.spec.components.files_source import FilesSourceConfig
from sluice.spec.components.iceberg_sink import IcebergSinkConfig
from sluice.spec.components.kafka_sink import KafkaSinkConfig
from sluice.spec.components.kafka_source import KafkaSourceConfig
from sluice.spec.components.nexmark_source import NexmarkSourceConfig
from sluice.spec.components.plugins import PluginSinkConfig, PluginSourceConfig
from sluice.spec.components.postgres_sink import PostgresSinkConfig
from sluice.spec.components.sqlite_source import SqliteSourceConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sluice.contracts.operators import Operator
    from sluice.spec.model import JoinSpec

__all__ = [
    "LOOKUP_KINDS",
    "SINK_BUILDERS",
    "SOURCE_BUILDERS",
    "BuildContext",
    "new_attempt_id",
    "open_pipeline",
    "open_runtime",
    "open_sink",
    "open_source",
    "operator_for",
]


def new_attempt_id() -> str:
    """A random attempt id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def open_pipeline(
    spec: PipelineSpec | str | os.PathLike[str],
    *,
    run_id: str | None = None,
    connections: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    faults: Faults | None = None,
    spark: Callable[[], SparkSession] | None = None,
    attempt_ids: Callable[[], str] = new_attempt_id,
    clock: Callable[[], float] = time.time,
    sinks: bool = True,
) -> Runtime:
    """The runtime of ``spec`` (a spec, or the path of its YAML file).

    ``sinks=False``: no sink is opened (nor its connection needed), for what only reads the
    checkpoints (``sluice checkpoints``, ``sluice savepoints``); such a runtime cannot run an
    epoch.

    Connections: those of ``env`` (``SLUICE_CONN_<ID>`` / ``AIRFLOW_CONN_<ID>``; default
    ``os.environ``), with ``connections`` over them. Faults: ``faults``, else the ones
    ``env`` asks for (``SLUICE_FAULT``: tests). ``spark`` gives sinks whose commit runs Spark
    (Delta) a session, called only when one does (default: a session of their own).
    """
    env = os.environ if env is None else env
    if not isinstance(spec, PipelineSpec):
        spec = load_spec(Path(spec))
    return open_runtime(
        spec,
        clock=clock,
        new_attempt_id=attempt_ids,
        faults=faults if faults is not None else Faults.from_env(env),
        run_id=run_id,
        connections={**connections_from_env(env), **(connections or {})},
        spark=spark,
        sinks=sinks,
    )


def open_runtime(
    spec: PipelineSpec,
    *,
    clock: Callable[[], float],
    new_attempt_id: Callable[[], str],
    faults: Faults | None = None,
    run_id: str | None = None,
    connections: Mapping[str, str] | None = None,
    spark: Callable[[], SparkSession] | None = None,
    sinks: bool = True,
) -> Runtime:
    """Open the checkpoint store, the source and every sink named by ``spec`` (no sink with
    ``sinks=False``), with exactly the connections given (:func:`open_pipeline` adds the
    environment's).

    ``spark`` returns a Spark session for sinks whose commit runs Spark (Delta), called only
    when one does.
    """
    repo = open_repository(spec)
    ctx = BuildContext(repo, connections or {}, spark or _default_spark(spec))
    source = open_source(spec, ctx)
    roles = []
    if sinks:
        roles = [
            SinkRole(open_sink(s, spec, ctx, f"sinks.{s.name}"), "results") for s in spec.sinks
        ]
        roles.append(SinkRole(open_sink(spec.late_records, spec, ctx, "late_records"), "late"))
        roles.append(SinkRole(open_sink(spec.dead_letters, spec, ctx, "dead_letters"), "dead"))
    return Runtime(
        spec, repo, source, tuple(roles), clock, new_attempt_id, faults or Faults(), run_id,
        lambda: operator_for(spec), dict(ctx.connections), dict(LOOKUP_KINDS),
    )  # fmt: skip


def operator_for(spec: PipelineSpec) -> Operator[PipelineSpec]:
    """The operator of ``spec`` (its ``operator``: windows, a keyed process function or none)."""
    if spec.operator == "windows":
        from sluice.windows.operator import WindowOperator

        return WindowOperator(spec)
    if spec.operator == "join":
        from sluice.joins.operator import JoinOperator

        return JoinOperator(spec)
    if spec.operator == "process":
        from sluice.keyed.operator import KeyedOperator

        return KeyedOperator(spec)
    from sluice.operators.stateless import StatelessOperator

    return StatelessOperator(spec)


@dataclass(frozen=True)
class BuildContext:
    """What opening a component may need besides its config and the spec: the checkpoint
    repository, connection URIs by id, and a Spark session getter (called only if needed).
    ``side``: the join source being opened (what it keeps for itself goes in its folder)."""

    repo: Repository
    connections: Mapping[str, str]
    spark: Callable[[], Any]
    side: str | None = None


SourceBuilder = Callable[[Any, PipelineSpec, BuildContext], Source[Any, Any]]
SinkBuilder = Callable[[Any, PipelineSpec, BuildContext, str], Sink]


def _files_source(c: FilesSourceConfig, spec: PipelineSpec, ctx: BuildContext) -> Source[Any, Any]:
    from sluice.sources.files import FilesSource
    from sluice.sources.files_read import ReadLog
    from sluice.storage import open_store

    store = open_store(c.path, s3=spec.s3)
    log = ReadLog(ctx.repo.store, layout.source_folder(ctx.side or "source") + "files-read/")
    clean = c.clean_source
    archive = open_store(clean.archive_path, s3=spec.s3) if clean and clean.archive_path else None
    return FilesSource(
        c, store, log=log, required=(spec.event_time.column,), read=spec.read_columns(),
        archive=archive, events=_store_events(c, spec, ctx),
    )  # fmt: skip


def _store_events(c: FilesSourceConfig, spec: PipelineSpec, ctx: BuildContext) -> Any:
    """The store's events of a files source with ``notifications`` (None without)."""
    events = c.notifications
    if events is None:
        return None
    from sluice.kafka_client import connection_settings
    from sluice.sources.store_events import StoreEvents  # confluent-kafka: notifications only

    settings: dict[str, str] = {}
    if events.connection:
        url = ctx.connections.get(events.connection)
        if url is None:
            example = "kafka://broker:9092 (Airflow's kafka connection type)"
            raise MissingConnection(
                spec.name, "notifications", events.connection, example, what="source"
            )
        settings = connection_settings(url)
    return StoreEvents(events, c.path, settings)


def _kafka_source(c: KafkaSourceConfig, spec: PipelineSpec, ctx: BuildContext) -> Source[Any, Any]:
    from sluice.sources.kafka import KafkaSource

    url = ctx.connections.get(c.connection) if c.connection else None
    return KafkaSource(
        c, required=(spec.event_time.column,), read=spec.read_columns(), connection=url
    )


def _nexmark_source(
    c: NexmarkSourceConfig, spec: PipelineSpec, ctx: BuildContext
) -> Source[Any, Any]:
    from sluice.sources.nexmark import NexmarkSource

    return NexmarkSource(c)


def _sqlite_source(
    c: SqliteSourceConfig, spec: PipelineSpec, ctx: BuildContext
) -> Source[Any, Any]:
    from sluice.examples.sqlite_source import SqliteSource

    settings = c.model_dump(include={"path", "table", "id_column", "rows_per_epoch"})
    return SqliteSource(c, settings, spec.event_time.column)


def _plugin_source(
    c: PluginSourceConfig, spec: PipelineSpec, ctx: BuildContext
) -> Source[Any, Any]:
    built: Source[Any, Any] = _plugin(c, spec, "source", Source, spec.event_time.column)
    return built


def _files_sink(c: FilesSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    from sluice.sinks.files import FilesSink
    from sluice.storage import open_store

    return FilesSink(c, open_store(c.path, s3=spec.s3))


def _postgres_sink(
    c: PostgresSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str
) -> Sink:
    from sluice.sinks.postgres import PostgresSink

    url = ctx.connections.get(c.connection)
    if url is None:
        raise MissingConnection(spec.name, c.name, c.connection)
    return PostgresSink(c, url, spec.name)


def _delta_sink(c: DeltaSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    from sluice.sinks.delta import DeltaSink
    from sluice.storage import open_store

    return DeltaSink(c, open_store(c.path, s3=spec.s3), spec.name, ctx.spark)


def _iceberg_sink(c: IcebergSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    from sluice.sinks.iceberg import IcebergSink
    from sluice.storage import open_store

    url = ctx.connections.get(c.connection)
    if url is None:
        example = "http://catalog:8181 (REST catalog) or postgresql://user:password@host/db (SQL)"
        raise MissingConnection(spec.name, c.name, c.connection, example)
    return IcebergSink(c, url, open_store(c.warehouse, s3=spec.s3), spec.name, spec.s3)


def _kafka_sink(c: KafkaSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    from sluice.kafka_client import connection_settings, planner_settings
    from sluice.sinks.kafka import KafkaSink

    settings: dict[str, str] = {}
    if c.connection:
        url = ctx.connections.get(c.connection)
        if url is None:
            example = "kafka://user:password@broker:9092 (Airflow's kafka connection type)"
            raise MissingConnection(spec.name, c.name, c.connection, example)
        settings = planner_settings(connection_settings(url))  # the source's reading of it
    return KafkaSink(c, ctx.repo.store, spec.name, settings, qos=spec.qos)


def _plugin_sink(c: PluginSinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    built: Sink = _plugin(c, spec, field, Sink, spec.name)  # _plugin checked the class
    name = getattr(built, "name", None)  # a class of one's own may never set it
    if name != c.name:
        reason = f"its name is {name!r}; set self.name = config.name"
        raise PluginError(spec.name, f"{field}.type", c.type, reason)
    return built


# Each component type's runtime: one line per type (docs/architecture.md).
SOURCE_BUILDERS: dict[type[SourceConfig], SourceBuilder] = {
    FilesSourceConfig: _files_source,
    NexmarkSourceConfig: _nexmark_source,
    KafkaSourceConfig: _kafka_source,
    SqliteSourceConfig: _sqlite_source,
    PluginSourceConfig: _plugin_source,
}
SINK_BUILDERS: dict[type[SinkConfig], SinkBuilder] = {
    FilesSinkConfig: _files_sink,
    PostgresSinkConfig: _postgres_sink,
    DeltaSinkConfig: _delta_sink,
    IcebergSinkConfig: _iceberg_sink,
    KafkaSinkConfig: _kafka_sink,
    PluginSinkConfig: _plugin_sink,
}

# Each lookup table type's kind (its pins, reads, checks): one line per type; the spec's line
# is sluice.spec.model.LOOKUP_TABLES (docs/extending.md, "A new lookup kind").
LOOKUP_KINDS: dict[str, LookupTable] = {
    FilesTable.type: FilesTable(),
    DeltaTable.type: DeltaTable(),
    PostgresTable.type: PostgresTable(),
    IcebergTable.type: IcebergTable(),
}


def open_source(spec: PipelineSpec, ctx: BuildContext) -> Source[Any, Any]:
    """The runtime source of ``spec.source``; for a join, one source over both sides'."""
    if spec.join is not None:
        return _join_source(spec.join, spec, ctx)
    return SOURCE_BUILDERS[type(spec.source)](spec.source, spec, ctx)


def _join_source(join: JoinSpec, spec: PipelineSpec, ctx: BuildContext) -> Source[Any, Any]:
    """Each side's source, opened by its builder as if it were the pipeline's only one (its
    event time, the columns it reads), as one :class:`~sluice.sources.multi.MultiSource`."""
    from sluice.sources.multi import MultiSource

    parts = {}
    for side in join.sides:
        side_ctx = replace(ctx, side=side.name)
        parts[side.name] = SOURCE_BUILDERS[type(side.source)](
            side.source, spec.side_spec(side), side_ctx
        )
    return MultiSource(parts)


def open_sink(config: SinkConfig, spec: PipelineSpec, ctx: BuildContext, field: str) -> Sink:
    """The runtime sink of ``config`` (``field``: where the spec declares it)."""
    return SINK_BUILDERS[type(config)](config, spec, ctx, field)


def _plugin(
    c: PluginSourceConfig | PluginSinkConfig, spec: PipelineSpec, field: str, base: type, *args: Any
) -> Any:
    """``cls(config, options, *args)`` for the class ``type: module:Class`` names, imported
    from the spec's folder first and checked to be a ``base``; whatever the constructor raises
    (options it refuses, an abstract method left out) becomes a :class:`PluginError` naming
    the field."""
    from sluice.keyed.functions import load_reference

    def fail(reason: str) -> PluginError:
        return PluginError(spec.name, f"{field}.type", c.type, reason)

    origin = spec.origin
    folder = None if origin == "<memory>" else os.path.dirname(os.path.abspath(origin))
    cls: Any = load_reference(c.type, folder, fail, what="class", accept=inspect.isclass)
    if not issubclass(cls, base):
        wanted = f"{base.__module__}.{base.__qualname__}"
        raise fail(f"{cls.__module__}.{cls.__qualname__} is not a subclass of {wanted}")
    try:
        return cls(c, copy.deepcopy(dict(c.options)), *args)
    except Exception as exc:
        reason = f"{cls.__qualname__}(...) raised {type(exc).__name__}: {exc}"
        raise PluginError(spec.name, f"{field}.options", c.type, reason) from exc


def _default_spark(spec: PipelineSpec) -> Callable[[], SparkSession]:
    def get() -> SparkSession:
        from sluice.spark import spark_session

        return spark_session(f"sluice-{spec.name}", s3=spec.s3)

    return get
