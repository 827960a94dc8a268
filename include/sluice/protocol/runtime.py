"""Everything one protocol step needs, built once from a spec.

Time, attempt ids and fault injection come in as parameters (STYLE.md §7): the engine never
reads the wall clock, a random source or the environment on its own.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from sluice.keyed.functions import load_reference
from sluice.protocol.exceptions import MissingConnection, PluginError
from sluice.protocol.faults import Faults
from sluice.protocol.repository import Repository
from sluice.sinks import FilesSink, Sink
from sluice.sources import FilesSource, Source
from sluice.spec.exceptions import SpecError, SpecProblem
from sluice.spec.loader import NAME_RE
from sluice.spec.model import PipelineSpec, SinkSpec
from sluice.storage import ObjectStore, open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Runtime", "SinkRole", "connection_uri", "connections_from_env"]


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
        """Open the checkpoint store, the source and every sink named by ``spec``.

        ``connections`` maps connection ids to URIs (see :func:`connections_from_env`);
        ``spark`` returns a Spark session for sinks whose commit runs Spark (Delta), called
        only when one does.
        """
        _check_name(spec)
        root = open_store(spec.checkpoint.storage, s3=spec.s3).child(spec.name)
        repo = Repository(root)
        source = _source(spec, repo, connections or {})
        opened = _SinkFactory(spec, connections or {}, spark or _default_spark(spec))
        roles = [SinkRole(opened.sink(s, f"sinks.{s.name}"), "results") for s in spec.sinks]
        roles.append(SinkRole(opened.sink(spec.late_records, "late_records"), "late"))
        roles.append(SinkRole(opened.sink(spec.dead_letters, "dead_letters"), "dead"))
        return cls(
            spec, repo, source, tuple(roles), clock, new_attempt_id, faults or Faults(), run_id
        )


def _check_name(spec: PipelineSpec) -> None:
    """The name is the storage prefix ``<storage>/<name>/``: one plain segment, also for a
    spec built in code rather than by the loader (``a/b`` would share another's prefix)."""
    if not NAME_RE.match(spec.name):
        problem = SpecProblem("name", f"{spec.name!r} is not a valid pipeline name",
                              "use lower-case letters, digits and '_' only")  # fmt: skip
        raise SpecError(spec.origin, [problem])


def _source(spec: PipelineSpec, repo: Repository, connections: Mapping[str, str]) -> Source:
    """The source ``spec.source.type`` names; a plugin gets ``(spec, options, event time
    column)``."""
    if spec.source.plugin:
        cls = _plugin_class(spec, "source", spec.source.type, Source)
        options = copy.deepcopy(dict(spec.source.options))
        args = (spec.source, options, spec.event_time.column)
        source: Source = _construct(spec, "source", spec.source.type, cls, *args)
        return source
    if spec.source.type == "nexmark":
        from sluice.sources.nexmark import NexmarkSource

        return NexmarkSource(spec.source)
    if spec.source.type == "kafka":
        from sluice.sources.kafka import KafkaSource

        conn_id = spec.source.option("connection")
        return KafkaSource(
            spec.source,
            required=(spec.event_time.column,),
            connection=connections.get(conn_id) if conn_id else None,
        )
    return FilesSource(
        spec.source,
        open_store(spec.source.path, s3=spec.s3),
        required=(spec.event_time.column,),
        history=repo.planned_files,
    )


@dataclass(frozen=True)
class _SinkFactory:
    spec: PipelineSpec
    connections: Mapping[str, str]
    spark: Callable[[], SparkSession]

    def sink(self, sink: SinkSpec, field: str) -> Sink:
        """The sink ``sink`` names (``field``: where the spec declares it, for errors); a plugin
        gets ``(spec, options, pipeline name)``."""
        if sink.plugin:
            cls = _plugin_class(self.spec, field, sink.type, Sink)
            options = copy.deepcopy(dict(sink.options))
            args = (sink, options, self.spec.name)
            built: Sink = _construct(self.spec, field, sink.type, cls, *args)
            if getattr(built, "name", None) != sink.name:
                reason = f"its name is {getattr(built, 'name', None)!r}; set self.name = spec.name"
                raise PluginError(self.spec.name, f"{field}.type", sink.type, reason)
            return built
        if sink.type == "postgres":
            from sluice.sinks.postgres import PostgresSink

            assert sink.connection is not None
            url = self.connections.get(sink.connection)
            if url is None:
                raise MissingConnection(self.spec.name, sink.name, sink.connection)
            return PostgresSink(sink, url, self.spec.name)
        store: ObjectStore = open_store(sink.path, s3=self.spec.s3)
        if sink.type == "delta":
            from sluice.sinks.delta import DeltaSink

            return DeltaSink(sink, store, self.spec.name, self.spark)
        return FilesSink(sink, store)


def _plugin_class(spec: PipelineSpec, field: str, reference: str, base: type) -> type:
    """The class ``reference`` names, imported from the spec's folder first (as process
    functions are), checked to be a ``base``."""

    def fail(reason: str) -> PluginError:
        return PluginError(spec.name, f"{field}.type", reference, reason)

    folder = None if spec.origin == "<memory>" else os.path.dirname(os.path.abspath(spec.origin))
    cls: type = load_reference(reference, folder, fail, what="class", accept=inspect.isclass)
    if not issubclass(cls, base):
        wanted = f"{base.__module__}.{base.__qualname__}"
        raise fail(f"{cls.__module__}.{cls.__qualname__} is not a subclass of {wanted}")
    return cls


def _construct(spec: PipelineSpec, field: str, reference: str, cls: type, *args: Any) -> Any:
    """``cls(*args)``; whatever it raises (options it refuses, an abstract method left out)
    becomes a :class:`PluginError` naming the field."""
    try:
        return cls(*args)
    except Exception as exc:
        reason = f"{cls.__qualname__}(...) raised {type(exc).__name__}: {exc}"
        raise PluginError(spec.name, f"{field}.options", reference, reason) from exc


def _default_spark(spec: PipelineSpec) -> Callable[[], SparkSession]:
    def get() -> SparkSession:
        from sluice.spark import spark_session

        return spark_session(f"sluice-{spec.name}", s3=spec.s3)

    return get


def connections_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """Connection ids -> URIs from ``SLUICE_CONN_<ID>`` and, as Airflow defines them in the
    environment, ``AIRFLOW_CONN_<ID>`` (URI or JSON form); ids are lower case."""
    found: dict[str, str] = {}
    for prefix in ("AIRFLOW_CONN_", "SLUICE_CONN_"):  # SLUICE_CONN_ wins
        for name, value in env.items():
            if name.startswith(prefix) and value:
                found[name[len(prefix) :].lower()] = connection_uri(value)
    return found


def connection_uri(value: str) -> str:
    """A connection's URI from Airflow's URI or JSON form (``postgres://`` becomes
    ``postgresql://``)."""
    value = value.strip()
    if value.startswith("{"):
        data = json.loads(value)
        scheme = data.get("conn_type") or "postgresql"
        if scheme == "kafka":  # the client settings are the extra (Airflow's kafka type)
            extra = data.get("extra") or {}
            extra = json.loads(extra) if isinstance(extra, str) else extra
            user = quote(str(data.get("login") or ""), safe="")
            password = quote(str(data.get("password") or ""), safe="")
            auth = f"{user}:{password}@" if user or password else ""
            host = f"{data.get('host') or ''}" + (f":{data['port']}" if data.get("port") else "")
            return f"kafka://{auth}{host}/?{urlencode({'__extra__': json.dumps(extra)})}"
        user = quote(str(data.get("login") or ""), safe="")
        password = quote(str(data.get("password") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        port = f":{data['port']}" if data.get("port") else ""
        value = (
            f"{scheme}://{auth}{data.get('host') or 'localhost'}{port}/{data.get('schema') or ''}"
        )
    for alias in ("postgres://", "postgresql+psycopg2://"):
        if value.startswith(alias):
            value = "postgresql://" + value[len(alias) :]
    return value
