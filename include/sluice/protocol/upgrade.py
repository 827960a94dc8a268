"""Upgrades: continuing a checkpoint (or a savepoint) under a changed spec.

Every checkpoint stores the *state shape* its snapshot was written under
(:meth:`sluice.spec.PipelineSpec.state_shape`). The next plan compares it with the spec now:

* not part of the shape (kept as it is): sinks, the source path or format, qos, limits,
  retention;
* compatible (kept): an aggregate added (it starts empty in windows already open), a
  process-function state added (empty for every key), a TTL added or changed (entries
  written before never expire);
* drops state: an aggregate or state removed (its values are dropped), an aggregate's
  expression or a state's type changed (it restarts empty);
* drops all state: ``key_by``, the window, the event-time column, ``select`` (the next epoch
  starts with no state);
* stateless pipelines (docs/stateless.md) keep no state: changing their ``select``,
  ``filter`` or ``output`` drops nothing, and neither does making one stateful (it starts
  empty); making a stateful pipeline stateless drops all its state.

A change that drops state is refused with every difference listed (:class:`SpecChanged`),
unless the run request allows it (``allow_state_drop``: the trigger form, or
``sluice run --allow-state-drop``). Then the plan records what was dropped
(``state_migration``), so the history says why a window's aggregate restarted.
"""

from __future__ import annotations

import json
from typing import Any

from sluice.contracts.records import StateMigration, StateShape
from sluice.spec.model import STATELESS_SHAPE as STATELESS

__all__ = ["compare_shapes"]

# shape entries whose change makes the whole snapshot unreadable
_WHOLE = ("key_by", "event_time", "window", "select")


def compare_shapes(stored: StateShape, current: StateShape) -> StateMigration:
    """What continuing a snapshot of shape ``stored`` under ``current`` means."""
    if STATELESS in (stored, current):
        return _stateless_change(stored, current)
    added: list[str] = []
    dropped: list[str] = []
    reset_all = False
    reset_aggregates: list[str] = []
    reset_states: list[str] = []
    for field in _WHOLE:
        if stored.get(field) != current.get(field):
            dropped.append(
                f"{field}: stored {_show(stored.get(field))}, spec now "
                f"{_show(current.get(field))} (all state is dropped)"
            )
            reset_all = True
    old_aggs, new_aggs = _entries(stored.get("aggregates")), _entries(current.get("aggregates"))
    for name in sorted(set(old_aggs) | set(new_aggs)):
        before, after = old_aggs.get(name), new_aggs.get(name)
        if before == after:
            continue
        if before is None:
            added.append(f"aggregate {name}: added ({after})")
        elif after is None:
            dropped.append(f"aggregates.{name}: stored {before!r}, removed from the spec")
        else:
            dropped.append(f"aggregates.{name}: stored {before!r}, spec now {after!r}")
            reset_aggregates.append(name)
    states = {k for k in (*stored, *current) if k.startswith("state.")}
    for key in sorted(states):
        before, after = stored.get(key), current.get(key)
        if before == after:
            continue
        name = key.removeprefix("state.")
        if before is None:
            added.append(f"state {name}: added ({after})")
        elif after is None:
            dropped.append(f"{key}: stored {before!r}, removed from the spec")
        else:
            dropped.append(f"{key}: stored {before!r}, spec now {after!r}")
            reset_states.append(name)
    return StateMigration(
        tuple(added),
        tuple(dropped),
        reset_all,
        tuple(reset_aggregates),
        tuple(reset_states),
    )


def _entries(value: object) -> dict[str, object]:
    """A shape entry that maps names to values (``aggregates``); absent: empty."""
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _stateless_change(stored: StateShape, current: StateShape) -> StateMigration:
    """A stateless pipeline on either side: only a stateful snapshot can be dropped."""
    if stored == current:
        return StateMigration()
    if stored == STATELESS:
        return StateMigration(added=(f"operator: stateless before, {_operator(current)} now "
                                     "(it starts with empty state)",), reset_all=True)  # fmt: skip
    dropped = f"operator: stored {_operator(stored)}, spec now stateless (all state is dropped)"
    return StateMigration(dropped=(dropped,), reset_all=True)


def _operator(shape: StateShape) -> str:
    if "window" in shape:
        return f"window {_show(shape['window'])}"
    return "stateless" if shape == STATELESS else "a process function"


def _show(value: Any) -> str:
    """Shapes come back from JSON with sorted keys: show dicts sorted, so both sides read
    alike."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return repr(value)
