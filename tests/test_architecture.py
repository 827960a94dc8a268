"""The floors of include/sluice (docs/architecture.md) hold: import-linter's contracts in
pyproject.toml pass, no module or first-level package is in an import cycle (imports inside
functions counted), and a back-import is caught — on a copy of the tree, so the check is
shown to fail when it should."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from import_cycles import coarse, cycles, graph  # noqa: E402

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with ``tree``'s contracts over ``tree``'s include/sluice."""
    env = {**os.environ, "PYTHONPATH": str(tree / "include")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "include" / "sluice", tree / "include" / "sluice",
                    ignore=shutil.ignore_patterns("__pycache__", "java"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_floors_hold() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_no_import_cycle_among_modules_nor_first_level_packages() -> None:
    edges = graph(ROOT / "include", "sluice")
    assert len(edges) > 100  # the whole tree was read
    assert cycles(edges) == []
    assert cycles(coarse(edges, "sluice")) == []


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the ground floor imports nothing of sluice
        ("contracts/records.py", "from sluice.protocol import repository", "Floors"),
        # the protocol never knows an implementation, even inside a function
        ("protocol/plan.py", "def _x():\n    from sluice.sinks import files\n", "protocol"),
        # a config never imports its runtime
        ("spec/components/files_sink.py", "from sluice.sinks import files", "Configs"),
        # a component never imports another
        ("sources/files.py", "def _x():\n    from sluice.sinks import files\n", "Components"),
    ],
)
def test_a_back_import_breaks_a_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    tree = copy_tree(tmp_path)
    path = tree / "include" / "sluice" / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout
    assert broken in done.stdout.split("Broken contracts")[1]


def test_an_import_inside_a_function_makes_a_cycle(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path)
    path = tree / "include" / "sluice" / "storage" / "base.py"
    path.write_text(path.read_text() + "\ndef _x():\n    from sluice.spark import spark_session\n")
    found = cycles(coarse(graph(tree / "include", "sluice"), "sluice"))
    assert ["sluice.spark", "sluice.storage"] in found
