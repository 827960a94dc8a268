"""sluice.windows.watermarks.chunk_bounds: a chunk it does not mark exact holds no record
that its exact position watermark would make late or make miss a window."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.spec import parse_spec
from sluice.windows.operator import _first_close
from sluice.windows.watermarks import Chunk, WatermarkState, chunk_bounds

WINDOWS = [
    {"type": "tumbling", "size": "10s"},
    {"type": "hopping", "size": "10s", "slide": "2s"},
    {"type": "hopping", "size": "5s", "slide": "2s"},
    {"type": "session", "gap": "3s"},
]


def spec(window: dict[str, Any], bound_s: int, lateness_s: int) -> Any:
    return parse_spec({
        "name": "w", "source": {"type": "files", "path": "/in", "format": "jsonl",
                                "schema": {"ts": "timestamp", "k": "string"}},
        "event_time": {"column": "ts", "max_out_of_orderness": f"{bound_s}s",
                       "allowed_lateness": f"{lateness_s}s"},
        "key_by": ["k"], "window": window, "aggregates": {"n": "count(*)"},
        "sinks": [{"name": "out", "type": "files", "path": "/out"}],
        "checkpoint": {"storage": "/ckpt"},
    })  # fmt: skip


def windows_missed(s: Any, ts: int, wm: int | None) -> bool:
    """Does a record at ``ts`` miss any of its windows at watermark ``wm``? (The rule of
    windows/operator.py's ``_lateness`` and ``_assign``, written out for every window.)"""
    if wm is None:
        return False
    w, lateness = s.windowing, s.event_time.allowed_lateness_us
    if w.type == "session":
        return ts + lateness <= wm
    start = ts - ts % w.slide_us
    ends = []
    while start + w.size_us > ts:
        ends.append(start + w.size_us)
        start -= w.slide_us
    return any(end + lateness <= wm for end in ends)


@settings(max_examples=300, deadline=None)
@given(
    window=st.sampled_from(WINDOWS),
    bound_s=st.integers(0, 4),
    lateness_s=st.integers(0, 3),
    chunk_lines=st.integers(1, 6),
    carried=st.none() | st.integers(0, 40_000_000),
    floor=st.none() | st.integers(0, 40_000_000),
    files=st.lists(st.lists(st.integers(0, 60_000_000), min_size=1, max_size=25), min_size=1,
                   max_size=4),
)  # fmt: skip
def test_non_exact_chunks_hold_no_late_record(
    window: dict[str, Any],
    bound_s: int,
    lateness_s: int,
    chunk_lines: int,
    carried: int | None,
    floor: int | None,
    files: list[list[int]],
) -> None:
    s = spec(window, bound_s, lateness_s)
    bound = s.event_time.max_out_of_orderness_us
    state = WatermarkState({} if carried is None else {"p": carried})
    chunks = []
    for major, times in enumerate(files):
        for c in range(0, len(times), chunk_lines):
            part = times[c : c + chunk_lines]
            chunks.append(Chunk("p", major, c // chunk_lines, min(part), max(part)))
    exact = {(b[1], b[2]): b[4] for b in chunk_bounds(state, chunks, bound, floor, _first_close(s))}
    running = carried
    for major, times in enumerate(files):
        for line, ts in enumerate(times):
            wm = None if running is None else running - bound
            if wm is not None and floor is not None:
                wm = max(wm, floor)
            elif floor is not None:
                wm = floor
            if not exact[(major, line // chunk_lines)]:
                assert not windows_missed(s, ts, wm), (major, line, ts, wm)
            running = ts if running is None else max(running, ts)


def test_in_order_chunks_inside_one_window_are_not_exact() -> None:
    s = spec({"type": "tumbling", "size": "10s"}, 0, 0)
    second = 1_000_000
    chunks = [
        Chunk("p", 0, 0, 0, 4 * second),  # inside [0, 10 s)
        Chunk("p", 0, 1, 5 * second, 11 * second),  # crosses 10 s: its first record's window
        Chunk("p", 0, 2, 12 * second, 13 * second),  # inside [10 s, 20 s)
    ]
    bounds = chunk_bounds(WatermarkState(), chunks, 0, None, _first_close(s))
    assert [(b[2], b[3], b[4]) for b in bounds] == [
        (0, None, False),
        (1, 4 * second, True),
        (2, 11 * second, False),
    ]
    everything = chunk_bounds(WatermarkState(), chunks, 0, None, None)
    assert all(b[4] for b in everything)  # no first_close (keyed functions): all exact
