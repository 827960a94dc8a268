"""Opening a pipeline: the one place a spec becomes the :class:`~sluice.protocol.Runtime`
every step runs on, for the CLI, the process jobs, ``sluice serve``, Airflow's tasks and the
monitor alike.

What differs between them is passed in, never looked up on the side: the run id of the
orchestrator, connections it resolved (Airflow's), the Spark session a warm server lends, how
attempt ids are made. The wall clock, random attempt ids, fault injection and connections
from the environment are the defaults (STYLE.md §7: the protocol itself reads none of them).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.connections import connections_from_env
from sluice.protocol.faults import Faults
from sluice.protocol.runtime import Runtime
from sluice.spec import PipelineSpec, load_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["new_attempt_id", "open_pipeline"]


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
) -> Runtime:
    """The runtime of ``spec`` (a spec, or the path of its YAML file).

    Connections: those of ``env`` (``SLUICE_CONN_<ID>`` / ``AIRFLOW_CONN_<ID>``; default
    ``os.environ``), with ``connections`` over them. Faults: ``faults``, else the ones
    ``env`` asks for (``SLUICE_FAULT``: tests). ``spark`` gives sinks whose commit runs Spark
    (Delta) a session, called only when one does (default: a session of their own).
    """
    env = os.environ if env is None else env
    if not isinstance(spec, PipelineSpec):
        spec = load_spec(Path(spec))
    return Runtime.build(
        spec,
        clock=clock,
        new_attempt_id=attempt_ids,
        faults=faults if faults is not None else Faults.from_env(env),
        run_id=run_id,
        connections={**connections_from_env(env), **(connections or {})},
        spark=spark,
    )
