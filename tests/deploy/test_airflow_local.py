"""`make airflow` (scripts/airflow-local.sh) listens on loopback only.

The script runs for real, as a user runs it (warm: `sluice serve` next to Airflow), with its
own AIRFLOW_LOCAL_HOME, data root and free ports. From "up" until the demo DAG's first epoch
has committed, every listening socket of every process tree it started (API server, DAG
processor, triggerer, scheduler with its LocalExecutor workers and task supervisors, `sluice
serve` with its Spark JVM and Python workers) is collected; each must be on 127.0.0.1 or ::1.
Airflow's log servers used to listen on 0.0.0.0 and [::] (the scheduler's and the triggerer's).
Then `make airflow-stop` must leave no process of those trees behind.

make test-extended (and .ci/run): 108-124 s on this project's 2-core machine under load (a
whole Airflow, the server's JVM and one epoch).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.fixtures.airflow import REPO, free_port

SCRIPT = REPO / "scripts" / "airflow-local.sh"
SERVICES = ("api-server", "dag-processor", "triggerer", "scheduler", "serve")
START_TIMEOUT_S = 420
EPOCH_TIMEOUT_S = 300
POLL_S = 0.5

pytestmark = pytest.mark.extended


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (a JVM's IPv4 socket)
    return (mapped or address).is_loopback


def trees(home: Path, seen: dict[int, tuple[str, psutil.Process]]) -> None:
    """Add every live process of the services' trees to ``seen`` (pid -> service, process)."""
    for name in SERVICES:
        pidfile = home / f"{name}.pid"
        if not pidfile.exists():
            continue
        try:
            root = psutil.Process(int(pidfile.read_text()))
            for proc in (root, *root.children(recursive=True)):
                seen.setdefault(proc.pid, (name, proc))
        except psutil.Error:
            continue


def listeners(seen: dict[int, tuple[str, psutil.Process]]) -> set[tuple[str, str, str, int]]:
    """(service, process name, host, port) of each listening TCP socket and bound, unconnected
    UDP socket of the processes in ``seen`` that are still alive."""
    found = set()
    for name, proc in seen.values():
        try:
            sockets = proc.net_connections(kind="inet")
            command = proc.name()
        except psutil.Error:
            continue
        for s in sockets:
            listening = s.status == psutil.CONN_LISTEN or (
                s.type == socket.SOCK_DGRAM and s.laddr and not s.raddr
            )
            if listening and s.laddr:
                found.add((name, command, s.laddr.ip, s.laddr.port))
    return found


def committed(data: Path, epoch: int = 1) -> bool:
    epochs = data / "demo" / "checkpoints" / "clicks_per_minute" / "epochs"
    return (epochs / f"{epoch:012d}" / "checkpoint.json").exists()


def test_every_listener_is_on_loopback(tmp_path: Path) -> None:
    home, data = tmp_path / "airflow", tmp_path / "data"
    port, serve_port = free_port(), free_port()
    # A user's shell: none of the test session's Airflow or Sluice settings.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLUICE_"))}
    env.update(AIRFLOW_LOCAL_HOME=str(home), SLUICE_DATA_ROOT=str(data),
               AIRFLOW_PORT=str(port), SLUICE_SERVE_PORT=str(serve_port))  # fmt: skip
    seen: dict[int, tuple[str, psutil.Process]] = {}
    found: set[tuple[str, str, str, int]] = set()
    try:
        start = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True,
                               timeout=START_TIMEOUT_S, check=False)  # fmt: skip
        assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-3000:]
        assert "up in" in start.stdout
        deadline = time.monotonic() + EPOCH_TIMEOUT_S
        while not committed(data) and time.monotonic() < deadline:
            trees(home, seen)
            found |= listeners(seen)
            time.sleep(POLL_S)
        assert committed(data), f"no epoch within {EPOCH_TIMEOUT_S} s; logs: {home / 'logs'}"
        trees(home, seen)
        found |= listeners(seen)
    finally:
        stop = subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, text=True,
                              timeout=600, check=False)  # fmt: skip
    assert stop.returncode == 0, stop.stdout + stop.stderr
    exposed = sorted(f for f in found if not is_loopback(f[2]))
    assert not exposed, f"listening beyond loopback: {exposed}"
    ports = {p for *_, p in found}
    assert {port, serve_port} <= ports, found  # the sockets were seen at all
    assert {"api-server", "serve"} <= {s for s, *_ in found}, found
    assert {s for s, *_ in seen.values()} >= set(SERVICES), "a service was not seen running"
    alive = [p for _, p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"still running after make airflow-stop: {alive}"
