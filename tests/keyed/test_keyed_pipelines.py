"""Keyed process functions in Spark, against independent references, across epochs.

* ``count_window_average`` — the shipped spec (include/pipelines/) and Flink's example: key 1
  with values 3, 5, 7, 4, 2 gives exactly (1, 4) and (1, 5), whatever the epoch split;
* ``kinds`` — every state kind (value with TTL, list, reducing, map with TTL) and event-time
  timers over three keys: the committed output under any split equals a plain-Python
  simulation of the whole stream record by record (the semantics docs/keyed-state.md states);
* a function that raises stops the epoch naming the key; a changed state declaration is
  refused naming the state.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice.keyed.operator import ProcessFunctionFailed
from sluice.protocol import run_until_drained
from sluice.protocol.exceptions import SpecChanged
from sluice.sinks.files import read_rows
from sluice.spec import load_spec
from sluice.storage import open_store

from tests.fixtures.pipelines import runtime

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000
SPLITS = {
    "one_epoch": None,
    "file_per_epoch": 1,
    "random": lambda n: random.Random(n).randint(1, 3),
}

# -- count_window_average -----------------------------------------------------------------

CWA_VALUES = {1: [3, 5, 7, 4, 2], 2: [10, 20, 30], 3: [1, 1, 1, 1, 9, 9]}


def _cwa_files() -> list[tuple[str, str]]:
    """Keys interleaved over 5 files; each key's values stay in order."""
    rows = []
    queues = {k: list(v) for k, v in CWA_VALUES.items()}
    second = 0
    while any(queues.values()):
        for key, queue in queues.items():
            if queue:
                rows.append(
                    {"key": key, "value": queue.pop(0), "ts": f"2024-01-01T00:00:{second:02d}"}
                )
                second += 1
    per_file = -(-len(rows) // 5)
    return [
        (
            f"{i:02d}.jsonl",
            "\n".join(json.dumps(r) for r in rows[i * per_file : (i + 1) * per_file]),
        )
        for i in range(5)
    ]


def _cwa_expected() -> Counter[tuple[int, int]]:
    expected: Counter[tuple[int, int]] = Counter()
    for key, values in CWA_VALUES.items():
        for a, b in zip(values[0::2], values[1::2], strict=False):
            expected[(key, (a + b) // 2)] += 1
    return expected


@pytest.fixture
def cwa(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SLUICE_DATA", str(tmp_path))
    (tmp_path / "in").mkdir()
    for name, text in _cwa_files():
        (tmp_path / "in" / name).write_text(text + "\n")
    return load_spec(ROOT / "include" / "pipelines" / "count_window_average.yaml")


@pytest.mark.parametrize("split", SPLITS)
def test_count_window_average_equals_flinks_output_under_any_split(
    spark: Any, cwa: Any, split: str
) -> None:
    rt = runtime(cwa)
    outcomes = run_until_drained(rt, spark, max_units=SPLITS[split])
    rows = read_rows(open_store(cwa.sinks[0].path), "parquet")
    assert Counter((r["key"], r["average"]) for r in rows) == _cwa_expected()
    assert sorted(r["average"] for r in rows if r["key"] == 1) == [4, 5]
    last = outcomes[-1].checkpoint.result.stats
    assert last.windows_open == 2  # keys 1 (value 2) and 2 (value 30) hold a half-full count
    state = spark.read.parquet(outcomes[-1].checkpoint.result.state.uri).collect()
    assert {r["key"]: r["_s_sum"].asDict() for r in state} == {
        1: {"count": 1, "sum": 2},
        2: {"count": 1, "sum": 30},
    }


# -- every state kind, TTL and timers -------------------------------------------------------

BOUND_S = 3
LAST_TTL_S, TAGS_TTL_S = 20, 30


def _kinds_events(seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    events = []
    clock = 0
    for _ in range(120):
        clock += rnd.choice([0, 1, 1, 2, 4, 9])
        second = max(0, clock - rnd.choice([0, 0, 0, 1, 2]))  # out of order within the bound
        events.append({"user": rnd.choice("abc"), "value": rnd.randint(1, 30),
                       "tag": rnd.choice("xyz"), "second": second})  # fmt: skip
    return events


def _kinds_files(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    lines = [
        json.dumps(
            {
                "user": e["user"],
                "value": e["value"],
                "tag": e["tag"],
                "ts": datetime.fromtimestamp(e["second"], UTC).isoformat(),
            }
        )
        for e in events
    ]
    lines.insert(17, '{"user": "a", "value": ')  # a dead letter
    return [(f"{i:02d}.jsonl", "\n".join(lines[i * 11 : (i + 1) * 11])) for i in range(11)]


@dataclass
class _Key:
    last: tuple[int, int] | None = None  # (value, written at)
    history: list[int] = field(default_factory=list)
    total: int | None = None
    tags: dict[str, tuple[int, int]] = field(default_factory=dict)
    timers: set[int] = field(default_factory=set)


def _kinds_reference(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Record by record over the whole stream: timers fire before a key's record once the
    watermark at its position reaches them (seeing their own time as the watermark), the
    rest at the end; TTL entries are visible while written + ttl > watermark."""
    keys: dict[str, _Key] = {}
    out: Counter[tuple[Any, ...]] = Counter()
    seen_max: int | None = None

    def visible(stamp: int, ttl: int, wm: int | None) -> bool:
        return wm is None or stamp + ttl > wm

    def fire(user: str, k: _Key, wm: int | None) -> None:
        while wm is not None and k.timers and min(k.timers) <= wm:
            t = min(k.timers)
            k.timers.remove(t)
            last = k.last[0] if k.last and visible(k.last[1], LAST_TTL_S, t) else None
            out[(user, "timer", t, None, last, len(k.history), k.total, None)] += 1
            if len(k.history) > 5:
                k.history = []

    for e in events:
        user, t = e["user"], e["second"]
        wm = None if seen_max is None else seen_max - BOUND_S
        seen_max = t if seen_max is None else max(seen_max, t)
        k = keys.setdefault(user, _Key())
        fire(user, k, wm)
        before = k.last[0] if k.last and visible(k.last[1], LAST_TTL_S, wm) else None
        k.last = (e["value"], t)
        k.history.append(e["value"])
        k.total = (k.total or 0) + e["value"]
        old = k.tags.get(e["tag"])
        count = old[0] if old and visible(old[1], TAGS_TTL_S, wm) else 0
        k.tags[e["tag"]] = (count + 1, t)
        k.timers.add(t + 10)
        if e["value"] % 7 == 0:
            k.timers.discard(t + 10)
        out[(user, "record", t, e["value"], before, len(k.history), k.total, count + 1)] += 1
    final = None if seen_max is None else seen_max - BOUND_S
    for user, k in keys.items():
        fire(user, k, final)
    return out


def _kinds_spec(tmp_path: Path) -> Path:
    shutil.copy(Path(__file__).with_name("kinds.py"), tmp_path / "kinds.py")
    root = tmp_path.as_uri()
    body = {
        "name": "kinds",
        "source": {
            "type": "files",
            "path": f"{root}/in",
            "format": "jsonl",
            "schema": {"user": "string", "value": "long", "tag": "string", "ts": "timestamp"},
        },
        "event_time": {"column": "ts", "max_out_of_orderness": f"{BOUND_S}s"},
        "key_by": ["user"],
        "process": {
            "function": "kinds:process",
            "on_timer": "kinds:on_timer",
            "state": {
                "last": {"kind": "value", "type": "long", "ttl": f"{LAST_TTL_S}s"},
                "history": {"kind": "list", "type": "long"},
                "total": {"kind": "reducing", "type": "long", "reduce": "kinds:add"},
                "tags": {
                    "kind": "map",
                    "key_type": "string",
                    "type": "long",
                    "ttl": f"{TAGS_TTL_S}s",
                },
            },
            "output": {
                "user": "string",
                "kind": "string",
                "at": "timestamp",
                "value": "long",
                "last": "long",
                "n": "long",
                "total": "long",
                "tag_count": "long",
            },
        },
        "sinks": [{"name": "out", "type": "files", "path": f"{root}/out"}],
        "checkpoint": {"storage": f"{root}/ckpt"},
    }
    path = tmp_path / "kinds.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def _kinds_rows(spec: Any) -> Counter[tuple[Any, ...]]:
    rows = read_rows(open_store(spec.sinks[0].path), "parquet")

    def second(ts: datetime) -> int:
        return int(ts.replace(tzinfo=UTC).timestamp()) if ts.tzinfo is None else int(ts.timestamp())

    return Counter(
        (
            r["user"],
            r["kind"],
            second(r["at"]),
            r["value"],
            r["last"],
            r["n"],
            r["total"],
            r["tag_count"],
        )
        for r in rows
    )


@pytest.fixture
def kinds(tmp_path: Path) -> Any:
    events = _kinds_events()
    (tmp_path / "in").mkdir()
    for name, text in _kinds_files(events):
        (tmp_path / "in" / name).write_text(text + "\n")
    return load_spec(_kinds_spec(tmp_path)), _kinds_reference(events)


@pytest.mark.parametrize("split", SPLITS)
def test_every_state_kind_ttl_and_timers_equal_the_reference_under_any_split(
    spark: Any, kinds: Any, split: str
) -> None:
    spec, expected = kinds
    rt = runtime(spec)
    outcomes = run_until_drained(rt, spark, max_units=SPLITS[split])
    got = _kinds_rows(spec)
    assert sum(1 for k in expected if k[1] == "timer") > 10  # the test exercises timers
    assert got == expected, (got - expected, expected - got)
    stats = [o.checkpoint.result.stats for o in outcomes]
    assert sum(s.dead for s in stats) == 1
    assert all(s.records_read == s.accepted + s.dead + s.filtered for s in stats)


def test_a_failing_function_stops_the_epoch_naming_the_key(
    spark: Any, kinds: Any, tmp_path: Path
) -> None:
    spec, _ = kinds
    (tmp_path / "kinds.py").write_text(
        (tmp_path / "kinds.py").read_text()
        + "\n\ndef broken(ctx, records):\n"
        + "    if ctx.key == 'b':\n        raise ValueError('no b')\n"
    )
    spec = load_spec(
        _rewrite(tmp_path / "kinds.yaml", lambda b: b["process"].update(function="kinds:broken"))
    )
    rt = runtime(spec)
    with pytest.raises(
        ProcessFunctionFailed,
        match=r"pipeline kinds, epoch 1, key 'b': kinds:broken: ValueError: no b",
    ):
        run_until_drained(rt, spark)
    assert rt.repo.latest_epoch() == 0
    assert [a.status.value for a in rt.repo.attempts(1)] == ["failed"]


def test_restoring_under_a_changed_state_declaration_names_the_state(
    spark: Any, kinds: Any, tmp_path: Path
) -> None:
    spec, _ = kinds
    run_until_drained(runtime(spec), spark, max_epochs=1, max_units=2)

    def change(body: dict[str, Any]) -> None:
        body["process"]["state"]["history"]["type"] = "string"

    changed = load_spec(_rewrite(tmp_path / "kinds.yaml", change))
    with pytest.raises(SpecChanged) as info:
        run_until_drained(runtime(changed), spark)
    assert "state.history: stored 'list<long>', spec now 'list<string>'" in str(info.value)


def _rewrite(path: Path, change: Any) -> Path:
    body = yaml.safe_load(path.read_text())
    change(body)
    path.write_text(yaml.safe_dump(body))
    return path
