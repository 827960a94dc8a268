"""The shipped ``count_window_average`` on the input ``make airflow`` and ``docker/seed_demo.py``
give it (:func:`sluice.demo.render_reading_files`): readings without a value are filtered before
the function (they once failed every run with ``cannot convert float NaN to integer``), a value
that is not a long is a dead letter, and the output is Flink's CountWindowAverage over the rest.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sluice.demo import FLINK_VALUES, render_reading_files
from sluice.protocol import run_until_drained
from sluice.sinks.files import read_rows
from sluice.spec import load_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime
from tests.keyed.data import ROOT

SPEC = ROOT / "include" / "pipelines" / "count_window_average.yaml"


def flink_reference(files: list[tuple[str, bytes]]) -> tuple[Counter[tuple[int, int]], int, int]:
    """Flink's CountWindowAverage record by record over the valid readings with a value:
    (emitted (key, average) pairs, readings without a value, readings that are not a long)."""
    emitted: Counter[tuple[int, int]] = Counter()
    pending: dict[int, list[int]] = {}
    nulls = bad = 0
    for _, body in files:
        for line in body.decode().splitlines():
            reading = json.loads(line)
            if reading["value"] is None:
                nulls += 1
            elif not isinstance(reading["value"], int):
                bad += 1
            else:
                values = pending.setdefault(reading["key"], [])
                values.append(reading["value"])
                if len(values) == 2:
                    emitted[(reading["key"], sum(values) // 2)] += 1
                    values.clear()
    return emitted, nulls, bad


@pytest.fixture
def readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SLUICE_DATA", str(tmp_path))
    files = render_reading_files()
    (tmp_path / "in").mkdir()
    for name, body in files:
        (tmp_path / "in" / name).write_bytes(body)
    return load_spec(SPEC), files


def test_null_values_are_filtered_and_the_rest_is_flinks_output(spark: Any, readings: Any) -> None:
    spec, files = readings
    expected, nulls, bad = flink_reference(files)
    assert nulls >= 3 and bad == 1  # the input exercises both paths
    outcomes = run_until_drained(runtime(spec), spark)  # one epoch (splits: test_keyed_pipelines)
    stats = [o.checkpoint.result.stats for o in outcomes]
    assert sum(s.filtered for s in stats) == nulls
    assert sum(s.dead for s in stats) == bad
    rows = read_rows(open_store(spec.sinks[0].path), "parquet")
    got = Counter((r["key"], r["average"]) for r in rows)
    assert got == expected
    flink = list(FLINK_VALUES)
    assert (1, (flink[0] + flink[1]) // 2) in got and (1, (flink[2] + flink[3]) // 2) in got
    dead = read_rows(open_store(spec.dead_letters.path), "jsonl")
    assert len(dead) == 1 and "n/a" in json.dumps(dead[0])
