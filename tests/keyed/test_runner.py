"""The per-key runner without Spark: state kinds, event-time TTL, timers, errors, and that the
output of a function iterating with ``ctx.each`` does not depend on where epochs end.

Records of one key are fed in epochs the way the engine does: position watermark ``_wm`` =
(largest earlier event time) - bound, the epoch's final watermark = largest event time so far
- bound, and the state row carried from one epoch to the next.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sluice.keyed import FunctionNotFound, KeyedFunctionError, KeyedProgram, register, resolve
from sluice.keyed.context import NO_WATERMARK
from sluice.spec.model import StateSpec

S = 1_000_000  # one second in microseconds
BOUND = 2 * S


def _program(
    function: Callable[..., Any],
    states: tuple[StateSpec, ...],
    output: tuple[str, ...],
    *,
    on_timer: Callable[..., Any] | None = None,
    reducers: tuple[tuple[str, Callable[[Any, Any], Any]], ...] = (),
    end_watermark: int | None = None,
) -> KeyedProgram:
    return KeyedProgram(
        pipeline="p",
        epoch=1,
        function=function,
        function_ref="tests:function",
        on_timer=on_timer,
        on_timer_ref="tests:on_timer" if on_timer else None,
        states=states,
        reducers=reducers,
        output=output,
        columns=("value", "ts"),
        end_watermark_us=end_watermark,
    )


def run_epochs(
    make: Callable[[int | None], KeyedProgram], events: list[tuple[int, int]], cuts: list[int]
) -> tuple[list[dict[str, Any]], Any]:
    """Feed (second, value) events to one key in epochs ending at ``cuts`` (indexes)."""
    rows: list[dict[str, Any]] = []
    state = None
    seen_max: int | None = None
    bounds = [0, *sorted(set(cuts)), len(events)]
    for lo, hi in itertools.pairwise(bounds):
        chunk = events[lo:hi]
        wms = []
        for second, _ in chunk:
            wms.append(NO_WATERMARK if seen_max is None else seen_max - BOUND)
            seen_max = max(seen_max or second * S, second * S)
        frame = pd.DataFrame(
            {
                "value": [v for _, v in chunk],
                "ts": pd.to_datetime([s for s, _ in chunk], unit="s", utc=True),
                "_ts_us": [s * S for s, _ in chunk],
                "_wm": wms,
            }
        )
        end = None if seen_max is None else seen_max - BOUND
        result = make(end).run_key(1, frame, state)
        rows += result.rows
        state = result.state
    return rows, state


# -- the Flink example --------------------------------------------------------------------

AVG = (StateSpec("sum", "value", "struct<count:long,sum:long>"),)


def count_window_average(ctx: Any, records: Any) -> Any:
    total = ctx.state("sum")
    for record in ctx.each(records):
        current = total.value() or {"count": 0, "sum": 0}
        current = {"count": current["count"] + 1, "sum": current["sum"] + record.value}
        total.update(current)
        if current["count"] >= 2:
            yield {"key": ctx.key, "average": current["sum"] // current["count"]}
            total.clear()


@pytest.mark.parametrize("cuts", [[], [1], [2], [1, 2, 3, 4], [3], [1, 3]])
def test_count_window_average_under_any_split(cuts: list[int]) -> None:
    events = list(enumerate([3, 5, 7, 4, 2]))
    rows, state = run_epochs(
        lambda end: _program(count_window_average, AVG, ("key", "average"), end_watermark=end),
        events,
        cuts,
    )
    assert rows == [{"key": 1, "average": 4}, {"key": 1, "average": 5}]
    assert state["_s_sum"] == {"count": 1, "sum": 2}


# -- state kinds ----------------------------------------------------------------------------


def test_list_reducing_and_map_state_carry_across_epochs() -> None:
    states = (
        StateSpec("history", "list", "long"),
        StateSpec("total", "reducing", "long", reduce="m:add"),
        StateSpec("parity", "map", "long", key_type="string"),
    )

    def function(ctx: Any, records: Any) -> Any:
        history, total, parity = ctx.state("history"), ctx.state("total"), ctx.state("parity")
        for r in ctx.each(records):
            history.add(r.value)
            total.add(r.value)
            name = "even" if r.value % 2 == 0 else "odd"
            parity.put(name, parity.get(name, 0) + 1)
            yield (r.value, list(history), total.get(), dict(parity.items()))

    def make(end: int | None) -> KeyedProgram:
        return _program(function, states, ("v", "history", "total", "parity"),
                        reducers=(("total", lambda a, b: a + b),), end_watermark=end)  # fmt: skip

    rows, state = run_epochs(make, [(0, 1), (1, 2), (2, 3), (3, 4)], [1, 3])
    assert [r["history"] for r in rows] == [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]
    assert [r["total"] for r in rows] == [1, 3, 6, 10]
    assert rows[-1]["parity"] == {"odd": 2, "even": 2}
    assert state["_s_history"] == [1, 2, 3, 4] and state["_s_total"] == 10
    assert dict(state["_s_parity"]) == {"odd": 2, "even": 2}


def test_map_state_operations() -> None:
    seen: list[Any] = []

    def function(ctx: Any, records: Any) -> None:
        m = ctx.state("m")
        m.put_all({"a": 1, "b": 2})
        m.remove("a")
        seen.extend([m.contains("a"), "b" in m, m.keys(), m.values(), m.is_empty(), m.get("x", 9)])
        m.clear()
        seen.append(m.is_empty())

    program = _program(function, (StateSpec("m", "map", "long", key_type="string"),), ("x",))
    result = program.run_key(1, _frame([(0, 1)]), None)
    assert seen == [False, True, ["b"], [2], False, 9, True]
    assert result.state is None  # nothing left: the key is dropped from the snapshot


# -- TTL ------------------------------------------------------------------------------------


def test_value_state_expires_when_the_watermark_passes_write_time_plus_ttl() -> None:
    """Written at 10 s with a 5 s TTL: visible while the watermark is below 15 s."""
    states = (StateSpec("last", "value", "long", ttl_us=5 * S),)

    def function(ctx: Any, records: Any) -> Any:
        last = ctx.state("last")
        for r in ctx.each(records):
            yield (r.value, last.value())
            if r.value < 100:
                last.update(r.value)

    def make(end: int | None) -> KeyedProgram:
        return _program(function, states, ("v", "before"), end_watermark=end)

    # watermark at each record = previous max - 2 s: none, 8, 14 (< 15: visible), 15 (expired)
    events = [(10, 1), (16, 100), (17, 100), (18, 100)]
    for cuts in ([], [1], [2], [3], [1, 2, 3]):
        rows, state = run_epochs(make, events, cuts)
        assert [r["before"] for r in rows] == [None, 1, 1, None], cuts
        assert state is None, cuts  # expired at the end watermark (16 s): dropped


def test_list_and_map_entries_expire_one_by_one() -> None:
    states = (
        StateSpec("items", "list", "long", ttl_us=5 * S),
        StateSpec("tags", "map", "long", key_type="long", ttl_us=5 * S),
    )

    def function(ctx: Any, records: Any) -> Any:
        items, tags = ctx.state("items"), ctx.state("tags")
        for r in ctx.each(records):
            yield (list(items), sorted(tags.keys()))
            items.add(r.value)
            tags.put(r.value, 1)

    def make(end: int | None) -> KeyedProgram:
        return _program(function, states, ("items", "tags"), end_watermark=end)

    # written at 0, 4, 8; read at watermark 6 (0 + 5 <= 6: the first expired), 10
    rows, state = run_epochs(make, [(0, 1), (4, 2), (8, 3), (12, 4)], [2])
    assert [r["items"] for r in rows] == [[], [1], [1, 2], [2, 3]]
    assert [r["tags"] for r in rows] == [[], [1], [1, 2], [2, 3]]
    assert state["_s_items"] == [3, 4] and state["_t_items"] == [8 * S, 12 * S]


# -- timers ---------------------------------------------------------------------------------


def _session(ctx: Any, records: Any) -> Any:
    """Sums values per burst; a burst ends 5 s after its last record (timer). Value 0 is a
    heartbeat: it only moves the watermark (like other keys' records in a partition)."""
    total = ctx.state("total")
    for r in ctx.each(records):
        if r.value == 0:
            continue
        previous = total.value()
        if previous is not None:
            ctx.timers.delete(previous["end"])
        end = ctx.timestamp + pd.Timedelta(seconds=5)
        total.update({"sum": (previous or {"sum": 0})["sum"] + r.value, "end": end})
        ctx.timers.register(end)
    return None


def _session_end(ctx: Any, when: Any) -> Any:
    total = ctx.state("total")
    yield {"end": when, "sum": total.value()["sum"], "watermark": ctx.watermark}
    total.clear()


SESSION = (StateSpec("total", "value", "struct<sum:long,end:timestamp>"),)


def _make_session(end: int | None) -> KeyedProgram:
    return _program(_session, SESSION, ("end", "sum", "watermark"),
                    on_timer=_session_end, end_watermark=end)  # fmt: skip


SESSION_EVENTS = [(0, 1), (2, 1), (3, 1), (11, 0), (12, 5), (13, 5), (30, 0), (31, 7)]


def test_a_timer_fires_when_the_watermark_reaches_it_before_the_next_record() -> None:
    rows, state = run_epochs(_make_session, SESSION_EVENTS, [])
    sec = [(int(r["end"].timestamp()), r["sum"], int(r["watermark"].timestamp())) for r in rows]
    # burst [0..3] ends at 8: the watermark reaches 8 at the record at 12 (11 - 2 = 9);
    # burst [12, 13] ends at 18: fired before the record at 31 (watermark 28); a timer sees
    # its own time as the watermark. The last burst (ends 36) is still open (watermark 29).
    assert sec == [(8, 3, 8), (18, 10, 18)]
    assert state["_timers"] == [36 * S]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(SESSION_EVENTS) - 1), max_size=5))
def test_timer_output_does_not_depend_on_where_epochs_end(cuts: list[int]) -> None:
    whole, whole_state = run_epochs(_make_session, SESSION_EVENTS, [])
    rows, state = run_epochs(_make_session, SESSION_EVENTS, cuts)
    assert [(r["end"], r["sum"]) for r in rows] == [(r["end"], r["sum"]) for r in whole]
    assert state == whole_state


def test_timers_need_on_timer() -> None:
    def function(ctx: Any, records: Any) -> None:
        ctx.timers.register(0)

    program = _program(function, (), ("x",))
    with pytest.raises(KeyedFunctionError, match="on_timer"):
        program.run_key(1, _frame([(0, 1)]), None)


def test_one_timer_per_time_and_deleted_timers_never_fire() -> None:
    fired: list[int] = []

    def function(ctx: Any, records: Any) -> None:
        for t in (5, 5, 6, 7):
            ctx.timers.register(pd.Timestamp(t * S * 1000, tz="UTC"))
        ctx.timers.delete(6 * S)

    def on_timer(ctx: Any, when: Any) -> None:
        fired.append(int(when.timestamp()))

    program = _program(function, (), ("x",), on_timer=on_timer, end_watermark=10 * S)
    result = program.run_key(1, _frame([(0, 1)]), None)
    assert fired == [5, 7] and result.fired == 2 and result.state is None


# -- errors ---------------------------------------------------------------------------------


def test_a_failing_function_names_pipeline_epoch_key_and_function() -> None:
    def function(ctx: Any, records: Any) -> None:
        raise ZeroDivisionError("boom")

    with pytest.raises(KeyedFunctionError) as info:
        _program(function, (), ("x",)).run_key(("a", 2), _frame([(0, 1)]), None)
    message = str(info.value)
    for part in ("pipeline p", "epoch 1", "key ('a', 2)", "tests:function", "ZeroDivisionError"):
        assert part in message, message


@pytest.mark.parametrize(
    ("emitted", "problem"),
    [
        ([{"y": 1}], "not in process.output"),
        ([(1, 2)], "2 values"),
        ([5], "a row must be a mapping or a tuple"),
    ],
)
def test_rows_that_do_not_fit_the_output_are_refused(emitted: Any, problem: str) -> None:
    program = _program(lambda ctx, records: emitted, (), ("x",))
    with pytest.raises(KeyedFunctionError, match=problem):
        program.run_key(1, _frame([(0, 1)]), None)


def test_unknown_state_names_the_declared_ones() -> None:
    program = _program(lambda ctx, records: ctx.state("nope"), AVG, ("x",))
    with pytest.raises(KeyedFunctionError, match=r"no state named 'nope' \(declared: \['sum'\]\)"):
        program.run_key(1, _frame([(0, 1)]), None)


# -- finding functions ----------------------------------------------------------------------


def test_functions_resolve_from_the_spec_folder_or_the_registry(tmp_path: Any) -> None:
    (tmp_path / "my_functions_mod.py").write_text("def f(ctx, records):\n    return None\n")
    found = resolve("my_functions_mod:f", str(tmp_path), "p", "process.function")
    assert found.__name__ == "f"
    register("named_fn", count_window_average)
    assert resolve("named_fn", None, "p", "process.function") is count_window_average
    with pytest.raises(FunctionNotFound, match="no function 'g'"):
        resolve("my_functions_mod:g", str(tmp_path), "p", "process.function")
    with pytest.raises(FunctionNotFound, match="importing no_such_mod failed"):
        resolve("no_such_mod:f", str(tmp_path), "p", "process.function")
    with pytest.raises(FunctionNotFound, match=r"registered: .*named_fn"):
        resolve("unknown_name", None, "p", "process.function")


def _frame(events: list[tuple[int, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "value": [v for _, v in events],
            "ts": pd.to_datetime([s for s, _ in events], unit="s", utc=True),
            "_ts_us": [s * S for s, _ in events],
            "_wm": [NO_WATERMARK] * len(events),
        }
    )
