"""Every shipped spec as each local deployment builds it: docker-compose, ``make airflow``, Astro.

The DAG file builds every spec of ``include/pipelines/`` in ONE environment, the deployment's.
A variable shared by all of them once put two pipelines in one place (issue #24: compose set
``SLUICE_DATA=s3://sluice/demo`` for every DAG, so ``clicks_per_minute`` and
``count_window_average`` wrote the same ``out``/``dead`` assets, Airflow deactivated one DAG's
and its ``commit`` failed; both also read the same ``in``). Here each deployment's environment
(read from its own files) builds the DagBag: no import error, one DAG per spec, and every
pipeline's input, outputs (the commit task's asset URIs) and checkpoints apart from every other
pipeline's, checked from the built DAGs themselves (not with the factory's own check). The
factory's refusal of a clash (both specs become placeholder DAGs) is tested with two specs
that share a folder.
"""

from __future__ import annotations

import os
import re
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.dag_processing.dagbag import DagBag
from sluice.airflow import dag_id
from sluice.airflow.factory import broken_specs
from sluice.spec import load_spec
from sluice.storage import normalized_uri

from tests.fixtures.airflow import REPO

SPECS = sorted((REPO / "include" / "pipelines").glob("*.yaml"))
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def _compose_default(value: str) -> str:
    """docker-compose's ``${VAR:-default}`` with the file's defaults (not this shell's env)."""
    return _VAR.sub(lambda m: m.group(2) or "", value.replace("$$", "\0")).replace("\0", "$")


def compose_env() -> dict[str, str]:
    """The Sluice settings every Airflow container of docker-compose.yaml gets (the DAG
    processor's, the scheduler's: both build the DAGs), with the file's defaults."""
    data = yaml.safe_load((REPO / "docker-compose.yaml").read_text(encoding="utf-8"))
    envs = [data["services"][name]["environment"]
            for name in ("airflow-dag-processor", "airflow-scheduler", "sluice-serve")]  # fmt: skip
    assert envs[0] == envs[1], "the DAG processor and the scheduler see the same settings"
    env = {k: _compose_default(str(v)) for k, v in envs[0].items() if k.startswith("SLUICE_")}
    serve = {k: _compose_default(str(v)) for k, v in envs[2].items() if k.startswith("SLUICE_")}
    for key in ("SLUICE_DATA", "SLUICE_DATA_ROOT"):  # sluice serve loads the same specs
        assert serve.get(key) == env.get(key), f"sluice-serve's {key} differs from Airflow's"
    # the container's path of include/pipelines is this checkout's
    assert env.pop("SLUICE_PIPELINES_DIR") == "/opt/sluice/include/pipelines"
    return env


def make_airflow_env() -> dict[str, str]:
    """What scripts/airflow-local.sh exports for the DAGs (its defaults)."""
    script = (REPO / "scripts" / "airflow-local.sh").read_text(encoding="utf-8")
    match = re.search(r"^export SLUICE_DATA_ROOT=\$\{SLUICE_DATA_ROOT:-\$ROOT/([^}]+)\}$",
                      script, re.MULTILINE)  # fmt: skip
    assert match, "scripts/airflow-local.sh exports SLUICE_DATA_ROOT with a default"
    assert "export SLUICE_DATA=" not in script, "one SLUICE_DATA for every pipeline"
    env = {"SLUICE_DATA_ROOT": str(REPO / match.group(1))}
    for name in ("SLUICE_EXECUTION", "SLUICE_UNPAUSED"):
        found = re.search(rf"^export {name}=\$\{{{name}:?-([^}}]*)\}}$", script, re.MULTILINE)
        assert found, f"scripts/airflow-local.sh exports {name} with a default"
        env[name] = found.group(1)
    return env


def astro_env() -> dict[str, str]:
    """The Astro image's ENV settings of Sluice (Dockerfile); the specs' defaults otherwise."""
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    env = {}
    for name, value in re.findall(r"^ENV\s+(SLUICE_[A-Z_]+)=(\S+)", dockerfile, re.MULTILINE):
        env[name] = value
    return env


DEPLOYMENTS = {"docker-compose": compose_env, "make-airflow": make_airflow_env,
               "astro": astro_env}  # fmt: skip


def _isolate(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key in list(os.environ):
        if key.startswith("SLUICE_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _places(bag: DagBag) -> list[tuple[str, str, str]]:
    """(pipeline, what, uri) of every DAG: its spec's input and checkpoints, and the asset
    URIs of its commit task (every sink, late records, dead letters)."""
    found = []
    for dag in bag.dags.values():
        spec = load_spec(dag.get_task("process").spec_path)
        if spec.source.type == "files":
            found.append((spec.name, "input", normalized_uri(spec.source.path)))
        found.append((spec.name, "checkpoints",
                      f"{normalized_uri(spec.checkpoint.storage)}/{spec.name}"))  # fmt: skip
        for asset in dag.get_task("commit").outlets:
            uri = asset.uri.rstrip("/")
            found.append((spec.name, f"asset {asset.name}", uri))
    return found


@pytest.mark.parametrize("deployment", list(DEPLOYMENTS))
def test_every_shipped_dag_builds_apart(deployment: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env: dict[str, Any] = DEPLOYMENTS[deployment]()
    _isolate(monkeypatch, env)
    monkeypatch.chdir(REPO)  # compose and Astro start Airflow in the project folder
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}, f"{deployment} ({env}): {bag.import_errors}"
    assert sorted(bag.dag_ids) == sorted(dag_id(load_spec(p).name) for p in SPECS)
    places = _places(bag)
    clashes = [
        f"{a[0]} {a[1]} {a[2]} / {b[0]} {b[1]} {b[2]}"
        for a, b in combinations(places, 2)
        if a[0] != b[0] and _overlap(a[2], b[2])
        and {a[1].split()[0], b[1].split()[0]} != {"asset", "input"}  # chaining is allowed
    ]  # fmt: skip
    assert not clashes, f"{deployment}: pipelines share locations:\n" + "\n".join(clashes)


@pytest.mark.parametrize("deployment", ["docker-compose", "make-airflow"])
def test_only_the_demo_starts_unpaused_and_every_dag_is_warm(
    deployment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First run (issue #26): the demo DAG starts unpaused and every other shipped DAG paused
    (all six unpaused at once overloaded 2 cores), as Airflow records it from the serialized
    DAG; and ``process`` runs on ``sluice serve`` (warm by default)."""
    from airflow.serialization.serialized_objects import LazyDeserializedDAG

    _isolate(monkeypatch, DEPLOYMENTS[deployment]())
    monkeypatch.chdir(REPO)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    paused = {i: LazyDeserializedDAG.from_dag(d).is_paused_upon_creation
              for i, d in bag.dags.items()}  # fmt: skip
    assert paused == {i: i != "sluice__clicks_per_minute" for i in bag.dag_ids}
    warm = {i for i, d in bag.dags.items() if "execution:warm" in d.tags}
    assert warm == set(bag.dag_ids)


def test_compose_gives_every_pipeline_a_folder_under_one_root() -> None:
    env = compose_env()
    assert "SLUICE_DATA" not in env, "one pipeline's folder for every pipeline"
    assert env["SLUICE_DATA_ROOT"] == "s3://sluice"


def _two_specs(folder: Path, second_name: str) -> None:
    text = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text(encoding="utf-8")
    (folder / "first.yaml").write_text(text.replace("name: clicks_per_minute", "name: first"))
    (folder / "second.yaml").write_text(text.replace("name: clicks_per_minute",
                                                     f"name: {second_name}"))  # fmt: skip


def test_two_specs_in_one_folder_are_refused_naming_both_and_the_uri(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _isolate(monkeypatch, {"SLUICE_PIPELINES_DIR": str(pipelines_dir),
                           "SLUICE_DATA": "s3://sluice/shared"})  # fmt: skip
    _two_specs(pipelines_dir, "second")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    # both become placeholder DAGs (issue #26: a clash takes out only the clashing specs)
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["sluice__first", "sluice__second"]
    first, second = pipelines_dir / "first.yaml", pipelines_dir / "second.yaml"
    broken = dict(broken_specs(pipelines_dir))
    for dag in bag.dags.values():
        assert "spec-error" in dag.tags and [t.task_id for t in dag.tasks] == ["spec_error"]
        assert "both at s3://sluice/shared/out" in dag.doc_md
        message = broken[str(first if dag.dag_id == "sluice__first" else second)]
        assert f"{first} (first) sinks.out and {second} (second) sinks.out" in message
        assert "both at s3://sluice/shared/out" in message
        assert "both at s3://sluice/shared/in" in message  # the input too
        assert "set SLUICE_DATA_ROOT instead" in message


def test_specs_apart_under_one_root_build(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolate(monkeypatch, {"SLUICE_PIPELINES_DIR": str(pipelines_dir),
                           "SLUICE_DATA_ROOT": str(tmp_path)})  # fmt: skip
    text = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text(encoding="utf-8")
    (pipelines_dir / "a.yaml").write_text(text.replace("name: clicks_per_minute", "name: a"))
    (pipelines_dir / "b.yaml").write_text(
        text.replace("name: clicks_per_minute", "name: b").replace("}/demo}", "}/other}")
    )
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["sluice__a", "sluice__b"]
    assert load_spec(pipelines_dir / "b.yaml").source.path == f"{tmp_path}/other/in"
