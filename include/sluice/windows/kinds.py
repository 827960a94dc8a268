"""The window kinds: each config class (plain data, :mod:`sluice.spec.components.windows`)
mapped to its strategy (:mod:`sluice.windows.strategy`), one line each in :data:`KINDS`. A
strategy knows its kind's lateness rule, how an epoch's accepted records become partials, how
partials merge, and which epoch path and state columns the kind takes.

The lateness rule of each kind is written once, in integer arithmetic that works on Python
ints (the driver's checks) and on Spark columns (the pass) alike (:func:`fmod`).

================  ==========================================  ==============================
kind              a record at ``t`` belongs to                late (at position watermark W)
================  ==========================================  ==============================
tumbling/hopping  ``[s, s + size)``, ``s mod slide = 0``,      every window missed:
                  ``s <= t < s + size``                       ``last end + lateness <= W``
session           ``[t, t + gap)``, merged per key with every  ``t + lateness <= W``
                  window it overlaps or touches
count             by position (never late)                    never
================  ==========================================  ==============================

Adding a window kind: its config class (registered in :mod:`sluice.spec.registry`), a strategy
module here, and one line in :data:`KINDS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.spec.components.windows import CountWindow, HoppingWindow, SessionWindow, TumblingWindow
from sluice.windows.counted import Counted
from sluice.windows.sessions import CappedSession, Session
from sluice.windows.sliding import Sliding
from sluice.windows.strategy import Pipeline, WindowKind, fmod

if TYPE_CHECKING:
    from sluice.spec.components.base import WindowConfig
    from sluice.spec.model import PipelineSpec

__all__ = [
    "KINDS",
    "CappedSession",
    "Counted",
    "Pipeline",
    "Session",
    "Sliding",
    "WindowKind",
    "fmod",
    "kind_of",
]

# the strategy of each window config class
KINDS: dict[type[WindowConfig], type[WindowKind[Any]]] = {
    TumblingWindow: Sliding,
    HoppingWindow: Sliding,
    SessionWindow: Session,
    CountWindow: Counted,
}


def kind_of(spec: PipelineSpec) -> WindowKind[Any]:
    """The strategy of ``spec``'s window, given the window config and the pipeline values it
    needs."""
    window = spec.windowing
    pipeline = Pipeline(
        keys=tuple(spec.key_by),
        lateness_us=spec.event_time.allowed_lateness_us,
        emit=spec.emit,
        aggregates=spec.aggregates,
    )
    kind = KINDS.get(type(window))
    if kind is None:
        raise TypeError(f"no window strategy for {type(window).__name__} (sluice.windows.kinds)")
    return kind.of(window, pipeline)
