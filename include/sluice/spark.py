"""The one place that builds Spark sessions for Sluice (jobs, CLI, tests).

``spark_session()`` gives a quiet, deterministic local session (UTC, few shuffle partitions,
no UI) that can read and write ``s3a://`` (and ``s3://``, mapped to the same connector) on
AWS S3 or any S3-compatible server (MinIO, SeaweedFS):

* the jars for s3a (hadoop-aws + AWS SDK v2, fetched by ``make jars`` into ``.cache/jars``
  or ``$SLUICE_JARS_DIR``) are put on the classpath when that folder exists;
* endpoint and region come from :class:`S3Options` or the standard ``AWS_*`` env vars;
* credentials come from the standard AWS chain (JVM system properties, env vars, web
  identity, profile, instance/container role): they are never written to Spark's conf;
* Delta Lake's SQL extension and catalog are enabled when the Delta jar
  (``delta-spark_2.13-*.jar``) is in that folder too (:func:`delta_conf`). Plain Parquet / JSON
  reads and writes by path are unaffected: the Delta catalog delegates non-Delta tables to
  Spark's session catalog.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.storage.s3options import S3Options

if TYPE_CHECKING:  # PySpark loads on the first session: DAG parsing never needs it
    from pyspark.sql import SparkSession

__all__ = [
    "CREDENTIALS_PROVIDERS",
    "DEFAULT_MASTER",
    "DEFAULT_REGION",
    "S3A_RETRY_CONF",
    "S3A_STREAM_CONF",
    "configure_s3",
    "delta_conf",
    "delta_jar",
    "engine_jars",
    "epoch_session",
    "jars_dir",
    "launched_by_spark_submit",
    "package_zip",
    "s3a_conf",
    "s3a_jars",
    "spark_session",
    "submit_conf",
]

DEFAULT_MASTER = "local[2]"
DEFAULT_REGION = "us-east-1"
SHUFFLE_PARTITIONS = 4
# An epoch caches its records for the epoch's few actions only; compressing the cache cost more
# than it saved (1M bids, every column: 2.58 s to build compressed, 1.44 s not; docs/benchmark.md)
CACHE_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}

# Delta Lake (the ``delta`` sink), enabled when its jar is among the jars: both settings are
# static, so they must be known when the session starts.
DELTA_JAR_PREFIX = "delta-spark_2.13-"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# The AWS SDK's default chain, spelled out so that each S3A filesystem instance gets its own
# chain (the SDK's DefaultCredentialsProvider.create() is a JVM-wide singleton that pins the
# first provider that worked). Same order as the SDK: system properties, env vars, web
# identity token, profile, then container / EC2 instance role.
CREDENTIALS_PROVIDERS = (
    "software.amazon.awssdk.auth.credentials.SystemPropertyCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
    "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider",
    "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider",
)

# Python env var -> JVM system property read by the SDK's SystemPropertyCredentialsProvider
# (and ProfileCredentialsProvider for the profile name). See configure_s3().
_CREDENTIAL_PROPERTIES = {
    "AWS_ACCESS_KEY_ID": "aws.accessKeyId",
    "AWS_SECRET_ACCESS_KEY": "aws.secretAccessKey",
    "AWS_SESSION_TOKEN": "aws.sessionToken",
    "AWS_PROFILE": "aws.profile",
}

# Spark's default log4j2 profile at WARN, minus the startup chatter: the banner lines printed
# when no profile is configured, the "no native Hadoop library" warning, and S3A's warning
# that FileOutputCommitter renames are not atomic on S3 (Sluice never relies on them: sinks
# and state are written to attempt-scoped locations and the checkpoint manifest commits).
_LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.metastore.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler
logger.metastore.level = fatal
logger.metastore2.name = org.apache.hadoop.hive.metastore.ObjectStore
logger.metastore2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.committer.name = org.apache.hadoop.fs.s3a.commit.AbstractS3ACommitterFactory
logger.committer.level = error
"""

# S3A's retry and timeout settings (Hadoop 3.4+ names, values with units), bounded so a fault
# is retried soon and an outage fails the step in minutes, not hours. Two layers retry: the AWS
# SDK inside each S3A attempt (attempts.maximum), then S3A's own policy around it (retry.*:
# connection errors and 5xx; throttle.*: 503 SlowDown). Hadoop raises the request timeout to
# at least its minimum network duration (15 s). See docs/storage-faults.md.
S3A_RETRY_CONF = {
    "fs.s3a.attempts.maximum": "3",
    "fs.s3a.retry.limit": "5",
    "fs.s3a.retry.interval": "500ms",
    "fs.s3a.retry.throttle.limit": "5",
    "fs.s3a.retry.throttle.interval": "500ms",
    "fs.s3a.retry.http.5xx.errors": "true",
    "fs.s3a.connection.establish.timeout": "15s",
    "fs.s3a.connection.timeout": "15s",
    "fs.s3a.connection.request.timeout": "60s",
}

# How S3A opens files for reading. hadoop-aws 3.5.0 defaults to the analytics-accelerator
# stream, which keeps every opened stream's statistics (InputStreamStatistics and its
# AnalyticsRequestCallback, ~6 per epoch) for the JVM's lifetime: a warm `sluice serve` driver's
# heap after GC grew ~16 MiB per 100 epochs with it and stays flat with the classic stream
# (bench/results/soak-warm.txt, docs/warm-execution.md). Sluice reads whole Parquet/JSON files
# in one pass, so the accelerator's prefetching buys little here.
S3A_STREAM_CONF = {"fs.s3a.input.stream.type": "classic"}

# The system properties configure_s3() has set in this process's JVM.
_mirrored_properties: set[str] = set()

# Hadoop keys whose change must drop cached S3A filesystem instances (see configure_s3()).
_CONNECTION_KEYS = ("fs.s3a.endpoint", "fs.s3a.endpoint.region", "fs.s3a.connection.ssl.enabled")


def jars_dir() -> Path:
    """Where ``make jars`` puts the s3a jars: ``$SLUICE_JARS_DIR`` or ``<repo>/.cache/jars``."""
    override = os.environ.get("SLUICE_JARS_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / ".cache" / "jars"


def s3a_jars() -> list[Path]:
    """The jars to add to Spark for s3a (empty when ``make jars`` has not run)."""
    folder = jars_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.jar") if p.is_file())


def engine_jars() -> list[Path]:
    """Every jar a Sluice Spark session needs: the helper jar (:mod:`sluice.jvm`, built on
    first use) and :func:`s3a_jars`. spark-submit gets them as ``--jars``."""
    from sluice.jvm import helper_jar

    return [helper_jar(), *s3a_jars()]


def delta_jar() -> Path | None:
    """The Delta Lake jar in :func:`jars_dir` (``delta-spark_2.13-<version>.jar``), if any."""
    found = [p for p in s3a_jars() if p.name.startswith(DELTA_JAR_PREFIX)]
    return found[-1] if found else None


def delta_conf() -> dict[str, str]:
    """The static SQL settings that turn Delta on, or ``{}`` when the Delta jar is absent
    (naming a missing extension class would make every session fail to start)."""
    return dict(DELTA_CONF) if delta_jar() is not None else {}


def _log4j2_config() -> Path:
    """Write :data:`_LOG4J2_PROPERTIES` once to the temp dir (content-addressed) and return it."""
    digest = hashlib.sha256(_LOG4J2_PROPERTIES.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"sluice-log4j2-{digest}.properties"
    if not path.is_file():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2_PROPERTIES, encoding="utf-8")
        os.replace(tmp, path)
    return path


def s3a_conf(s3: S3Options | None = None) -> dict[str, str]:
    """Hadoop settings (without the ``spark.hadoop.`` prefix) for s3a on ``s3``.

    As with boto3, a field left ``None`` (or ``s3=None``) falls back to the env
    (:meth:`S3Options.from_env`); then no endpoint means AWS S3 itself and no region means
    us-east-1. Path-style access is always on (MinIO / SeaweedFS need it; AWS accepts it).
    Holds no credentials.
    """
    env = S3Options.from_env()
    given = s3 if s3 is not None else env
    opts = S3Options(
        endpoint_url=given.endpoint_url or env.endpoint_url,
        region=given.region or env.region,
    )
    conf = {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.AbstractFileSystem.s3a.impl": "org.apache.hadoop.fs.s3a.S3A",
        # Let Spark read the s3:// URIs Sluice's object stores use, through the same connector.
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": opts.region or DEFAULT_REGION,
        "fs.s3a.aws.credentials.provider": ",".join(CREDENTIALS_PROVIDERS),
        **S3A_RETRY_CONF,
        **S3A_STREAM_CONF,
    }
    if opts.endpoint_url:
        conf["fs.s3a.endpoint"] = opts.endpoint_url
        plain_http = opts.endpoint_url.lower().startswith("http://")
        conf["fs.s3a.connection.ssl.enabled"] = "false" if plain_http else "true"
    return conf


# Bounded history in the driver's status store (defaults: 1,000 executions, jobs and stages).
RETENTION_CONF = {
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "5000",
    "spark.ui.retainedDeadExecutors": "10",
}


def spark_session(
    app_name: str = "sluice",
    *,
    master: str | None = None,
    s3: S3Options | None = None,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the Spark session, ready for ``s3a://``.

    ``master`` defaults to ``$SLUICE_SPARK_MASTER``, then ``local[2]``. ``s3=None`` takes the
    endpoint and region from the ``AWS_*`` env vars. ``extra_conf`` is applied last.

    If a session already runs, it is returned with its s3a settings brought up to date
    (:func:`configure_s3`); settings fixed at JVM start (master, jars) stay as they were.
    """
    submitted = launched_by_spark_submit() and master is None
    master = master or os.environ.get("SLUICE_SPARK_MASTER") or DEFAULT_MASTER
    conf: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # The status store keeps every query's plan and metrics even without the UI: a
        # long-lived session (many epochs) filled a 1 GiB driver heap after ~1,000 queries.
        **RETENTION_CONF,
        "spark.log.level": "WARN",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        **CACHE_CONF,
    }
    log_opt = f"-Dlog4j2.configurationFile={_log4j2_config().as_uri()}"
    conf["spark.driver.extraJavaOptions"] = log_opt
    if master.startswith("local") and not submitted:
        # Bind to loopback without Spark's "hostname resolves to a loopback address" warning.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if not os.environ.get("PYSPARK_PYTHON"):
            # Python workers run this interpreter (the venv's), not whatever python3 is on PATH.
            # An in-process context reads only the environment variable; the conf is for
            # executors a cluster manager starts.
            os.environ["PYSPARK_PYTHON"] = sys.executable
            conf["spark.pyspark.python"] = sys.executable
    conf["spark.jars"] = ",".join(str(p) for p in engine_jars())
    conf.update(delta_conf())
    conf.update({f"spark.hadoop.{k}": v for k, v in s3a_conf(s3).items()})
    conf.update(extra_conf or {})

    from pyspark.sql import SparkSession

    builder: Any = SparkSession.builder
    builder = builder.appName(app_name)
    if not submitted:  # under spark-submit, --master (the Airflow connection) decides
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark: SparkSession = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    configure_s3(spark, s3)
    return spark


# What an epoch's queries run with (epoch_session). Adaptive execution re-plans a query at
# every shuffle and runs each stage as a Spark job of its own: an epoch's small queries paid
# more in planning and scheduling than it saved. Without it, the shuffle partitions are set
# here: two per core, which keeps every core busy on a skew-free epoch.
EPOCH_CONF = {"spark.sql.adaptive.enabled": "false"}
_EPOCH_SESSIONS: dict[int, SparkSession] = {}


def epoch_session(spark: SparkSession) -> SparkSession:
    """A session of ``spark``'s context for epochs (:data:`EPOCH_CONF`): same SparkContext,
    cache and settings, its own SQL settings — the caller's session is left as it was."""
    context = spark.sparkContext
    key = id(spark)
    found = _EPOCH_SESSIONS.get(key)
    if found is not None and found.sparkContext is context and context._jsc is not None:
        return found
    child = spark.newSession()
    settings = spark.conf.getAll
    for name, value in (settings() if callable(settings) else settings).items():
        if name.startswith("spark.sql.") and spark.conf.isModifiable(name):
            child.conf.set(name, value)
    for name, value in EPOCH_CONF.items():
        child.conf.set(name, value)
    partitions = max(2, 2 * int(context.defaultParallelism))
    child.conf.set("spark.sql.shuffle.partitions", str(partitions))
    _EPOCH_SESSIONS[key] = child
    return child


def launched_by_spark_submit() -> bool:
    """True in a Python driver that spark-submit started (its JVM is already running)."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def submit_conf() -> dict[str, str]:
    """``--conf`` settings for spark-submit that must be known when the driver JVM starts
    (Delta's too when its jar is among :func:`s3a_jars`, which the operator passes as
    ``--jars``)."""
    return {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j2_config().as_uri()}",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        **CACHE_CONF,
        **delta_conf(),
    }


def package_zip() -> Path:
    """The ``sluice`` package as a zip for executors (``SparkContext.addPyFile``), built once
    per content in the temp dir, so remote executors import the same code as the driver."""
    root = Path(__file__).resolve().parent
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    target = Path(tempfile.gettempdir()) / f"sluice-{digest.hexdigest()[:12]}.zip"
    if not target.is_file():
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in files:
                zf.write(path, f"sluice/{path.relative_to(root)}")
        os.replace(tmp, target)
    return target


def configure_s3(spark: SparkSession, s3: S3Options | None) -> None:
    """Apply the s3a settings for ``s3`` (``None``: from the env) to a running session.

    For a session created before the S3 endpoint was known: sets the same keys as
    :func:`spark_session` on the SparkContext's Hadoop configuration, and mirrors the AWS
    credential env vars of this Python process into the JVM's system properties (the JVM
    only saw the env vars that existed when it started; the SDK's credential chain reads
    these properties first). When the endpoint, region or TLS setting changes, Hadoop's
    cached filesystem instances are closed so the next access uses the new endpoint.
    """
    jvm: Any = spark.sparkContext._jvm
    hadoop_conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
    wanted = s3a_conf(s3)

    before = {key: hadoop_conf.get(key) for key in _CONNECTION_KEYS}
    for key, value in wanted.items():
        hadoop_conf.set(key, value)
    for key in _CONNECTION_KEYS:
        if key not in wanted:
            hadoop_conf.unset(key)
    after = {key: hadoop_conf.get(key) for key in _CONNECTION_KEYS}

    system = jvm.java.lang.System
    for env_name, prop in _CREDENTIAL_PROPERTIES.items():
        env_value = os.environ.get(env_name)
        if env_value:
            system.setProperty(prop, env_value)
            _mirrored_properties.add(prop)
        elif prop in _mirrored_properties:  # ours and gone from the env: drop it too
            system.clearProperty(prop)
            _mirrored_properties.discard(prop)

    if before != after:
        # S3A filesystems are cached per bucket with the settings they were created with.
        jvm.org.apache.hadoop.fs.FileSystem.closeAll()
