"""DagBag integrity: every shipped pipeline parses into a DAG built the way docs/airflow.md says."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from sluice.airflow import dag_id, pool_name
from sluice.airflow.factory import broken_specs
from sluice.airflow.triggers import LOOK_S
from sluice.spec import load_spec

from tests.fixtures.airflow import REPO

SPECS = sorted((REPO / "include" / "pipelines").glob("*.yaml"))


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(REPO / "dags"))


def test_no_import_errors(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}


def test_one_dag_per_spec(dagbag: DagBag) -> None:
    assert SPECS, "no pipeline specs shipped"
    assert sorted(dagbag.dag_ids) == sorted(dag_id(load_spec(p).name) for p in SPECS)


@pytest.mark.parametrize("spec_path", SPECS, ids=lambda p: Path(p).stem)
def test_dag_shape(dagbag: DagBag, spec_path: Path) -> None:
    spec = load_spec(spec_path)
    dag = dagbag.dags[dag_id(spec.name)]
    assert dag.tags and "sluice" in dag.tags
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    # data-aware: a run when the input watcher finds work, by time once a day (or interval)
    interval = timedelta(microseconds=spec.checkpoint.interval_us)
    assert dag.timetable.timetable.delta == max(timedelta(days=1), interval)
    condition = dag.timetable.asset_condition
    if spec.join is None:
        assert [a.name for a in condition.objects] == [f"sluice__{spec.name}__input"]
    else:  # an asset per source, any of them makes a run
        assert type(condition).__name__ == "AssetAny"
        names = [s.name for s in spec.join.sides]
        assert [a.name for a in condition.objects] == [
            f"sluice__{spec.name}__input__{n}" for n in names
        ]
        assert [a.watchers[0].trigger.source for a in condition.objects] == names
    for watched in condition.objects:
        [watcher] = watched.watchers
        assert type(watcher.trigger).__name__ == "NewInputTrigger"
        assert watcher.trigger.poll_seconds == interval.total_seconds()  # the upper bound
        # it looks every few seconds, never less often than the interval
        assert watcher.trigger.look_seconds == min(LOOK_S, interval.total_seconds())
        assert watcher.trigger.spec_path == str(spec_path.resolve())
        assert watcher.trigger.dag_id == dag.dag_id
    assert dag.dagrun_timeout == timedelta(microseconds=spec.checkpoint.timeout_us)
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "process", "commit"]
    for task in dag.tasks:
        assert task.pool == pool_name(spec.name), task.task_id
        assert task.retries == spec.restart.attempts, task.task_id
        assert task.retry_delay == timedelta(microseconds=spec.restart.delay_us)
        assert task.max_retry_delay == timedelta(microseconds=spec.restart.max_delay_us)
        assert task.retry_exponential_backoff == spec.restart.multiplier
        assert task.execution_timeout == timedelta(microseconds=spec.checkpoint.timeout_us)
    process = dag.get_task("process")
    assert type(process).__name__ == "SluiceProcessOperator"
    assert process.application == str(REPO / "jobs" / "run_epoch.py")
    commit = dag.get_task("commit")
    sinks = {s.name for s in (*spec.sinks, spec.late_records, spec.dead_letters)}
    assert {a.name for a in commit.outlets} == {f"sluice__{spec.name}__{s}" for s in sinks}
    assert set(dag.params.keys()) == {
        "max_records",
        "restore_from",
        "epoch",
        "offsets",
        "savepoint",
        "take_savepoint",
        "allow_state_drop",
        "expect_latest",
        "on_missing_offsets",
        "lookup_versions",
    }
    assert dag.params["restore_from"] == "latest"  # defaults let the DAG be scheduled


def test_a_bad_spec_next_to_good_ones_hides_nothing_but_itself(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLUICE_EXECUTION", raising=False)
    _specs_with_execution(pipelines_dir)  # plain, warm, cold: three good pipelines
    demo = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text()
    bad = demo.replace("name: clicks_per_minute", "name: typo").replace("}/demo}", "}/typo}")
    (pipelines_dir / "typo.yaml").write_text(bad.replace("window:", "windw:"))
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["sluice__cold", "sluice__plain", "sluice__typo", "sluice__warm"]
    for name in ("cold", "plain", "warm"):  # the good pipelines keep their whole DAG
        tasks = [t.task_id for t in bag.dags[f"sluice__{name}"].topological_sort()]
        assert tasks == ["plan", "process", "commit"], name
    placeholder = bag.dags["sluice__typo"]  # the bad one is visible, saying what to fix
    assert [t.task_id for t in placeholder.tasks] == ["spec_error"]
    assert placeholder.timetable.can_be_scheduled is False and "spec-error" in placeholder.tags
    for text in (placeholder.doc_md, placeholder.description):
        assert "typo.yaml" in text and "windw: unknown field" in text, text
    assert "Fix: did you mean 'window'?" in placeholder.doc_md
    assert placeholder.dag_display_name == (
        "sluice__typo (spec error: windw: unknown field. Fix: did you mean 'window'?)"
    )
    [(path, message)] = broken_specs(pipelines_dir)
    assert path == str(pipelines_dir / "typo.yaml") and "Fix: did you mean 'window'?" in message


def test_unreadable_and_clashing_specs_take_out_only_themselves(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLUICE_EXECUTION", raising=False)
    _specs_with_execution(pipelines_dir)
    demo = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text()
    # "twin" writes where "plain" does; "garbled" is not YAML; "again" reuses a name
    (pipelines_dir / "twin.yaml").write_text(demo.replace("name: clicks_per_minute", "name: twin")
                                             .replace("}/demo}", "}/plain}"))  # fmt: skip
    (pipelines_dir / "garbled.yaml").write_text("name: [unclosed\n")
    (pipelines_dir / "zz_again.yaml").write_text((pipelines_dir / "cold.yaml").read_text()
                                                 .replace("}/cold}", "}/again}"))  # fmt: skip
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    working = {d for d, dag in bag.dags.items() if "spec-error" not in dag.tags}
    assert working == {"sluice__cold", "sluice__warm"}
    assert "plan" in [t.task_id for t in bag.dags["sluice__cold"].tasks]
    broken = dict(broken_specs(pipelines_dir))
    assert sorted(Path(p).name for p in broken) == [
        "garbled.yaml", "plain.yaml", "twin.yaml", "zz_again.yaml"]  # fmt: skip
    for name in ("plain", "twin"):  # both sides of the clash, each naming the other
        message = broken[str(pipelines_dir / f"{name}.yaml")]
        assert "share locations" in message and "twin.yaml" in message and "plain.yaml" in message
    assert "not valid YAML" in broken[str(pipelines_dir / "garbled.yaml")]
    assert "already used by" in broken[str(pipelines_dir / "zz_again.yaml")]
    # each broken spec has its placeholder: under its declared name when that is free
    placeholders = {d for d, dag in bag.dags.items() if "spec-error" in dag.tags}
    assert placeholders == {"sluice__plain", "sluice__twin", "sluice__garbled",
                            "sluice__cold__spec_error"}  # fmt: skip


def _specs_with_execution(folder: Path) -> None:
    """Three copies of the demo spec, each in its own folder (the factory refuses pipelines
    that share one): no ``execution`` field, ``warm`` and ``cold``."""
    text = (REPO / "include/pipelines/clicks_per_minute.yaml").read_text()
    for name, line in (("plain", ""), ("warm", "execution: warm\n"), ("cold", "execution: cold\n")):
        body = text.replace("name: clicks_per_minute", f"name: {name}") + line
        body = body.replace("}/demo}", f"}}/{name}}}")
        (folder / f"{name}.yaml").write_text(body)


def _process_tasks(bag: DagBag) -> dict[str, Any]:
    return {d.removeprefix("sluice__"): dag.get_task("process") for d, dag in bag.dags.items()}


def test_execution_mode_comes_from_the_spec_then_the_environment(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _specs_with_execution(pipelines_dir)
    monkeypatch.delenv("SLUICE_EXECUTION", raising=False)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    kinds = {k: type(t).__name__ for k, t in _process_tasks(bag).items()}
    assert kinds == {"plain": "SluiceProcessOperator", "warm": "SluiceServedProcessOperator",
                     "cold": "SluiceProcessOperator"}  # fmt: skip
    warm = bag.dags["sluice__warm"]
    served = warm.get_task("process")
    assert served.serve_conn_id == "sluice_serve"
    assert served.spec_path == str(pipelines_dir / "warm.yaml")
    assert "xcom_pull(task_ids='plan')['epoch']" in served.epoch and served.run_id == "{{ run_id }}"
    assert "execution:warm" in warm.tags and "execution:warm" not in bag.dags["sluice__plain"].tags
    assert served.pool == pool_name("warm") and served.retries == 3

    monkeypatch.setenv("SLUICE_EXECUTION", "warm")
    monkeypatch.setenv("SLUICE_SERVE_CONN_ID", "other_serve")
    tasks = _process_tasks(DagBag(dag_folder=str(REPO / "dags")))
    kinds = {k: type(t).__name__ for k, t in tasks.items()}
    assert kinds == {"plain": "SluiceServedProcessOperator", "warm": "SluiceServedProcessOperator",
                     "cold": "SluiceProcessOperator"}  # fmt: skip
    assert tasks["plain"].serve_conn_id == "other_serve"


def test_an_unknown_execution_mode_is_an_import_error(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _specs_with_execution(pipelines_dir)
    monkeypatch.setenv("SLUICE_EXECUTION", "lukewarm")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    [(_, message)] = bag.import_errors.items()
    assert "SLUICE_EXECUTION='lukewarm'" in message and "'cold', 'warm'" in message


def test_the_input_watchers_look_as_often_as_the_deployment_says(
    pipelines_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _specs_with_execution(pipelines_dir)
    monkeypatch.setenv("SLUICE_INPUT_LOOK_SECONDS", "7.5")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    for dag in bag.dags.values():
        [watched] = dag.timetable.asset_condition.objects
        assert watched.watchers[0].trigger.look_seconds == 7.5
    monkeypatch.setenv("SLUICE_INPUT_LOOK_SECONDS", "soon")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    [(_, message)] = bag.import_errors.items()
    assert "SLUICE_INPUT_LOOK_SECONDS='soon'" in message
