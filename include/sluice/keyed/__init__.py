"""Keyed state for user code: process functions with Value / List / Reducing / Map state,
event-time TTL and event-time timers, run inside Spark through Arrow (docs/keyed-state.md)."""

from sluice.keyed.context import KeyedContext, Timers
from sluice.keyed.functions import FunctionNotFound, register, resolve
from sluice.keyed.runner import KeyedFunctionError, KeyedProgram, KeyResult
from sluice.keyed.state import ListState, MapState, ReducingState, ValueState

__all__ = [
    "FunctionNotFound",
    "KeyResult",
    "KeyedContext",
    "KeyedFunctionError",
    "KeyedProgram",
    "ListState",
    "MapState",
    "ReducingState",
    "Timers",
    "ValueState",
    "register",
    "resolve",
]
