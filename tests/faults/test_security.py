"""Security (issue #10, part 6): names cannot leave their storage prefix, paths are validated,
and credentials stay out of everything Sluice writes or prints.

* Path traversal: pipeline names, savepoint names (CLI, and the trigger conf the monitor's
  buttons send), restore-from names and object-store keys are refused with a clear error, and
  nothing is written outside ``<storage>/<pipeline>/``; PostgreSQL table names are plain
  identifiers (no SQL through a sink's ``table``).
* Paths: the loader refuses outputs that overlap the source, the checkpoint storage or each
  other, and URIs Sluice cannot open (README "Pipeline spec", docs/storage.md).
* Planted secrets: a real ``sluice run`` (subprocess) with checkpoints and data on the real S3
  server and a PostgreSQL sink whose connection carries a planted password; neither secret
  may appear in any stored object, sink file, or the run's stdout / stderr (Spark's log
  included). A failing run (a role that does not exist) must not show the password either.

The Airflow side (XCom values, task logs) is not covered here: no existing Airflow test runs a
DAG with a password-carrying connection, and a new real-Airflow run would take minutes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.cli import main as cli_main
from sluice.pipeline import open_runtime
from sluice.protocol import InvalidRunRequest, RunRequest
from sluice.protocol.retention import SavepointError, delete_savepoint, take_savepoint
from sluice.spec import SpecError, parse_spec
from sluice.storage import InvalidKey, LocalObjectStore, open_store

from tests.fixtures.pipelines import Workspace, click_spec_dict, runtime

ROOT = Path(__file__).resolve().parents[2]
SLUICE = ROOT / ".venv" / "bin" / "sluice"


def _problems(data: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    found: dict[str, str] = {}
    for p in info.value.problems:
        found[p.field] = f"{found.get(p.field, '')} {p.problem} {p.fix}".strip()
    return found


def _files_under(path: Path) -> set[Path]:
    """What a write escaping ``path`` (this test's ``tmp_path``) could change: every file
    under ``path``, and the names beside it. Not the files inside its siblings: they are
    other tests' folders and this worker's services (SeaweedFS, Kafka, the Iceberg catalog,
    ``sluice serve``), which write logs and data at any time — a whole-tree comparison failed
    in CI when one did between the two scans. Every bad name here resolves under ``path``
    or beside it (a new name in its parent), never into a sibling folder."""
    return {p for p in path.rglob("*") if p.is_file()} | set(path.parent.iterdir())


# -- path traversal --------------------------------------------------------------------------

BAD_PIPELINE_NAMES = [
    "../x", "a/b", "/abs", "", ".", "..", "clicks\n", "x/../../y", "ｃlicks",  # fullwidth c
    "clicks\u2215x", "CLICKS", "a b", "a\\b", "a\x00b", 7, None,
]  # fmt: skip


@pytest.mark.parametrize("name", BAD_PIPELINE_NAMES)
def test_a_pipeline_name_that_could_leave_its_prefix_is_refused(
    local_workspace: Workspace, name: Any
) -> None:
    problems = _problems(click_spec_dict(local_workspace, name=name))
    assert "name" in problems and "not a valid pipeline name" in problems["name"]


@pytest.mark.parametrize("name", ["../x", "a/b", "clicks\n", ""])
def test_a_spec_built_in_code_with_a_bad_name_opens_no_storage(
    local_workspace: Workspace, tmp_path: Path, name: str
) -> None:
    spec = dataclasses.replace(parse_spec(click_spec_dict(local_workspace)), name=name)
    before = _files_under(tmp_path)
    with pytest.raises(SpecError, match="not a valid pipeline name"):
        runtime(spec)
    assert _files_under(tmp_path) == before


EVIL_SAVEPOINTS = ["../../evil", "../evil", "a/b", "/etc/evil", ".hidden", "x\n", "a\\b", ""]


def _spec_file(ws: Workspace, tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(click_spec_dict(ws)))
    return path


@pytest.mark.parametrize("name", EVIL_SAVEPOINTS)
def test_the_cli_refuses_a_savepoint_name_that_could_escape(
    local_workspace: Workspace,
    tmp_path: Path,
    name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = _spec_file(local_workspace, tmp_path)
    before = _files_under(tmp_path)
    for extra in ([], ["--delete"]):
        assert cli_main(["savepoint", str(spec), name, *extra]) == 2
        err = capsys.readouterr().err
        assert "is not" in err or "a name is 1-100" in err, err
        assert "Traceback" not in err
    assert _files_under(tmp_path) == before


def test_sluice_savepoint_dotdot_as_a_subprocess(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    spec = _spec_file(local_workspace, tmp_path)
    command = [str(SLUICE)] if SLUICE.exists() else [sys.executable, "-m", "sluice.cli"]
    done = subprocess.run(
        [*command, "savepoint", str(spec), "../../evil"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "savepoint '../../evil'" in done.stderr and "a name is 1-100" in done.stderr
    assert not list(tmp_path.parent.rglob("evil*"))


@pytest.mark.parametrize("name", EVIL_SAVEPOINTS[:-1])
def test_the_engine_refuses_bad_savepoint_names_before_touching_storage(
    local_workspace: Workspace, name: str
) -> None:
    rt = runtime(parse_spec(click_spec_dict(local_workspace)))
    with pytest.raises(SavepointError, match="a name is 1-100"):
        take_savepoint(rt, name)
    with pytest.raises(SavepointError, match="a name is 1-100"):
        delete_savepoint(rt, name)


@pytest.mark.parametrize("name", EVIL_SAVEPOINTS[:-1])
@pytest.mark.parametrize("field", ["take_savepoint", "savepoint"])
def test_a_trigger_conf_from_the_monitor_with_a_bad_savepoint_name_is_refused(
    name: str, field: str
) -> None:
    """The monitor's savepoint and restore buttons trigger the DAG with exactly this conf
    (sluice.airflow.monitor.take_savepoint / restore); the plan task checks it first."""
    conf = {field: name}
    if field == "savepoint":
        conf["restore_from"] = "savepoint"
    with pytest.raises(InvalidRunRequest, match=f"{field}: .* is not a savepoint name"):
        RunRequest.from_conf("clicks", conf)


def test_sluice_run_restore_from_a_savepoint_path_is_refused(
    local_workspace: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec_file(local_workspace, tmp_path)
    before = _files_under(tmp_path)
    args = ["run", str(spec), "--restore-from", "savepoint", "--savepoint", "../../evil"]
    assert cli_main(args) == 2
    assert "savepoint: '../../evil' is not a savepoint name" in capsys.readouterr().err
    assert _files_under(tmp_path) == before


BAD_KEYS = ["../x", "a/../../x", "/etc/passwd", "a//b", "a\\..\\b", ".tmp-x", "a/\x00"]


@pytest.fixture(params=["local", "s3"])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "root")
    server = request.getfixturevalue("s3_server")
    bucket = server.bucket("sluice-tests")
    return open_store(f"s3://{bucket}/{uuid.uuid4().hex[:10]}/root")


@pytest.mark.parametrize("key", BAD_KEYS)
def test_object_keys_that_could_escape_are_refused_by_every_store(
    store_root: Any, key: str
) -> None:
    calls = [
        lambda: store_root.put(key, b"x"),
        lambda: store_root.put_if_absent(key, b"x"),
        lambda: store_root.get(key),
        lambda: store_root.exists(key),
        lambda: store_root.delete(key),
        lambda: store_root.move("ok", key),
        lambda: store_root.child(key),
        lambda: store_root.list(key + "/"),
    ]
    for call in calls:
        with pytest.raises(InvalidKey) as info:
            call()
        assert info.value.key.startswith(key) and repr(info.value.key) in str(info.value)
    parent = open_store(store_root.uri().rsplit("/", 1)[0])
    assert [i.key for i in parent.list()] == []  # nothing written anywhere near


@pytest.mark.parametrize(
    "table",
    ["clicks; DROP TABLE x", 'public."x"', "a.b.c", "x--", "x\n", "x y", "1abc", "", "é"],
)
def test_a_postgres_table_is_a_plain_identifier(local_workspace: Workspace, table: str) -> None:
    data = click_spec_dict(local_workspace)
    data["sinks"].append({"name": "pg", "type": "postgres", "table": table, "connection": "w"})
    problems = _problems(data)
    assert "sinks[1].table" in problems, problems


# -- sink and source paths -------------------------------------------------------------------


def _with_sink_path(ws: Workspace, path: str) -> dict[str, Any]:
    data = click_spec_dict(ws)
    data["sinks"].append({"name": "more", "type": "files", "path": path})
    return data


@pytest.mark.parametrize("sub", ["in", "in/out", "."])
def test_an_output_at_inside_or_around_the_source_is_refused(
    local_workspace: Workspace, sub: str
) -> None:
    path = local_workspace.uri(sub).rstrip("/.")
    problems = _problems(_with_sink_path(local_workspace, path))
    assert "source path" in problems["sinks.more.path"]


@pytest.mark.parametrize("sub", ["ckpt", "ckpt/clicks", "ckpt/clicks/epochs", "ckpt/other", "."])
def test_an_output_in_or_around_the_checkpoint_storage_is_refused(
    local_workspace: Workspace, sub: str
) -> None:
    path = local_workspace.uri(sub).rstrip("/.")
    problems = _problems(_with_sink_path(local_workspace, path))
    assert "overlaps checkpoint.storage" in problems["sinks.more.path"], problems


def test_side_sinks_may_use_their_default_place_in_the_checkpoint_storage(
    local_workspace: Workspace,
) -> None:
    data = click_spec_dict(local_workspace)
    data["dead_letters"]["path"] = local_workspace.uri("ckpt/clicks/dead_letters")
    del data["late_records"]
    spec = parse_spec(data)
    assert spec.late_records.path == f"{local_workspace.uri('ckpt')}/clicks/late_records"
    data["dead_letters"]["path"] = local_workspace.uri("ckpt/clicks/late_records")
    assert "dead_letters.path" in _problems(data)


@pytest.mark.parametrize("sub", ["out", "out/deeper"])
def test_two_outputs_sharing_a_path_are_refused(local_workspace: Workspace, sub: str) -> None:
    problems = _problems(_with_sink_path(local_workspace, local_workspace.uri(sub)))
    assert "overlaps sinks.out.path" in problems["sinks.more.path"]
    data = click_spec_dict(local_workspace)
    data["dead_letters"]["path"] = data["late_records"]["path"]
    assert "overlaps late_records.path" in _problems(data)["dead_letters.path"]


def test_two_postgres_sinks_on_one_table_are_refused(local_workspace: Workspace) -> None:
    data = click_spec_dict(local_workspace)
    data["sinks"] += [
        {"name": "pg1", "type": "postgres", "table": "clicks", "connection": "w"},
        {"name": "pg2", "type": "postgres", "table": "public.clicks", "connection": "W"},
    ]
    assert "also written by sinks.pg1" in _problems(data)["sinks.pg2.table"]


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("http://example.com/out", "unsupported scheme 'http'"),
        ("s3a://bucket/out", "unsupported scheme 's3a'"),
        ("hdfs://nn/out", "unsupported scheme 'hdfs'"),
        ("file:relative/out", "absolute path"),
        ("file://otherhost/out", "no host"),
        ("s3://", "expected s3://bucket/prefix"),
        ("s3://bucket/../escape", "'..' segment"),
    ],
)
@pytest.mark.parametrize("field", ["sinks.out.path", "source.path", "checkpoint.storage"])
def test_a_uri_sluice_cannot_open_is_refused_at_load_time(
    local_workspace: Workspace, uri: str, words: str, field: str
) -> None:
    data = click_spec_dict(local_workspace)
    if field == "sinks.out.path":
        data["sinks"][0]["path"] = uri
    elif field == "source.path":
        data["source"]["path"] = uri
    else:
        data["checkpoint"]["storage"] = uri
    problems = _problems(data)
    assert words in problems[field] and "s3://bucket/prefix" in problems[field], problems


PG = {"name": "pg", "type": "postgres", "table": "t", "connection": "w"}
EMPTY_CASES = [
    ("sinks[1].path", lambda d: d["sinks"].append({"name": "more", "type": "files", "path": ""})),
    ("sinks[1].table", lambda d: d["sinks"].append({**PG, "table": " "})),
    ("sinks[1].connection", lambda d: d["sinks"].append({**PG, "connection": ""})),
    ("source.path", lambda d: d["source"].update(path="  ")),
    ("checkpoint.storage", lambda d: d["checkpoint"].update(storage="")),
]


@pytest.mark.parametrize(("field", "edit"), EMPTY_CASES)
def test_an_empty_location_is_refused_not_dropped(
    local_workspace: Workspace, field: str, edit: Any
) -> None:
    data = click_spec_dict(local_workspace)
    edit(data)
    assert "is empty" in _problems(data)[field]


def test_plain_relative_paths_stay_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = click_spec_dict(Workspace("local", "data"))
    assert parse_spec(data).source.path == "data/in"


# -- planted secrets -------------------------------------------------------------------------

PG_SECRET = f"pg-Planted-{uuid.uuid4().hex[:12]}"


def _sluice_run(spec: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(SLUICE)] if SLUICE.exists() else [sys.executable, "-m", "sluice.cli"]
    return subprocess.run(
        [*command, "run", str(spec), "--quiet"],
        capture_output=True, text=True, timeout=600, cwd=cwd, env=env, check=False,
    )  # fmt: skip


def _secret_spec(ws: Workspace, tmp_path: Path, connection: str) -> Path:
    data = click_spec_dict(ws, name="secrets")
    data["sinks"].append(
        {"name": "pg", "type": "postgres", "table": "clicks", "connection": connection}
    )
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env(s3_server: Any, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_CONN", "SLUICE_F"))}
    return {**keep, **s3_server.aws_env(), **extra}


@pytest.mark.parametrize("how", ["in_process", pytest.param("subprocess", marks=pytest.mark.slow)])
def test_no_planted_secret_reaches_storage_sinks_or_the_run_output(
    s3_server: Any,
    postgres_server: Any,
    tmp_path: Path,
    how: str,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """In process (shared Spark session): stored objects, logging and the fds' output; as
    ``sluice run`` (slow: its own Spark): also everything the command prints."""
    bucket = s3_server.bucket("sluice-tests")
    ws = Workspace("s3", f"s3://{bucket}/secrets-{uuid.uuid4().hex[:8]}")
    line = '{{"user": "{u}", "url": "/x", "ts": "2024-01-01T00:0{m}:00", "amount": 1.5}}'
    rows = [line.format(u=u, m=m) for m in range(4) for u in ("ann", "bob")]
    rows.append('{"user": "ann", "ts": ')  # a dead letter, whose record is stored raw
    ws.put_files([("a.jsonl", "\n".join(rows).encode())])
    url = postgres_server.url(f"sec_{uuid.uuid4().hex[:8]}").split("://", 1)[1]
    database = url.rsplit("/", 1)[1]
    postgres_server.create_database(database)
    user, host = url.split("@", 1)
    conn = f"postgresql://{user}:{PG_SECRET}@{host}"
    spec_path = _secret_spec(ws, tmp_path, "warehouse")
    if how == "subprocess":
        done = _sluice_run(spec_path, _env(s3_server, SLUICE_CONN_WAREHOUSE=conn), tmp_path)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
    else:
        from sluice.protocol import run_until_drained

        spec = parse_spec(yaml.safe_load(spec_path.read_text()))
        rt = open_runtime(
            spec, clock=lambda: 0.0, new_attempt_id=lambda: uuid.uuid4().hex[:8],
            connections={"warehouse": conn},
        )  # fmt: skip
        outcomes = run_until_drained(rt, request.getfixturevalue("spark"))
        output = f"{outcomes!r}\n{caplog.text}\n" + "".join(capfd.readouterr())
    secrets = (s3_server.secret_key, PG_SECRET)
    for secret in secrets:
        assert secret not in output
    root = open_store(ws.root)
    keys = [i.key for i in root.list()]
    assert any(k.startswith("ckpt/secrets/epochs/") for k in keys), keys
    assert any(k.startswith("dead/") for k in keys) and any(k.startswith("out/") for k in keys)
    for key in keys:
        data = root.get(key)
        for secret in secrets:
            assert secret.encode() not in data, key
    assert int(postgres_server.psql("SELECT count(*) FROM clicks", database)) > 0


def test_a_failing_connection_does_not_show_its_password_in_process(
    spark: Any,
    postgres_server: Any,
    local_workspace: Workspace,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The test server trusts every password, so a role that does not exist makes it fail."""
    from sluice.protocol import run_until_drained

    local_workspace.put_files([("a.jsonl", b'{"user": "a", "ts": "2024-01-01T00:00:00"}\n')])
    conn = f"postgresql://no_such_role:{PG_SECRET}@127.0.0.1:{postgres_server.port}/nope"
    spec = parse_spec(yaml.safe_load(_secret_spec(local_workspace, local_workspace_dir(
        local_workspace), "warehouse").read_text()))  # fmt: skip
    rt = open_runtime(
        spec, clock=lambda: 0.0, new_attempt_id=lambda: uuid.uuid4().hex[:8],
        connections={"warehouse": conn},
    )  # fmt: skip
    assert PG_SECRET not in repr(rt.sink("pg"))
    with pytest.raises(Exception) as info:
        run_until_drained(rt, spark)
    text = f"{info.value}\n{info.value!r}\n{caplog.text}\n" + "".join(capfd.readouterr())
    assert "no_such_role" in text or "nope" in text, text
    assert PG_SECRET not in text
    for path in local_workspace_dir(local_workspace).rglob("*"):
        if path.is_file():
            assert PG_SECRET.encode() not in path.read_bytes(), path


def local_workspace_dir(ws: Workspace) -> Path:
    return Path(ws.root.removeprefix("file://"))


@pytest.mark.slow
def test_a_failing_connection_does_not_show_its_password(
    s3_server: Any, postgres_server: Any, tmp_path: Path, local_workspace: Workspace
) -> None:
    local_workspace.put_files([("a.jsonl", b'{"user": "a", "ts": "2024-01-01T00:00:00"}\n')])
    conn = f"postgresql://no_such_role:{PG_SECRET}@127.0.0.1:{postgres_server.port}/nope"
    done = _sluice_run(
        _secret_spec(local_workspace, tmp_path, "warehouse"),
        _env(s3_server, SLUICE_CONN_WAREHOUSE=conn),
        tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "no_such_role" in output or "nope" in output or "127.0.0.1" in output, output
    assert PG_SECRET not in output
    assert "Traceback" not in output, output
    for path in (tmp_path).rglob("*"):
        if path.is_file():
            assert PG_SECRET.encode() not in path.read_bytes(), path
