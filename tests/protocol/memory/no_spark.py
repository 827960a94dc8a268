"""``pytest -p tests.protocol.memory.no_spark``: a run in which Spark cannot start.

The in-memory protocol suite needs no Spark; run it with this plugin to show it: launching
Spark's JVM gateway raises, and the session fails if a SparkContext exists at its end.
(PySpark's modules may still be imported by the package; that starts nothing.)
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("this test run must not start Spark (tests.protocol.memory.no_spark)")


def pytest_configure(config: pytest.Config) -> None:
    import pyspark.core.context
    import pyspark.java_gateway

    pyspark.java_gateway.launch_gateway = _refuse
    pyspark.core.context.launch_gateway = _refuse  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from pyspark import SparkContext

    if SparkContext._gateway is not None or SparkContext._active_spark_context is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        raise RuntimeError("a Spark gateway was started during this run")
