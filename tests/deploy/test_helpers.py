"""The helper scripts of the local deployment, run against stubs (no Airflow DB, no S3, no apt)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sluice.demo import render_click_files, render_reading_files

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "docker" / "airflow-init.sh"
INSTALL = ROOT / "scripts" / "install-compose-check.sh"
BASH = shutil.which("bash") or "/bin/bash"


def stub(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- docker/airflow-init.sh -----------------------------------------------------------------


def run_init(tmp_path: Path, password: str) -> tuple[list[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls.txt"
    stub(
        bin_dir,
        "airflow",
        'echo "airflow $*" >> "$CALLS"\n[ "$1" = version ] && echo 3.3.2\nexit 0\n',
    )
    stub(
        bin_dir,
        "python",
        'if [ "$1" = -m ] && [ "$2" = sluice.airflow.provision ]; then\n'
        '  echo "provision $*" >> "$CALLS"; exit 0\n'
        "fi\n"
        f'exec "{sys.executable}" "$@"\n',
    )
    passwords = tmp_path / "auth" / "passwords.json"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CALLS": str(calls),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW_ADMIN_PASSWORD": password,
        "SLUICE_PIPELINES_DIR": "/opt/sluice/include/pipelines",
        "SLUICE_SPARK_MASTER_URL": "spark://spark-master:7077",
    }
    proc = subprocess.run(
        [BASH, str(INIT)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return calls.read_text(encoding="utf-8").splitlines(), passwords


def test_airflow_init_migrates_sets_the_password_then_provisions(tmp_path: Path) -> None:
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "passwords.json").write_text('{"viewer": "v"}\n', encoding="utf-8")
    calls, passwords = run_init(tmp_path, "s3cret")
    assert calls == [
        "airflow version",
        "airflow db migrate",
        "provision -m sluice.airflow.provision --pipelines /opt/sluice/include/pipelines "
        "--spark-master spark://spark-master:7077",
    ]
    # other users' passwords are kept
    assert json.loads(passwords.read_text(encoding="utf-8")) == {"viewer": "v", "admin": "s3cret"}


def test_airflow_init_is_idempotent(tmp_path: Path) -> None:
    run_init(tmp_path, "first")
    calls, passwords = run_init(tmp_path, "second")
    assert json.loads(passwords.read_text(encoding="utf-8")) == {"admin": "second"}
    assert calls.count("airflow db migrate") == 2


# --- docker/seed_demo.py --------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("seed_demo", ROOT / "docker" / "seed_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}

    def get_paginator(self, name: str) -> FakeS3:
        assert name == "list_objects_v2"
        return self

    def paginate(self, Bucket: str, Prefix: str) -> Iterator[dict[str, Any]]:
        keys = sorted(k for b, k in self.objects if b == Bucket and k.startswith(Prefix))
        yield {"Contents": [{"Key": k} for k in keys[:7]]} if keys else {}
        if keys[7:]:
            yield {"Contents": [{"Key": k} for k in keys[7:]]}

    def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:
        self.objects[(Bucket, Key)] = Body


def test_seed_demo_uploads_new_files_only(seed_demo: ModuleType) -> None:
    files = render_click_files()
    s3 = FakeS3()
    first = seed_demo.seed(s3, "s3://sluice/demo/in", files=3)
    assert first == [f"demo/in/{name}" for name, _ in files[:3]]
    rest = seed_demo.seed(s3, "s3://sluice/demo/in")
    assert rest == [f"demo/in/{name}" for name, _ in files[3:]]
    assert seed_demo.seed(s3, "s3://sluice/demo/in") == []
    assert s3.objects == {("sluice", f"demo/in/{name}"): body for name, body in files}


def test_seed_demo_main_reads_the_specs(
    seed_demo: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """By default every shipped spec that reads files gets its input, each in its own folder
    under the compose root (count_window_average had none and failed on the clicks; the
    example into Iceberg reads the demo's clicks)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SLUICE_DATA", raising=False)
    monkeypatch.setenv("SLUICE_DATA_ROOT", "s3://sluice")
    s3 = FakeS3()
    assert seed_demo.main(["--files", "2"], client=s3) == 0
    assert sorted(k for _, k in s3.objects) == [
        *(f"clicks_to_iceberg/in/{n}" for n, _ in render_click_files()[:2]),
        *(f"clicks_to_kafka/in/{n}" for n, _ in render_click_files()[:2]),
        *(f"count_window_average/in/{n}" for n, _ in render_reading_files()[:2]),
        *(f"demo/in/{n}" for n, _ in render_click_files()[:2]),
    ]
    out = capsys.readouterr().out
    assert "2 new file(s) under s3://sluice/demo/in" in out
    assert "2 new file(s) under s3://sluice/count_window_average/in" in out

    monkeypatch.setenv("SLUICE_DATA", "data/demo")
    assert seed_demo.main(["--spec", "include/pipelines/clicks_per_minute.yaml"],
                          client=FakeS3()) == 2  # fmt: skip
    assert "not an s3:// URI" in capsys.readouterr().err


# --- scripts/install-compose-check.sh -------------------------------------------------------


def install_env(tmp_path: Path) -> dict[str, str]:
    """A PATH of stubs only (so a docker-compose installed on this machine is not seen)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id",):
        real = shutil.which(tool)
        assert real, tool
        os.symlink(real, bin_dir / tool)
    return {"PATH": str(bin_dir), "CALLS": str(tmp_path / "calls.txt")}


def test_install_compose_check_keeps_an_existing_docker_compose(tmp_path: Path) -> None:
    env = install_env(tmp_path)
    bin_dir = Path(env["PATH"])
    stub(bin_dir, "docker-compose", 'echo "docker-compose version 9.9.9, build stub"\n')
    stub(bin_dir, "apt-get", 'echo "apt-get $*" >> "$CALLS"; exit 1\n')
    proc = subprocess.run(
        [BASH, str(INSTALL)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "docker-compose version 9.9.9, build stub"
    assert not (tmp_path / "calls.txt").exists(), "apt-get must not run"


def test_install_compose_check_installs_when_missing(tmp_path: Path) -> None:
    env = install_env(tmp_path)
    bin_dir = Path(env["PATH"])
    # apt-get "installs" docker-compose by copying a stub next to itself
    package = tmp_path / "package"
    package.mkdir()
    stub(package, "docker-compose", 'echo "docker-compose version 1.29.2"\n')
    stub(
        bin_dir,
        "apt-get",
        'echo "apt-get $*" >> "$CALLS"\n'
        'case "$*" in *install*docker-compose*)\n'
        f'  {shutil.which("cp")} -p "{package}/docker-compose" "{bin_dir}/";;\n'
        "esac\n",
    )
    stub(bin_dir, "sudo", 'echo "sudo" >> "$CALLS"; exec "$@"\n')
    proc = subprocess.run(
        [BASH, str(INSTALL)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "docker-compose version 1.29.2"
    calls = (tmp_path / "calls.txt").read_text(encoding="utf-8").splitlines()
    apt = [c for c in calls if c.startswith("apt-get")]
    assert apt[0] == "apt-get update -qq"
    assert "--no-install-recommends docker-compose" in apt[1]
    assert ("sudo" in calls) == (os.getuid() != 0), "sudo only when not root"


# --- scripts/install-docker-engine.sh (make compose-test) ------------------------------------

ENGINE = ROOT / "scripts" / "install-docker-engine.sh"


def test_install_docker_engine_keeps_what_is_there(tmp_path: Path) -> None:
    env = install_env(tmp_path)
    bin_dir = Path(env["PATH"])
    stub(bin_dir, "dockerd", 'echo "Docker version 20.10.24+dfsg1"\n')
    stub(bin_dir, "docker-compose", 'echo "docker-compose version 1.29.2"\n')
    stub(bin_dir, "debootstrap", 'echo "debootstrap 1.0.128"\n')
    stub(bin_dir, "apt-get", 'echo "apt-get $*" >> "$CALLS"; exit 1\n')
    proc = subprocess.run(
        [BASH, str(ENGINE)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "Docker version 20.10.24" in proc.stdout and "docker-compose version 1.29.2" in proc.stdout
    )
    assert not (tmp_path / "calls.txt").exists(), "apt-get must not run"


def test_install_docker_engine_installs_only_what_is_missing(tmp_path: Path) -> None:
    env = install_env(tmp_path)
    bin_dir = Path(env["PATH"])
    stub(bin_dir, "docker-compose", 'echo "docker-compose version 1.29.2"\n')
    package = tmp_path / "package"
    package.mkdir()
    stub(package, "dockerd", 'echo "Docker version 20.10.24+dfsg1"\n')
    stub(package, "debootstrap", 'echo "debootstrap 1.0.128"\n')
    cp = shutil.which("cp")
    stub(
        bin_dir,
        "apt-get",
        'echo "apt-get $*" >> "$CALLS"\n'
        f'case "$*" in *install*) {cp} -p "{package}/dockerd" "{package}/debootstrap" '
        f'"{bin_dir}/";; esac\n',
    )
    stub(bin_dir, "sudo", 'exec "$@"\n')
    for tool in ("chmod", "rm", "sed", "tr"):
        os.symlink(shutil.which(tool) or tool, bin_dir / tool)
    proc = subprocess.run(
        [BASH, str(ENGINE)], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls.txt").read_text(encoding="utf-8").splitlines()
    assert calls[0] == "apt-get update -qq"
    installed = calls[1].split("--no-install-recommends")[1].split()
    # debootstrap may also be found at /usr/sbin on this machine; docker-compose is on PATH
    assert installed in (["docker.io", "debootstrap"], ["docker.io"]), calls[1]


# --- python -m sluice.airflow.provision --seed-inputs (make airflow) -----------------------


def test_make_airflow_gives_every_shipped_file_spec_its_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.airflow.provision import seed_inputs

    monkeypatch.delenv("SLUICE_DATA", raising=False)
    monkeypatch.setenv("SLUICE_DATA_ROOT", str(tmp_path))
    (tmp_path / "count_window_average" / "in").mkdir(parents=True)
    lines = seed_inputs(ROOT / "include" / "pipelines")
    assert len(lines) == 4 and "count_window_average: wrote 4 files" in lines[3], lines
    assert lines[1].startswith("clicks_to_iceberg: wrote 20 files"), lines
    assert lines[2].startswith("clicks_to_kafka: wrote 20 files"), lines
    written = {p.relative_to(tmp_path).as_posix(): p.read_bytes()
               for p in tmp_path.rglob("*") if p.is_file()}  # fmt: skip
    assert written == {
        **{f"demo/in/{n}": body for n, body in render_click_files()},
        **{f"clicks_to_iceberg/in/{n}": body for n, body in render_click_files()},
        **{f"clicks_to_kafka/in/{n}": body for n, body in render_click_files()},
        **{f"count_window_average/in/{n}": body for n, body in render_reading_files()},
    }, "no input for the Nexmark specs (they generate theirs), none elsewhere"
    (tmp_path / "demo" / "in" / "clicks-00000.jsonl").unlink()  # a user's folder: kept as is
    assert seed_inputs(ROOT / "include" / "pipelines") == [
        f"clicks_per_minute: kept the 19 files in {(tmp_path / 'demo' / 'in').as_uri()}",
        "clicks_to_iceberg: kept the 20 files in "
        f"{(tmp_path / 'clicks_to_iceberg' / 'in').as_uri()}",
        f"clicks_to_kafka: kept the 20 files in {(tmp_path / 'clicks_to_kafka' / 'in').as_uri()}",
        "count_window_average: kept the 4 files in "
        f"{(tmp_path / 'count_window_average' / 'in').as_uri()}",
    ]
