"""The ``sluice`` command line, run as a subprocess the way people run it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sluice.demo import write_click_files

ROOT = Path(__file__).resolve().parents[1]
SLUICE = ROOT / ".venv" / "bin" / "sluice"
DEMO_SPEC = "include/pipelines/clicks_per_minute.yaml"


def sluice(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_DATA", "SLUICE_FAULT"))}
    command = [str(SLUICE) if SLUICE.exists() else sys.executable, *([] if SLUICE.exists()
               else ["-m", "sluice.cli"]), *args]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, (
            f"sluice {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        )
    return done


def json_out(done: subprocess.CompletedProcess[str]) -> Any:
    text = done.stdout
    return json.loads(text[min(i for i in (text.find("{"), text.find("[")) if i >= 0) :])


def write_spec(tmp_path: Path, **source_extra: Any) -> Path:
    write_click_files(tmp_path / "in", files=4, events_per_file=50)
    spec = tmp_path / "pipeline.yaml"
    source = {"type": "files", "path": str(tmp_path / "in"), "format": "jsonl",
              "schema": {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"},
              "max_files_per_epoch": 2, **source_extra}  # fmt: skip
    body = {
        "name": "cli_clicks",
        "source": source,
        "event_time": {"column": "ts", "max_out_of_orderness": "5s"},
        "key_by": ["user"],
        "window": {"type": "tumbling", "size": "1m"},
        "aggregates": {"clicks": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": str(tmp_path / "out")}],
        "late_records": {"type": "files", "path": str(tmp_path / "late")},
        "dead_letters": {"type": "files", "path": str(tmp_path / "dead")},
        "checkpoint": {"storage": str(tmp_path / "ckpt")},
    }
    spec.write_text(json.dumps(body, indent=2))  # JSON is YAML
    return spec


def tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_validate_demo_spec() -> None:
    done = sluice("validate", DEMO_SPEC)
    assert "pipeline clicks_per_minute: valid" in done.stdout
    for text in ("jsonl", "5 files/epoch", "tumbling 1m", "clicks = count(*)", "sink out",
                 "sink late_records", "qos 2"):  # fmt: skip
        assert text in done.stdout, text


def test_invalid_spec_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / DEMO_SPEC).read_text().replace("window:", "windw:"))
    done = sluice("validate", str(bad), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())  # rich may wrap long lines
    assert str(bad) in err or bad.name in err
    assert "windw" in err and "did you mean 'window'?" in err
    assert "window: is required" in err
    assert done.stdout == ""


def test_missing_spec_file_exits_2(tmp_path: Path) -> None:
    done = sluice("validate", str(tmp_path / "nope.yaml"), check=False)
    assert done.returncode == 2
    assert "cannot read" in done.stderr


def test_run_then_checkpoints(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    done = sluice("run", str(spec), "--quiet")
    assert "2 epoch(s) committed" in done.stdout

    rows = json_out(sluice("checkpoints", str(spec), "--json"))
    assert [r["epoch"] for r in rows] == [1, 2]
    total = 0
    for row in rows:
        assert row["status"] == "sinks committed"
        assert row["input_units"] == 2
        assert row["records_read"] == row["accepted"] + row["late"] + row["dead"]
        assert row["records_read"] > 0 and row["dead"] > 0
        assert row["reconciles"] is True
        total += row["records_read"]
    assert total <= 4 * 50
    assert list((tmp_path / "out").glob("part-*.parquet"))

    table = sluice("checkpoints", str(spec)).stdout
    assert "checkpoints of cli_clicks" in table
    # one table row per epoch; the 160-column piped width may truncate cells ("sinks committ…")
    lines = {int(m.group(1)): line for line in table.splitlines()
             if (m := re.match(r"^\W+(\d+) \W", line))}  # fmt: skip
    assert sorted(lines) == [1, 2]
    for row in rows:
        line = lines[row["epoch"]]
        assert "sinks commit" in line
        cells = [c.strip() for c in re.split(r"[│┃]", line)]
        assert str(row["records_read"]) in cells and str(row["accepted"]) in cells

    again = sluice("run", str(spec), "--quiet")  # drained: nothing new
    assert "0 epoch(s) committed" in again.stdout
    assert len(json_out(sluice("checkpoints", str(spec), "--json"))) == 2

    # savepoints: take, list (also in the checkpoint history), refuse a taken name, delete
    saved = sluice("savepoint", str(spec), "v1", "--note", "before the upgrade")
    assert "savepoint v1 -> checkpoint 2 of cli_clicks" in saved.stdout
    listed = json_out(sluice("savepoints", str(spec), "--json"))
    assert [(s["name"], s["epoch"], s["note"]) for s in listed["savepoints"]] == [
        ("v1", 2, "before the upgrade")
    ]
    assert (listed["checkpoints"], listed["retained"], listed["retired_below"]) == ([1, 2], 10, 0)
    rows = json_out(sluice("checkpoints", str(spec), "--json"))
    assert [r.get("savepoints") for r in rows] == [None, ["v1"]]
    table = sluice("savepoints", str(spec)).stdout
    assert "savepoints of cli_clicks" in table and "v1" in table and "checkpoints kept: 2" in table
    taken = sluice("savepoint", str(spec), "v1", check=False)
    assert taken.returncode == 2 and "savepoint 'v1': already exists (epoch 2)" in taken.stderr
    assert "deleted savepoint v1" in sluice("savepoint", str(spec), "v1", "--delete").stdout
    assert json_out(sluice("savepoints", str(spec), "--json"))["savepoints"] == []


def test_plan_process_commit_step_by_step_and_idempotent(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)

    plan = json_out(sluice("plan", str(spec), "--json"))
    assert plan["epoch"] == 1
    assert plan["source_range"]["files"] == ["clicks-00000.jsonl", "clicks-00001.jsonl"]
    again = json_out(sluice("plan", str(spec), "--json"))
    assert again == plan  # the stored plan is reused verbatim (same created_at)
    rows = json_out(sluice("checkpoints", str(spec), "--json"))
    assert [(r["epoch"], r["status"]) for r in rows] == [(1, "planned")]

    attempt = json_out(sluice("process", str(spec), "--json"))
    assert attempt["epoch"] == 1 and attempt["status"] == "prepared"
    assert not list((tmp_path / "out").glob("part-*"))  # staged, not yet visible
    rows = json_out(sluice("checkpoints", str(spec), "--json"))
    assert rows[0]["status"] == "prepared"

    checkpoint = json_out(sluice("commit", str(spec), "--json"))
    assert checkpoint["epoch"] == 1 and checkpoint["attempt"] == attempt["attempt"]
    outputs = {d: tree(tmp_path / d) for d in ("out", "late", "dead")}
    # epoch 1 closes no window yet (watermark < first window end), but dead letters are out
    assert [k for k in outputs["dead"] if k.startswith("part-000000000001-")]
    assert not any("_staging" in k for files in outputs.values() for k in files)
    ckpt_before = tree(tmp_path / "ckpt")

    second = json_out(sluice("commit", str(spec), "--epoch", "1", "--json"))
    assert second == checkpoint
    assert {d: tree(tmp_path / d) for d in ("out", "late", "dead")} == outputs
    assert tree(tmp_path / "ckpt") == ckpt_before

    rows = json_out(sluice("checkpoints", str(spec), "--json"))
    assert [(r["epoch"], r["status"]) for r in rows] == [(1, "sinks committed")]
    row = rows[0]
    assert row["records_read"] == row["accepted"] + row["late"] + row["dead"]

    plan2 = json_out(sluice("plan", str(spec), "--json"))
    assert plan2["epoch"] == 2
    assert plan2["source_range"]["files"] == ["clicks-00002.jsonl", "clicks-00003.jsonl"]
    assert plan2["start_offset"] == plan["end_offset"]


def test_plan_with_nothing_new(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    for p in (tmp_path / "in").iterdir():
        p.unlink()
    done = sluice("plan", str(spec))
    assert "nothing new to read" in done.stdout


@pytest.mark.parametrize("command", ["process", "commit"])
def test_step_without_plan_exits_2(tmp_path: Path, command: str) -> None:
    spec = write_spec(tmp_path)
    done = sluice(command, str(spec), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error" in done.stderr


def test_process_of_an_epoch_beyond_the_next_is_one_line_and_changes_nothing(
    tmp_path: Path,
) -> None:
    spec = write_spec(tmp_path)
    sluice("plan", str(spec))
    before = tree(tmp_path / "ckpt")
    done = sluice("process", str(spec), "--epoch", "3", check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        "error: pipeline cli_clicks: epoch 3 cannot be processed: the next epoch is 1 (epochs "
        "run in order, each from the checkpoint before it). Process epoch 1 first (sluice "
        "process SPEC without --epoch takes the next one; sluice plan SPEC plans it if it has "
        "no plan); nothing was read or written\n"
    )
    assert tree(tmp_path / "ckpt") == before
    attempt = json_out(sluice("process", str(spec), "--epoch", "1", "--json"))
    assert attempt["epoch"] == 1 and attempt["status"] == "prepared"


def test_the_process_job_refuses_an_epoch_beyond_the_next_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``spark-submit jobs/run_epoch.py --epoch N`` (the cold process task), in process."""
    from sluice.jobs import process_job

    spec = write_spec(tmp_path)
    assert process_job(["--spec", str(spec), "--epoch", "2"]) == 2
    assert capsys.readouterr().err == (
        "sluice: error: pipeline cli_clicks: epoch 2 cannot be processed: the next epoch is 1 "
        "(epochs run in order, each from the checkpoint before it). Process epoch 1 first "
        "(sluice process SPEC without --epoch takes the next one; sluice plan SPEC plans it if "
        "it has no plan); nothing was read or written\n"
    )
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").rglob("*.json"))
