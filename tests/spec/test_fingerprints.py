"""Stored checkpoints compare the state shape's fingerprint: the spec's typed component configs
must give every shipped spec and every test fixture the fingerprint it had before them (the
values below were computed with the hand-written loader, before the registry)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from sluice.spec import load_spec, parse_spec

from tests.fixtures.pipelines import Workspace, click_spec_dict
from tests.spec.test_loader import base
from tests.spec.test_plugins import plugin_spec
from tests.spec.test_process_spec import BASE as PROCESS
from tests.spec.test_stateless_spec import body as stateless

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {  # include/pipelines/: the specs dags/sluice_pipelines.py turns into DAGs
    "clicks_per_minute.yaml": "sha256:dbf21559fe7d9ce0",
    "clicks_to_iceberg.yaml": "sha256:cee8517072428d1c",
    "clicks_to_kafka.yaml": "sha256:cee8517072428d1c",
    "count_window_average.yaml": "sha256:14c9ff105824006a",
    "nexmark_q1.yaml": "sha256:ca24d4b60462d747",
    "nexmark_q11.yaml": "sha256:b619df644b8f8f28",
    "nexmark_q3.yaml": "sha256:24bd482a8850d2ff",
    "nexmark_q5.yaml": "sha256:7f6df82ad76e20fb",
    "nexmark_q7.yaml": "sha256:3929bca4744c8e98",
    "nexmark_q7_rows.yaml": "sha256:6909dc9703976d82",
    "nexmark_q8.yaml": "sha256:6837708b71823bed",
}


def test_every_shipped_spec_is_pinned() -> None:
    assert sorted(p.name for p in (ROOT / "include" / "pipelines").glob("*.yaml")) == sorted(
        SHIPPED
    )


@pytest.mark.parametrize(("name", "fingerprint"), sorted(SHIPPED.items()))
def test_shipped_specs_keep_their_fingerprints(name: str, fingerprint: str) -> None:
    assert load_spec(ROOT / "include" / "pipelines" / name).fingerprint() == fingerprint


def _window(window: dict[str, Any]) -> dict[str, Any]:
    data = base(Path("/tmp/fp"))
    data["window"] = window
    return data


def _kafka() -> dict[str, Any]:
    data = base(Path("/tmp/fp"))
    schema = data["source"]["schema"]
    data["source"] = {"type": "kafka", "topics": ["clicks"], "bootstrap_servers": "b:9092",
                      "schema": schema, "metadata": {"ts": "timestamp"}}  # fmt: skip
    return data


WS = Workspace("local", "/tmp/fp")
FIXTURES = {
    "click_spec_dict": (lambda: click_spec_dict(WS), "sha256:dbf21559fe7d9ce0"),
    "loader base": (lambda: base(Path("/tmp/fp")), "sha256:673c26cf6722cdb7"),
    "kafka source": (_kafka, "sha256:673c26cf6722cdb7"),
    "plugins": (lambda: plugin_spec(Path("/tmp/fp")), "sha256:4889331bd7dc834b"),
    "process": (lambda: copy.deepcopy(PROCESS), "sha256:14c9ff105824006a"),
    "stateless": (lambda: stateless(Path("/tmp/fp")), "sha256:ca24d4b60462d747"),
    "hopping": (
        lambda: _window({"type": "hopping", "size": "10s", "slide": "2s"}),
        "sha256:beaac8b1b0f3d3a2",
    ),
    "session": (lambda: _window({"type": "session", "gap": "5s"}), "sha256:3e9ce5091969b8be"),
    "capped session": (
        lambda: _window({"type": "session", "gap": "30s", "max_duration": "10m"}),
        "sha256:2104f64c52f5b529",
    ),
    "count": (
        lambda: _window({"type": "count", "count": 5, "slide": 2}),
        "sha256:4ffb069f2ed1c574",
    ),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_specs_keep_their_fingerprints(name: str) -> None:
    make, fingerprint = FIXTURES[name]
    assert parse_spec(make()).fingerprint() == fingerprint
