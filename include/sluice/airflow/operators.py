"""``SluiceProcessOperator``: the ``process`` task, a spark-submit of ``jobs/run_epoch.py``.

It is Airflow's own ``SparkSubmitOperator``; the master comes from the Spark connection (local
by default, ``spark://``, YARN or Kubernetes by connection). What only the worker knows is
filled in when the task runs, not when the DAG is parsed, so the serialized DAG carries no
machine paths: the s3a jars, the driver's JVM options, and an environment in which
``spark-submit`` and the Python workers are those of the interpreter running Airflow (the
``sluice`` package itself is shipped to executors by the job, see ``sluice.spark.package_zip``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from sluice.spark import s3a_jars, submit_conf

__all__ = ["SluiceProcessOperator", "process_env"]

# Passed through to the Spark driver when set on the worker (fault injection, jar folder...).
_PASSTHROUGH = ("SLUICE_FAULT", "SLUICE_FAULT_EPOCH", "SLUICE_FAULT_ONCE", "SLUICE_JARS_DIR")


def process_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for spark-submit: this interpreter's bin folder first on PATH, and its
    Python for the driver and workers unless ``PYSPARK_PYTHON`` is set."""
    environ = dict(os.environ if environ is None else environ)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        "PATH": os.pathsep.join([bin_dir, environ.get("PATH", "")]).rstrip(os.pathsep),
        "PYSPARK_PYTHON": environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }
    env.update({k: environ[k] for k in _PASSTHROUGH if k in environ})
    return env


class SluiceProcessOperator(SparkSubmitOperator):
    """``spec_path`` names the pipeline spec, whose sinks' connections the driver gets as
    ``SLUICE_CONN_<ID>`` environment variables (never on the command line)."""

    ui_color = "#f4a261"

    def __init__(self, *, spec_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path

    def execute(self, context: Any) -> None:
        self.env_vars = {**process_env(), **(self.env_vars or {})}
        if self.spec_path:
            from sluice.airflow.tasks import spec_connections
            from sluice.spec import load_spec

            for conn_id, uri in spec_connections(load_spec(self.spec_path)).items():
                self.env_vars[f"SLUICE_CONN_{conn_id.upper()}"] = uri
        self.conf = {**submit_conf(), **(self.conf or {})}
        if not self.jars:
            self.jars = ",".join(str(p) for p in s3a_jars()) or None
        super().execute(context)
