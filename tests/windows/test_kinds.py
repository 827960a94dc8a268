"""sluice.windows.kinds: every window config class the spec registers has a strategy; a
strategy is built from its config and a few pipeline values (never the spec); the state
columns each kind keeps are the stored shape checkpoints already hold."""

from __future__ import annotations

from typing import Any

import pytest
from sluice.spec import parse_spec
from sluice.spec.registry import WINDOWS
from sluice.windows.kinds import KINDS, CappedSession, Counted, Session, Sliding, kind_of

PARTIALS = ["_p_n_n", "_p_total_s", "_p_total_n"]


def spec(window: dict[str, Any], emit: str = "on_close") -> Any:
    mode = {"mode": "upsert"} if emit == "on_update" else {}
    return parse_spec({
        "name": "w", "source": {"type": "files", "path": "/in", "format": "jsonl",
                                "schema": {"ts": "timestamp", "k": "string", "amount": "double"}},
        "event_time": {"column": "ts", "allowed_lateness": "2s"},
        "key_by": ["k"], "window": window, "emit": emit,
        "aggregates": {"n": "count(*)", "total": "sum(amount)"},
        "sinks": [{"name": "out", "type": "files", "path": "/out", **mode}],
        "checkpoint": {"storage": "/ckpt"},
    })  # fmt: skip


def test_every_registered_window_type_has_a_strategy() -> None:
    assert set(WINDOWS.types.values()) == set(KINDS)


@pytest.mark.parametrize(
    ("window", "strategy", "state"),
    [
        ({"type": "tumbling", "size": "1m"}, Sliding, ["k", "_ws", "_we", *PARTIALS]),
        (
            {"type": "hopping", "size": "1m", "slide": "20s"},
            Sliding,
            ["k", "_ws", "_we", *PARTIALS],
        ),
        ({"type": "session", "gap": "10s"}, Session, ["k", "_ws", "_we", *PARTIALS]),
        (
            {"type": "session", "gap": "10s", "max_duration": "30s"},
            CappedSession,
            ["k", "_ws", "_we", "_cell", "_stub", *PARTIALS],
        ),
        (
            {"type": "count", "count": 5, "slide": 2},
            Counted,
            ["k", "_wi", "_ws", "_we", "_cnt", *PARTIALS],
        ),
    ],
)
def test_each_kind_keeps_the_stored_state_shape(
    window: dict[str, Any], strategy: type, state: list[str]
) -> None:
    s = spec(window)
    kind = kind_of(s)
    assert type(kind) is strategy
    assert kind.window is s.windowing
    assert not hasattr(kind, "spec")
    assert kind.state_columns() == state
    assert (kind.keys, kind.lateness_us, kind.emit) == (["k"], 2_000_000, "on_close")


@pytest.mark.parametrize("emit", ["on_close", "on_update"])
def test_what_each_kind_answers(emit: str) -> None:
    """The questions the epoch asks instead of switching on the kind."""
    windows: dict[str, dict[str, Any]] = {
        "tumbling": {"type": "tumbling", "size": "1m"},
        "session": {"type": "session", "gap": "10s"},
        "capped": {"type": "session", "gap": "10s", "max_duration": "30s"},
        "count": {"type": "count", "count": 5},
    }
    answers = {}
    for name, window in windows.items():
        kind = kind_of(spec(window, emit))
        answers[name] = (
            kind.incremental,
            kind.merges_across_epochs,
            kind.deletes_replaced,
            kind.uses_window_index,
            kind.lateness() is None,
        )
    on_update = emit == "on_update"
    assert answers == {
        "tumbling": (True, False, False, not on_update, False),
        "session": (True, True, on_update, False, False),
        "capped": (False, True, on_update, False, False),
        "count": (False, False, False, False, True),
    }
