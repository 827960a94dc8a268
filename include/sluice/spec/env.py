"""``${VAR}`` and ``${VAR:-default}`` in a spec's string values read the environment (so one
spec serves laptop, CI and cluster); a default may itself read a variable:
``${SLUICE_DATA:-${SLUICE_DATA_ROOT:-data}/demo}``."""

from __future__ import annotations

import os
import re
from typing import Any

from sluice.spec.exceptions import SpecProblem

__all__ = ["interpolate"]

# The innermost ``${VAR}`` / ``${VAR:-default}``: its default holds no "${" and no braces.
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:[^${}]|\$(?!\{))*))?\}")
_ENV_SLOT = re.compile("\0(\\d+)\0")


def interpolate(value: Any, where: str, found: list[SpecProblem]) -> Any:
    """``value`` (a parsed YAML document, or a part of it at ``where``) with every reference
    filled in; a variable that is not set is appended to ``found`` (and reads as "")."""
    if isinstance(value, dict):
        return {k: interpolate(v, f"{where}.{k}".lstrip("."), found) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    # Innermost references first, each replaced by a slot ("\0<n>\0") so that a value read
    # from the environment is never expanded again; a variable that is missing counts only if
    # its slot survives (``${A:-${B}}`` with A set does not need B).
    slots: list[str | None] = []
    missing: dict[int, str] = {}

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            slots.append(os.environ[name])
        elif default is not None:
            slots.append(default)
        else:
            missing[len(slots)] = name
            slots.append(None)
        return f"\0{len(slots) - 1}\0"

    text = value
    while True:
        expanded = _ENV_RE.sub(substitute, text)
        if expanded == text:
            break
        text = expanded

    def fill(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index in missing:
            name = missing[index]
            found.append(
                SpecProblem(
                    where,
                    f"environment variable {name} is not set",
                    f"export {name}=... or write ${{{name}:-default}}",
                )
            )
        return _ENV_SLOT.sub(fill, slots[index] or "")

    return _ENV_SLOT.sub(fill, text)
