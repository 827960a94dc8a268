"""State handles a keyed process function uses: Value, List, Reducing and Map state.

Each handle holds one key's state of one declaration while the function runs; the engine
loads it from the epoch's snapshot and writes it back. Entries carry the event time they were
written at (the newest record of the batch being processed, or the timer's time) when the
state has a TTL: an entry whose ``written + ttl`` is at or before the current watermark is
expired — never returned, and dropped from the next snapshot (Flink's ``NeverReturnExpired``
with ``OnCreateAndWrite``, in event time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

__all__ = ["ListState", "MapState", "ReducingState", "StateHandle", "ValueState"]


class Clock(Protocol):
    """What a handle needs from the running function: when writes happen, what is visible."""

    @property
    def now_us(self) -> int: ...  # event time written entries are stamped with

    @property
    def watermark_us(self) -> int | None: ...  # entries expire against this


class StateHandle:
    """Common base: the declaration's name and TTL, and the clock of the running function."""

    def __init__(self, name: str, ttl_us: int | None, clock: Clock) -> None:
        self.name = name
        self._ttl = ttl_us
        self._clock = clock

    def _stamp(self) -> int | None:
        return self._clock.now_us if self._ttl is not None else None

    def _expired(self, stamp: int | None, watermark: int | None = None) -> bool:
        if self._ttl is None or stamp is None:
            return False
        watermark = self._clock.watermark_us if watermark is None else watermark
        return watermark is not None and stamp + self._ttl <= watermark

    def snapshot(self, watermark_us: int | None) -> tuple[Any, Any]:
        """(value, stamps) to store, expired entries removed; (None, None) when empty."""
        raise NotImplementedError


class ValueState(StateHandle):
    """One value per key: ``value()`` (None when unset or expired), ``update(v)``, ``clear()``."""

    def __init__(
        self, name: str, ttl_us: int | None, clock: Clock, value: Any = None, stamp: Any = None
    ) -> None:
        super().__init__(name, ttl_us, clock)
        self._value, self._written = value, stamp

    def value(self) -> Any:
        if self._value is None or self._expired(self._written):
            return None
        return self._value

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        self._value, self._written = value, self._stamp()

    def clear(self) -> None:
        self._value, self._written = None, None

    def snapshot(self, watermark_us: int | None) -> tuple[Any, Any]:
        if self._value is None or self._expired(self._written, watermark_us):
            return None, None
        return self._value, self._written


class ReducingState(ValueState):
    """``add(v)`` folds ``v`` into the value with the declared reduce function; ``get()``."""

    def __init__(
        self,
        name: str,
        ttl_us: int | None,
        clock: Clock,
        reduce: Callable[[Any, Any], Any],
        value: Any = None,
        stamp: Any = None,
    ) -> None:
        super().__init__(name, ttl_us, clock, value, stamp)
        self._reduce = reduce

    def get(self) -> Any:
        return self.value()

    def add(self, value: Any) -> None:
        current = self.value()
        self.update(value if current is None else self._reduce(current, value))


class ListState(StateHandle):
    """A list per key: ``get()``, ``add(v)``, ``add_all(vs)``, ``update(vs)``, ``clear()``.
    With a TTL each element expires on its own."""

    def __init__(
        self, name: str, ttl_us: int | None, clock: Clock, values: Any = None, stamps: Any = None
    ) -> None:
        super().__init__(name, ttl_us, clock)
        values = list(values or [])
        self._items = list(zip(values, stamps or [None] * len(values), strict=True))

    def get(self) -> list[Any]:
        return [v for v, s in self._items if not self._expired(s)]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())

    def add(self, value: Any) -> None:
        self._items.append((value, self._stamp()))

    def add_all(self, values: Iterable[Any]) -> None:
        stamp = self._stamp()
        self._items.extend((v, stamp) for v in values)

    def update(self, values: Iterable[Any]) -> None:
        self._items = []
        self.add_all(values)

    def clear(self) -> None:
        self._items = []

    def snapshot(self, watermark_us: int | None) -> tuple[Any, Any]:
        kept = [(v, s) for v, s in self._items if not self._expired(s, watermark_us)]
        if not kept:
            return None, None
        return [v for v, _ in kept], ([s for _, s in kept] if self._ttl is not None else None)


class MapState(StateHandle):
    """A map per key: ``get(k)``, ``put(k, v)``, ``put_all(m)``, ``remove(k)``,
    ``contains(k)``, ``keys()``, ``values()``, ``items()``, ``is_empty()``, ``clear()``.
    With a TTL each entry expires on its own."""

    def __init__(
        self, name: str, ttl_us: int | None, clock: Clock, values: Any = None, stamps: Any = None
    ) -> None:
        super().__init__(name, ttl_us, clock)
        values = dict(values or {})
        stamps = dict(stamps or {})
        self._entries = {k: (v, stamps.get(k)) for k, v in values.items()}

    def _live(self) -> dict[Any, Any]:
        return {k: v for k, (v, s) in self._entries.items() if not self._expired(s)}

    def get(self, key: Any, default: Any = None) -> Any:
        entry = self._entries.get(key)
        if entry is None or self._expired(entry[1]):
            return default
        return entry[0]

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = (value, self._stamp())

    def put_all(self, values: Mapping[Any, Any]) -> None:
        for key, value in values.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._live()

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def keys(self) -> list[Any]:
        return list(self._live())

    def values(self) -> list[Any]:
        return list(self._live().values())

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._live().items())

    def is_empty(self) -> bool:
        return not self._live()

    def clear(self) -> None:
        self._entries = {}

    def snapshot(self, watermark_us: int | None) -> tuple[Any, Any]:
        kept = {k: e for k, e in self._entries.items() if not self._expired(e[1], watermark_us)}
        if not kept:
            return None, None
        values = [(k, v) for k, (v, _) in kept.items()]
        stamps = [(k, s) for k, (_, s) in kept.items()] if self._ttl is not None else None
        return values, stamps
