"""Sluice's few JVM helpers for Spark (Java sources in ``java/``), and the jar they build into.

Spark has no built-in for what an epoch needs in the order a task reads its rows: the running
maximum event time (the watermark at each record's position) and a file's line numbers. Window
functions would sort every record; these helpers are stateful Java UDFs that a task calls once
per row in read order, and a :class:`RunLedger` accumulator that reports per-run facts (extreme
event times, rows per class) exactly once even when Spark re-runs a task.

The jar is built on first use with the JDK's ``javac`` against the installed PySpark's jars,
into a content-addressed file in the temp dir (``make jvm`` builds it ahead);
``$SLUICE_SPARK_HELPER_JAR`` names a prebuilt one instead. Every Spark session Sluice builds
puts it on the classpath (:func:`sluice.spark.engine_jars`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from sluice.jvm.exceptions import HelperJarUnavailable

__all__ = ["HelperJarUnavailable", "helper_jar", "pyspark_jars"]

SOURCES = Path(__file__).resolve().parent / "java"


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _digest() -> str:
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in _sources():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def helper_jar() -> Path:
    """The helper jar, built now if this content has not been built before."""
    override = os.environ.get("SLUICE_SPARK_HELPER_JAR")
    if override:
        path = Path(override)
        if not path.is_file():
            raise HelperJarUnavailable(f"SLUICE_SPARK_HELPER_JAR={override} is not a file")
        return path
    target = Path(tempfile.gettempdir()) / f"sluice-spark-{_digest()}.jar"
    if target.is_file():
        return target
    lock = target.with_suffix(".lock")
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # concurrent first uses build once
        if not target.is_file():
            _build(target)
    return target


def _build(target: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise HelperJarUnavailable("no javac on PATH")
    classpath = str(pyspark_jars() / "*")
    with tempfile.TemporaryDirectory(prefix="sluice-jvm-") as tmp:
        command = [javac, "--release", "17", "-nowarn", "-d", tmp, "-cp", classpath]
        done = subprocess.run(
            [*command, *map(str, _sources())], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise HelperJarUnavailable(f"javac failed: {done.stderr.strip()[-2000:]}")
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for path in sorted(Path(tmp).rglob("*.class")):
                jar.write(path, str(path.relative_to(tmp)))
        os.replace(partial, target)
