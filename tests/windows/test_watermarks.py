"""sluice.operators.watermarks.verify_runs: when it passes the bounds an epoch's pass took,
no record's class (late, or missing a window) differs from the one its exact position
watermark gives; and the lateness math of every window kind (sluice.windows.kinds) agrees
with the rule written out record by record."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.contracts.records import WatermarkState
from sluice.operators.watermarks import Run, exact_before, verify_runs
from sluice.spec import parse_spec
from sluice.windows.kinds import kind_of

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


def windows_missed(s: Any, ts: int, wm: int | None) -> int:
    """How many of its windows a record at ``ts`` misses at watermark ``wm`` (the rule of
    docs/windows-and-watermarks.md, written out for every window)."""
    if wm is None:
        return 0
    w, lateness = s.windowing, s.event_time.allowed_lateness_us
    if w.type == "session":
        return int(ts + lateness <= wm)
    start = ts - ts % w.slide_us
    ends = []
    while start + w.size_us > ts:
        ends.append(start + w.size_us)
        start -= w.slide_us
    return sum(1 for end in ends if end + lateness <= wm)


def position_watermark(before: int | None, bound: int, floor: int | None) -> int | None:
    wm = None if before is None else before - bound
    if floor is not None:
        wm = floor if wm is None else max(wm, floor)
    return wm


@settings(max_examples=400, deadline=None)
@given(
    window=st.sampled_from(WINDOWS),
    bound_s=st.integers(0, 4),
    lateness_s=st.integers(0, 3),
    carried=st.none() | st.integers(0, 40_000_000),
    floor=st.none() | st.integers(0, 40_000_000),
    files=st.lists(st.lists(st.integers(0, 60_000_000), min_size=1, max_size=25), min_size=1,
                   max_size=4),
    hints=st.lists(st.none() | st.integers(0, 60_000_000), min_size=4, max_size=4),
)  # fmt: skip
def test_verified_runs_classify_every_record_as_the_exact_watermark_does(
    window: dict[str, Any],
    bound_s: int,
    lateness_s: int,
    carried: int | None,
    floor: int | None,
    files: list[list[int]],
    hints: list[int | None],
) -> None:
    s = spec(window, bound_s, lateness_s)
    bound = s.event_time.max_out_of_orderness_us
    state = WatermarkState({} if carried is None else {"p": carried})
    runs = [Run("p", m, 0, 1, len(t), min(t), max(t)) for m, t in enumerate(files)]

    def used(partition: str, major: int) -> int | None:  # any bound, even a wrong one
        values = [v for v in (carried, hints[major]) if v is not None]
        return max(values) if values else None

    kind = kind_of(s)
    if verify_runs(state, runs, used, bound, floor, kind.first_close):
        return  # the pass would run again, exactly
    for major, times in enumerate(files):
        took, exact = used("p", major), exact_before(state, runs)[runs[major]]
        for ts in times:
            scan = position_watermark(took, bound, floor)
            truth = position_watermark(exact, bound, floor)
            assert windows_missed(s, ts, scan) == windows_missed(s, ts, truth), (major, ts)
            took = ts if took is None else max(took, ts)
            exact = ts if exact is None else max(exact, ts)


@settings(max_examples=200, deadline=None)
@given(window=st.sampled_from(WINDOWS), ts=st.integers(-30_000_000, 60_000_000),
       lateness_s=st.integers(0, 3))  # fmt: skip
def test_first_and_last_close_bracket_every_window(
    window: dict[str, Any], ts: int, lateness_s: int
) -> None:
    """first_close is the earliest watermark that makes the record miss a window, last_close
    the one that makes it late (every window missed)."""
    s = spec(window, 0, lateness_s)
    kind = kind_of(s)
    first, last = kind.first_close(ts), kind.last_close(ts)
    assert windows_missed(s, ts, first - 1) == 0
    assert windows_missed(s, ts, first) >= 1
    assert windows_missed(s, ts, last - 1) < windows_missed(s, ts, last + 10**12)
    assert windows_missed(s, ts, last) == windows_missed(s, ts, last + 10**12)


def test_in_order_files_pass_with_the_checkpoint_bound_only() -> None:
    """In-order files of one partition: the pass takes only the carried maximum as the bound
    of every file, and the runs still verify (nothing could close a window of a later
    file's records before the file starts)."""
    s = spec({"type": "tumbling", "size": "10s"}, 0, 0)
    second = 1_000_000
    runs = [
        Run("p", 0, 0, 1, 5, 0, 4 * second),
        Run("p", 1, 0, 1, 5, 4 * second + 1, 9 * second),
        Run("p", 2, 0, 1, 5, 12 * second, 13 * second),
    ]
    kind = kind_of(s)
    assert verify_runs(WatermarkState(), runs, lambda p, m: None, 0, None, kind.first_close) == []
    # a file that starts behind the one before it, across a window end: exact pass needed
    late = [*runs, Run("p", 3, 0, 1, 5, 9 * second, 14 * second)]
    assert verify_runs(WatermarkState(), late, lambda p, m: None, 0, None, kind.first_close)
