"""Inputs, independent references and specs for the keyed-function tests."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from sluice.sinks.files import read_rows
from sluice.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000
SPLITS = {
    "one_epoch": None,
    "file_per_epoch": 1,
    "random": lambda n: random.Random(n).randint(1, 3),
}

# -- count_window_average -----------------------------------------------------------------

CWA_VALUES = {1: [3, 5, 7, 4, 2], 2: [10, 20, 30], 3: [1, 1, 1, 1, 9, 9]}


def cwa_files() -> list[tuple[str, str]]:
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


def cwa_expected() -> Counter[tuple[int, int]]:
    expected: Counter[tuple[int, int]] = Counter()
    for key, values in CWA_VALUES.items():
        for a, b in zip(values[0::2], values[1::2], strict=False):
            expected[(key, (a + b) // 2)] += 1
    return expected


# -- every state kind, TTL and timers -------------------------------------------------------

BOUND_S = 3
LAST_TTL_S, TAGS_TTL_S = 20, 30


def kinds_events(seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    events = []
    clock = 0
    for _ in range(120):
        clock += rnd.choice([0, 1, 1, 2, 4, 9])
        second = max(0, clock - rnd.choice([0, 0, 0, 1, 2]))  # out of order within the bound
        events.append({"user": rnd.choice("abc"), "value": rnd.randint(1, 30),
                       "tag": rnd.choice("xyz"), "second": second})  # fmt: skip
    return events


def kinds_files(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
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


def kinds_reference(events: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
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


def kinds_spec(tmp_path: Path) -> Path:
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


def kinds_rows(spec: Any) -> Counter[tuple[Any, ...]]:
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
