"""Fixtures for the keyed-function tests: the shipped count_window_average spec and the
every-state-kind ``kinds`` pipeline, each over its input in a fresh folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice.spec import load_spec

from tests.keyed.data import (
    ROOT,
    cwa_files,
    kinds_events,
    kinds_files,
    kinds_reference,
    kinds_spec,
)


@pytest.fixture
def cwa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SLUICE_DATA", str(tmp_path))
    (tmp_path / "in").mkdir()
    for name, text in cwa_files():
        (tmp_path / "in" / name).write_text(text + "\n")
    return load_spec(ROOT / "include" / "pipelines" / "count_window_average.yaml")


@pytest.fixture
def kinds(tmp_path: Path) -> Any:
    events = kinds_events()
    (tmp_path / "in").mkdir()
    for name, text in kinds_files(events):
        (tmp_path / "in" / name).write_text(text + "\n")
    return load_spec(kinds_spec(tmp_path)), kinds_reference(events)
