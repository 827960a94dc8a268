"""The error hierarchy, checked over every module of the package.

Every exception class Sluice defines lives in its package's ``exceptions.py``, derives from
:class:`~sluice.exceptions.SluiceError`, and a source's, sink's or operator's error derives
from ``SourceError`` / ``SinkError`` / ``OperatorError``; what a constructor is given (the
pipeline, epoch, key, URI...) is kept as an attribute; exceptions modules stay light.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sluice
from sluice.exceptions import SluiceError
from sluice.operators.exceptions import OperatorError
from sluice.sinks.exceptions import SinkError
from sluice.sources.exceptions import SourceError

PACKAGE = Path(sluice.__file__).parent

# Packages whose errors these rules do not cover yet, with the reason (none now).
EXCLUDED: dict[str, str] = {}
# Classes exempt from "in an exceptions.py" and "a SluiceError", with the reason.
ALLOWED = {
    "sluice.sinks.compaction.InjectedCrash": (
        "a test's simulated crash inside compact(); deliberately not a SluiceError so that "
        "no `except SluiceError` (CLI, jobs) can swallow it, and kept beside the crash points"
    ),
}
# Where an error's family is decided by its module: the base it must derive from.
FAMILIES = {
    "sluice.sources": SourceError,
    "sluice.sinks": SinkError,
    "sluice.operators": OperatorError,
    "sluice.windows": OperatorError,
    "sluice.keyed": OperatorError,
}
# The worked examples hold a source and a sink in one package: decided per class.
EXAMPLE_FAMILIES = {
    "SqliteSourceError": SourceError,
    "RangeChanged": SourceError,
    "SqliteSinkError": SinkError,
    "StagingTableMissing": SinkError,
}
# Exceptions modules import none of these (and importing them loads none).
HEAVY = ("pyspark", "py4j", "pyarrow", "pandas", "numpy")


def _walk() -> tuple[dict[str, type[BaseException]], dict[str, str]]:
    """Every exception class defined in sluice (by qualified name), and the modules that could
    not be imported (with why)."""
    found: dict[str, type[BaseException]] = {}
    skipped: dict[str, str] = {}
    for info in pkgutil.walk_packages(sluice.__path__, "sluice."):
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:  # an optional service's client library is not installed
            skipped[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("sluice")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found, skipped


@pytest.fixture(scope="module")
def errors() -> dict[str, type[BaseException]]:
    found, skipped = _walk()
    for name, reason in sorted(skipped.items()):
        print(f"skipped {name}: cannot import it here ({reason}); its errors are not checked")
    for prefix, reason in EXCLUDED.items():
        print(f"excluded {prefix}: {reason}")
    return {
        name: cls
        for name, cls in found.items()
        if not any(cls.__module__.startswith(prefix) for prefix in EXCLUDED)
    }


def test_the_walk_finds_the_errors_of_every_layer(errors: dict[str, type[BaseException]]) -> None:
    names = {cls.__name__ for cls in errors.values()}
    expected = {"SourceError", "KafkaOffsetsGone", "SinkError", "StagingMissing", "OperatorError"}
    expected |= {"KeyedFunctionError", "EpochAlreadyCommitted", "SpecError", "StorageError"}
    expected |= {"BadRequest", "Busy", "HttpError", "OutsideRoots"}  # sluice serve's
    assert expected <= names


def test_every_error_is_defined_in_an_exceptions_module(
    errors: dict[str, type[BaseException]],
) -> None:
    elsewhere = [
        name
        for name, cls in errors.items()
        if cls.__module__.rsplit(".", 1)[-1] != "exceptions" and name not in ALLOWED
    ]
    assert elsewhere == [], "define these in their package's exceptions.py"


def test_every_error_is_a_sluice_error(errors: dict[str, type[BaseException]]) -> None:
    outside = [
        n for n, cls in errors.items() if not issubclass(cls, SluiceError) and n not in ALLOWED
    ]
    assert outside == [], "derive these from SluiceError (or a subclass)"
    for name in ALLOWED:
        assert name in errors, f"{name} is allowed but no longer exists: drop it from ALLOWED"


def test_the_injected_crash_stays_outside_the_hierarchy() -> None:
    from sluice.sinks.compaction import InjectedCrash

    assert not issubclass(InjectedCrash, SluiceError)


def _family(cls: type[BaseException]) -> type[SluiceError] | None:
    if cls.__module__.startswith("sluice.examples."):
        return EXAMPLE_FAMILIES.get(cls.__name__)
    for prefix, base in FAMILIES.items():
        if cls.__module__ == prefix or cls.__module__.startswith(prefix + "."):
            return base
    return None


def test_sources_sinks_and_operators_errors_derive_from_their_layer(
    errors: dict[str, type[BaseException]],
) -> None:
    wrong = {}
    for name, cls in errors.items():
        base = _family(cls)
        if base is not None and name not in ALLOWED and not issubclass(cls, base):
            wrong[name] = base.__name__
    assert wrong == {}, "these must derive from the named base"
    assert all(f"sluice.examples.exceptions.{n}" in errors for n in EXAMPLE_FAMILIES)


def _sample(annotation: Any, name: str) -> Any:
    """A value of ``annotation``, distinct per parameter name where it is a string."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)), name)
    if annotation is int:
        return 7
    if origin is tuple and Ellipsis not in args:
        return tuple(_sample(a, f"{name}{i}") for i, a in enumerate(args))
    if origin is tuple:
        return (_sample(args[0], name),)
    if origin in (list, Sequence):
        return [_sample(args[0], name)]
    if origin is dict:
        return {}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        hints = typing.get_type_hints(annotation)
        fields = dataclasses.fields(annotation)
        return annotation(**{f.name: _sample(hints[f.name], f.name) for f in fields})
    return f"{name}-value"  # str, Any, object


def _constructed(errors: dict[str, type[BaseException]]) -> list[tuple[str, type, list[str]]]:
    """(name, class, its constructor's data parameters) of every error with its own
    ``__init__`` (``message``: the text itself, not data)."""
    found = []
    for name, cls in sorted(errors.items()):
        if "__init__" in vars(cls) and name not in ALLOWED:
            params = list(inspect.signature(cls).parameters.values())
            variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            data = [p.name for p in params if p.name != "message" and p.kind not in variadic]
            found.append((name, cls, data))
    return found


def test_what_an_error_is_given_it_keeps_as_an_attribute(
    errors: dict[str, type[BaseException]],
) -> None:
    missing = {}
    for name, cls, data in _constructed(errors):
        hints = typing.get_type_hints(cls.__init__)
        kwargs = {p: _sample(hints.get(p, str), p) for p in data}
        if "message" in inspect.signature(cls).parameters:
            kwargs["message"] = "the message"
        error = cls(**kwargs)
        lost = [p for p in data if not _kept(getattr(error, p, _MISSING), kwargs[p])]
        if lost:
            missing[name] = lost
    assert missing == {}, "keep these constructor arguments as attributes of the same name"


_MISSING = object()


def _kept(value: Any, given: Any) -> bool:
    if isinstance(given, list):
        return value in (given, tuple(given))
    return bool(value == given)


def test_the_middle_layer_carries_what_its_message_names() -> None:
    from sluice.keyed.exceptions import KeyedFunctionError
    from sluice.sinks.exceptions import StagingTableMissing
    from sluice.sources.exceptions import KafkaOffsetsGone

    gone = KafkaOffsetsGone("clicks@kafka:9092", [("clicks", 0, 5, 9)], "the next epoch")
    assert isinstance(gone, SourceError) and gone.source == "clicks@kafka:9092"
    assert "topic clicks partition 0: offsets 5..8 (4 records)" in str(gone)
    staged = StagingTableMissing("p", "out", 4, "a4", "_sluice_staging.t_4")
    assert (staged.pipeline, staged.sink, staged.epoch, staged.attempt) == ("p", "out", 4, "a4")
    assert str(staged).startswith("pipeline p, sink out: epoch 4 (attempt a4) is not committed")
    failed = KeyedFunctionError("p", 3, ("alice",), "fn", "ValueError: boom")
    assert isinstance(failed, OperatorError)
    assert (failed.pipeline, failed.epoch, failed.key, failed.function) == (
        "p",
        3,
        ("alice",),
        "fn",
    )


def test_the_old_import_paths_still_work() -> None:
    from sluice.jvm import HelperJarUnavailable
    from sluice.keyed import FunctionNotFound, KeyedFunctionError
    from sluice.keyed.operator import ProcessFunctionFailed
    from sluice.operators.base import InvalidExpression
    from sluice.protocol import InvalidRunRequest, SavepointError
    from sluice.sinks.compaction import CompactionConflict, CompactionError
    from sluice.sinks.delta import DeltaSinkError, StagingMissing
    from sluice.sinks.postgres import PostgresSinkError, StagingTableMissing
    from sluice.sources.kafka import KafkaOffsetsGone, KafkaSourceError
    from sluice.spec.types import InvalidType
    from sluice.state_view import StateViewError

    moved = [HelperJarUnavailable, FunctionNotFound, KeyedFunctionError, ProcessFunctionFailed]
    moved += [InvalidExpression, InvalidRunRequest, SavepointError, CompactionConflict]
    moved += [CompactionError, DeltaSinkError, StagingMissing, PostgresSinkError]
    moved += [StagingTableMissing, KafkaOffsetsGone, KafkaSourceError, InvalidType, StateViewError]
    assert all(cls.__module__.endswith("exceptions") for cls in moved)


def _exceptions_files() -> list[Path]:
    return sorted(PACKAGE.rglob("exceptions.py"))


@pytest.mark.parametrize("path", _exceptions_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_exceptions_modules_import_nothing_heavy(path: Path) -> None:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & set(HEAVY)


def test_importing_the_engine_exceptions_loads_no_spark_nor_arrow() -> None:
    """In a fresh interpreter (this one has loaded everything): what an ``except`` clause of a
    light task (plan, commit, the DAG file) pulls in."""
    modules = [
        "sluice.exceptions",
        "sluice.sources.exceptions",
        "sluice.sinks.exceptions",
        "sluice.operators.exceptions",
        "sluice.keyed.exceptions",
        "sluice.jvm.exceptions",
        "sluice.protocol.exceptions",
        "sluice.spec.exceptions",
        "sluice.storage.exceptions",
        "sluice.nexmark.exceptions",
    ]
    child = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"},
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & set(HEAVY)
