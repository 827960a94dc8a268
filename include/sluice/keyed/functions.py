"""Finding the user's functions: ``module:function`` references and registered names.

A reference ``pkg.module:function`` imports ``pkg.module`` — first from the folder of the spec
file (like Airflow's dags folder), else from ``sys.path`` — and takes ``function`` from it. A
bare name is looked up among the functions registered from Python::

    from sluice.keyed import register

    @register("average_every_two")
    def flat_map(ctx, records): ...

Modules found next to the spec are shipped to Spark's executors by value (cloudpickle), so a
pipeline's functions need no installation on the cluster. :func:`load_reference` is that
lookup on its own; plugin sources and sinks (``type: module:Class``) use it too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from sluice.exceptions import SluiceError
from sluice.keyed.exceptions import FunctionNotFound

__all__ = ["FunctionNotFound", "load_reference", "register", "registered", "resolve"]

F = TypeVar("F", bound=Callable[..., Any])
_REGISTRY: dict[str, Callable[..., Any]] = {}
_loaded: dict[str, tuple[str, int]] = {}  # module name -> (file, mtime) imported from a spec folder


@overload
def register(name: str) -> Callable[[F], F]: ...
@overload
def register(name: str, function: F) -> F: ...
def register(name: str, function: Any = None) -> Any:
    """Register ``function`` under ``name`` (as a decorator when ``function`` is omitted)."""

    def store(fn: F) -> F:
        _REGISTRY[name] = fn
        return fn

    return store(function) if function is not None else store


def registered() -> dict[str, Callable[..., Any]]:
    return dict(_REGISTRY)


def resolve(reference: str, base_dir: str | None, pipeline: str, field: str) -> Callable[..., Any]:
    """The callable ``reference`` names (see the module docstring)."""
    if ":" not in reference:
        if reference in _REGISTRY:
            return _REGISTRY[reference]
        known = sorted(_REGISTRY) or "none"
        raise FunctionNotFound(pipeline, field, reference,
                               f"no function registered under that name (registered: {known}); "
                               "write module:function to import one")  # fmt: skip

    def fail(reason: str) -> SluiceError:
        return FunctionNotFound(pipeline, field, reference, reason)

    function: Callable[..., Any] = load_reference(reference, base_dir, fail)
    return function


def load_reference(
    reference: str,
    base_dir: str | None,
    fail: Callable[[str], Exception],
    *,
    what: str = "function",
    accept: Callable[[Any], bool] = callable,
) -> Any:
    """The object ``module:name`` names: ``module`` imported first from ``base_dir`` (the spec's
    folder, shipped to executors by value), else from ``sys.path``. ``fail(reason)`` builds the
    error raised when the module cannot be imported or has no ``what`` called ``name`` (an
    attribute that ``accept`` refuses counts as missing)."""
    module_name, attribute = reference.split(":", 1)
    module = _import(module_name, base_dir, fail)
    found = getattr(module, attribute, None)
    if found is None or not accept(found):
        raise fail(f"module {module_name} ({getattr(module, '__file__', '?')}) has no "
                   f"{what} {attribute!r}")  # fmt: skip
    return found


def _import(name: str, base_dir: str | None, fail: Callable[[str], Exception]) -> Any:
    _forget_if_stale(name, base_dir)
    added = base_dir is not None and base_dir not in sys.path
    if added:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # an ImportError, or the module's own code failing
        raise fail(f"importing {name} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(str(base_dir))
    origin = getattr(module, "__file__", None)
    if base_dir and origin and Path(origin).resolve().is_relative_to(Path(base_dir).resolve()):
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
        _loaded[name] = (str(Path(origin).resolve()), Path(origin).stat().st_mtime_ns)
    return module


def _forget_if_stale(name: str, base_dir: str | None) -> None:
    """A long-lived process (tests, a warm Spark session) may have imported ``name`` from
    another spec's folder, or before the file changed: import it afresh then."""
    if base_dir is None or name not in sys.modules:
        return
    candidate = Path(base_dir, *name.split(".")).with_suffix(".py")
    if not candidate.exists():
        return
    current = (str(candidate.resolve()), candidate.stat().st_mtime_ns)
    if _loaded.get(name) != current:
        del sys.modules[name]
