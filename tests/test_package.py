"""The package as executors get it: ``sluice`` is shipped to Spark executors as a zip
(:func:`sluice.spark.package_zip`), and zipimport has no namespace packages, so every folder of
Python modules needs an ``__init__.py`` (a missing one fails only on executors)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sluice

PACKAGE = Path(sluice.__file__).parent


def test_every_folder_of_modules_is_a_regular_package() -> None:
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(
        str(f.relative_to(PACKAGE)) for f in folders if not (f / "__init__.py").exists()
    )
    assert missing == []


def test_every_module_imports_from_the_shipped_zip(tmp_path: Path) -> None:
    """A fresh interpreter with only the zip on its path imports every module that imports
    without Spark's JVM (the registry's components included)."""
    from sluice.spark import package_zip

    names = sorted(
        ".".join(("sluice", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for p in PACKAGE.rglob("*.py")
        if "__pycache__" not in p.parts
    )
    names = [n for n in names if n.startswith(("sluice.spec", "sluice.keyed", "sluice.operators"))]
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(package_zip())!r})\n"
        f"for name in {names!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    assert module.__file__ and '.zip' in module.__file__, (name, module.__file__)\n"
        "print('ok', len(sys.modules))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")
