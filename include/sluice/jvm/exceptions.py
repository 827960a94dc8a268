"""Errors of Sluice's Spark helper jar: it cannot be built here, or a session lacks it."""

from __future__ import annotations

from sluice.exceptions import SluiceError

__all__ = ["HelperClassesMissing", "HelperJarUnavailable"]


class HelperJarUnavailable(SluiceError):
    """The helper jar is not there and cannot be built here (``reason`` says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"Sluice's Spark helper jar cannot be built: {reason}. Fix: install a JDK 17+ "
            "(javac; Debian: apt-get install openjdk-17-jdk-headless) and run `make jvm`, or "
            "set SLUICE_SPARK_HELPER_JAR to a jar built by `make jvm` on another machine."
        )
        self.reason = reason


class HelperClassesMissing(SluiceError):
    """The Spark session was started without Sluice's helper jar."""

    def __init__(self) -> None:
        super().__init__(
            "this Spark session cannot load Sluice's helper classes (io.sluice.spark): start it "
            "with sluice.spark.spark_session(), or add the jars of sluice.spark.engine_jars() "
            "to spark.jars / spark-submit --jars"
        )
