"""The ``process:`` section: a keyed process function, its declared state and its output.

```yaml
process:
  function: count_window_average:flat_map    # module:function, or a registered name
  on_timer: sessions:on_timer                # optional: called for each timer that fires
  state:
    sum: {kind: value, type: "struct<count: long, sum: long>"}
    seen: {kind: map, key_type: string, type: long, ttl: 1h}
    total: {kind: reducing, type: double, reduce: functions:add}
    events: {kind: list, type: long}
  output: {key: long, average: long}
```

Checked without importing anything: names, kinds, types and TTLs; the functions are
resolved when a run starts (``sluice validate`` does that too).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from sluice.spec.model import STATE_KINDS, ProcessSpec, StateSpec
from sluice.spec.types import InvalidType, parse_type

if TYPE_CHECKING:
    from sluice.spec.checker import Checker

__all__ = ["FUNCTION_RE", "check_process"]

FUNCTION_RE = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")
_PROCESS = {"function", "on_timer", "state", "output"}
_STATE = {"kind", "type", "key_type", "reduce", "ttl"}
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
RESERVED_OUTPUT = ("_op", "_epoch")


def check_process(checker: Checker, value: Any, origin: str) -> ProcessSpec | None:
    data = checker.mapping(value, "process", _PROCESS)
    if data is None:
        return None
    function = _function(checker, data.get("function"), "process.function", required=True)
    on_timer = _function(checker, data.get("on_timer"), "process.on_timer", required=False)
    state = _states(checker, data.get("state"))
    output = _output(checker, data.get("output"))
    if function is None or output is None or state is None:
        return None
    base = os.path.dirname(os.path.abspath(origin)) if origin != "<memory>" else None
    return ProcessSpec(function, state, output, on_timer, base)


def _function(checker: Checker, value: Any, where: str, *, required: bool) -> str | None:
    if value is None:
        if required:
            checker.add(where, "is required", "name a Python function: module:function")
        return None
    if not isinstance(value, str) or not FUNCTION_RE.match(value):
        checker.add(where, f"{value!r} is not a function reference",
                    "write module:function (the module next to the spec or importable), "
                    "or the name a function was registered under")  # fmt: skip
        return None
    return value


def _states(checker: Checker, value: Any) -> tuple[StateSpec, ...] | None:
    if value is None:
        return ()
    if not isinstance(value, dict):
        checker.add("process.state", "must map state names to declarations",
                    "e.g. {sum: {kind: value, type: long}}")  # fmt: skip
        return None
    states = [_state(checker, name, decl) for name, decl in value.items()]
    return tuple(s for s in states if s) if all(states) else None


def _state(checker: Checker, name: Any, value: Any) -> StateSpec | None:
    where = f"process.state.{name}"
    if not isinstance(name, str) or not _NAME_RE.match(name):
        checker.add(where, "is not a valid state name", "use letters, digits and '_'")
        return None
    data = checker.mapping(value, where, _STATE)
    if data is None:
        return None
    kind = checker.string(data, "kind", where, STATE_KINDS)
    element = _type(checker, data.get("type"), f"{where}.type")
    key_type = None
    if kind == "map":
        key_type = _type(checker, data.get("key_type"), f"{where}.key_type")
        if key_type is not None and key_type[:5] in ("array", "map<", "struc"):
            checker.add(f"{where}.key_type", "map keys must be a simple type", "e.g. string")
            key_type = None
    elif "key_type" in data:
        checker.add(f"{where}.key_type", f"does not apply to {kind} state", "remove it")
    reduce = None
    if kind == "reducing":
        reduce = _function(checker, data.get("reduce"), f"{where}.reduce", required=True)
    elif "reduce" in data:
        checker.add(f"{where}.reduce", f"does not apply to {kind} state", "remove it")
    ttl = None
    if data.get("ttl") is not None:
        ttl = checker.duration(data, "ttl", where, positive=True)
    if kind is None or element is None or (kind == "map" and key_type is None):
        return None
    if kind == "reducing" and reduce is None:
        return None
    return StateSpec(name, kind, element, key_type, reduce, ttl)  # type: ignore[arg-type]


def _type(checker: Checker, value: Any, where: str) -> str | None:
    if not isinstance(value, str):
        checker.add(where, "is required" if value is None else f"{value!r} is not a type",
                    "e.g. long, string, array<double>, struct<count: long, sum: long>")  # fmt: skip
        return None
    try:
        return parse_type(value)
    except InvalidType as exc:
        checker.add(where, str(exc), "write a Spark type, e.g. struct<count: long, sum: long>")
        return None


def _output(checker: Checker, value: Any) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, dict) or not value:
        checker.add("process.output", "must map each output column to a type",
                    "e.g. {key: long, average: double}")  # fmt: skip
        return None
    columns = []
    for name, kind in value.items():
        where = f"process.output.{name}"
        if not isinstance(name, str) or not _NAME_RE.match(name) or name in RESERVED_OUTPUT:
            checker.add(where, "is not a valid output column name",
                        "use letters, digits and '_', not starting with '_'")  # fmt: skip
            continue
        canonical = _type(checker, kind, where)
        if canonical is not None:
            columns.append((name, canonical))
    return tuple(columns) if len(columns) == len(value) else None
