"""The ``process`` task: cold, a spark-submit of ``jobs/run_epoch.py`` (``SluiceProcessOperator``),
or warm, one request to a ``sluice serve`` server (``SluiceServedProcessOperator``).

It is Airflow's own ``SparkSubmitOperator``; the master comes from the Spark connection (local
by default, ``spark://``, YARN or Kubernetes by connection). What only the worker knows is
filled in when the task runs, not when the DAG is parsed, so the serialized DAG carries no
machine paths: the s3a jars, the driver's JVM options, and an environment in which
``spark-submit`` and the Python workers are those of the interpreter running Airflow (the
``sluice`` package itself is shipped to executors by the job, see ``sluice.spark.package_zip``).

The warm operator runs the same attempt (:func:`sluice.jobs.process_attempt`) in the server's
long-lived Spark session; see docs/warm-execution.md.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

from sluice.airflow.hooks import DEFAULT_SERVE_CONN, SluiceServeHook
from sluice.jobs import RESULT_PREFIX
from sluice.serve import PipelineBusy, ServeClient, ServeError, ServeRefused
from sluice.spark import engine_jars, submit_conf

__all__ = ["SluiceProcessOperator", "SluiceServedProcessOperator", "process_env"]

# How long the warm task waits before asking a busy server again (429, or 409 for another
# pipeline's S3 settings).
BUSY_WAIT_S = 5.0
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
            self.jars = ",".join(str(p) for p in engine_jars()) or None
        super().execute(context)


class SluiceServedProcessOperator(BaseOperator):
    """The ``process`` task in warm mode: one attempt of epoch ``epoch`` on the ``sluice
    serve`` server of connection ``serve_conn_id``; the sinks' connection URIs travel in the
    request body (never in a log). Polls until the attempt ends, logs and returns its summary
    (the ``SLUICE_RESULT`` of the cold task). ``on_kill`` (task cleared, marked failed, timed
    out) cancels the attempt; the server dying fails the task, and its retry starts a new
    attempt on the restarted server.
    """

    template_fields: Sequence[str] = ("epoch", "run_id")
    ui_color = "#e76f51"

    def __init__(
        self,
        *,
        spec_path: str,
        epoch: int | str,
        run_id: str | None = None,
        serve_conn_id: str = DEFAULT_SERVE_CONN,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.epoch = epoch
        self.run_id = run_id
        self.serve_conn_id = serve_conn_id
        self._client: ServeClient | None = None
        self._request_id: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from sluice.airflow.tasks import spec_connections
        from sluice.spec import load_spec

        client = SluiceServeHook(self.serve_conn_id).get_conn()
        spec = load_spec(self.spec_path)
        started = self._start(client, spec.name, spec_connections(spec))
        self._client, self._request_id = client, str(started["id"])
        self.log.info("pipeline %s epoch %s: attempt request %s on %s", started["pipeline"],
                      started["epoch"], self._request_id, client.url)  # fmt: skip
        status = client.wait(self._request_id)
        summary = client.result(status)
        self.log.info("%s%s", RESULT_PREFIX, json.dumps(summary, sort_keys=True))
        self.log.info("served in %.1f s by %s", status["seconds"], summary["spark_application_id"])
        return summary

    def _start(
        self, client: ServeClient, pipeline: str, connections: dict[str, str]
    ) -> dict[str, Any]:
        """Start the attempt. If an earlier try of this very task (same run, same epoch) left
        one running on the server, follow it instead of failing on the 409. While the server
        is full (429) or another pipeline's S3 settings are in use (409), wait: a busy server
        is no reason to fail the epoch (the task's timeout still applies)."""
        epoch = int(self.epoch)
        while True:
            try:
                return client.start(self.spec_path, epoch, self.run_id, connections)
            except PipelineBusy as busy:
                running = busy.running
                if running.get("pipeline") != pipeline:
                    self.log.info("waiting: %s", busy.message)
                    time.sleep(BUSY_WAIT_S)
                    continue
                mine = running.get("epoch") == epoch and running.get("run_id") == self.run_id
                if not mine or running.get("cancel_requested"):
                    raise
                self.log.info("an earlier try's attempt request %s is still running: "
                              "following it", running["id"])  # fmt: skip
                return running
            except ServeRefused as refused:
                if refused.status != 429:
                    raise
                self.log.info("waiting: %s", refused.message)
                time.sleep(BUSY_WAIT_S)

    def on_kill(self) -> None:
        if self._client is None or self._request_id is None:
            return
        try:
            status = self._client.cancel(self._request_id)
        except ServeError as exc:
            self.log.warning("could not cancel attempt request %s: %s", self._request_id, exc)
            return
        self.log.info("attempt request %s: cancel sent (%s)", self._request_id, status["status"])
