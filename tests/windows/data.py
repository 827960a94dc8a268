"""Deterministic click-stream input for a ``files`` source with ``partition_by: directory``.

:func:`make_files` returns ``{"<partition>/<NNNN>.jsonl": text}``. Every partition has a file
``0001.jsonl`` (no partition starts late) and file names are zero-padded counters, so reading
in the order (name inside partition, partition) — :func:`FILE_ORDER` — interleaves the
partitions like concurrent streams. Records are JSON objects
``{"user": str, "url": str, "ts": "2024-01-01T00:01:02.345678", "amount": float | null}``
(schema :data:`SCHEMA`).

Time line. File ``k`` (0-based) of a partition holds ``records_per_file`` "normal" records
whose event times are stratified over ``[start + k*span, start + (k+1)*span)`` (``span`` =
``seconds_per_file``), in increasing order, except that ~15 % of them are moved back by less
than ``max_out_of_orderness`` (out of order, but not behind the watermark). Because every file
ends within ``span / records_per_file`` of its upper bound, the newest event times of two
active partitions differ by less than ``2 * span`` wherever the input is cut at a file
boundary; choose ``idle_timeout`` at least that (the default ``"1m"`` with ``span = 30 s``).

Deliberate features (the watermark meant is the partition's ``W(r)`` for the given
``max_out_of_orderness_s`` and ``allowed_lateness_s``; the special records only go to the
active partitions):

* allowed-late records: ``W(r) - 0.8 L < t < W(r) - 0.2 L`` — behind the watermark, accepted
  by tumbling/hopping/session windows of any size (``L`` = allowed lateness);
* too-late records: ``t < W(r) - L - max_window_s`` — late for sessions and for tumbling or
  hopping windows no longer than ``max_window_s``; at least one per active partition (one is
  aimed at the last quarter of its last file, others land in earlier files when there is
  room);
* ties: a record with the same user and exactly the same event time as the record before it
  (pins ``first``/``last`` tie-breaking by position);
* dead letters, one of each kind somewhere in the active partitions: a line that is not JSON,
  a JSON array, a truncated object, a missing ``ts``, a null ``ts``, an unparseable ``ts``,
  ``"amount": "abc"`` (plus a blank line, which is not a record);
* session bridging (user :data:`BRIDGE_USER`, first active partition): two bursts of three
  records whose gap is ``1.5 * session_gap_s`` (two sessions), then, once the watermark has
  passed it, an allowed-late record in the middle that overlaps both, merging them;
* the idle partition only has files ``0001`` … ``idle_files`` (no empty files are written),
  so its newest event time ends far behind: with ``idle_timeout`` the final global watermark
  moves past it; without it the idle partition holds the watermark back.

Use :func:`epoch_splits` for ways of cutting :func:`FILE_ORDER` into consecutive epochs; the
first epoch always holds every partition's first file, so no partition is "new" after the
first epoch (the doc's one source of split dependence besides returning idle partitions).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tests.windows.reference import read_order

__all__ = [
    "BRIDGE_USER",
    "EVENT_TIME",
    "FILE_ORDER",
    "SCHEMA",
    "describe",
    "epoch_splits",
    "file_name",
    "make_files",
]

SCHEMA = {"user": "string", "url": "string", "ts": "timestamp", "amount": "double"}
# The event_time block the defaults of make_files are designed for.
EVENT_TIME = {
    "column": "ts",
    "max_out_of_orderness": "5s",
    "allowed_lateness": "30s",
    "idle_timeout": "1m",
}
BRIDGE_USER = "bridge"
URLS = ("/", "/search", "/cart", "/checkout", "/item/1", "/item/2", "/item/3")
_US = 1_000_000
_DEAD_LINES = (
    "this is not json",
    "[1, 2, 3]",
    '{"user": "u1", "url": "/cart", "ts": "2024-01-01T00:0',
    '{"user": "u2", "url": "/", "amount": 1.5}',
    '{"user": "u3", "url": "/", "ts": null, "amount": 2.5}',
    '{"user": "u4", "url": "/", "ts": "yesterday", "amount": 3.5}',
    '{"user": "u5", "url": "/", "ts": "{ts}", "amount": "abc"}',
)


def file_name(index: int) -> str:
    """The name of a partition's ``index``-th file (1-based): ``0001.jsonl``."""
    return f"{index:04d}.jsonl"


def FILE_ORDER(keys: Iterable[str]) -> list[str]:
    """``keys`` sorted by (name inside partition, partition): the files source's read order."""
    return read_order(keys, "directory")


@dataclass
class _Bridge:
    """The session-bridging pattern of one partition (times in µs from ``start``)."""

    bursts: list[int]
    bridge: int
    written: int = 0  # burst records written so far
    done: bool = False

    @staticmethod
    def plan(span: int, gap: int) -> _Bridge:
        """Bursts of 3 records 0.2 gap apart, 1.5 gap between them; bridge in the middle."""
        step = gap // 5
        first1 = span + span // 10
        last1 = first1 + 2 * step
        first2 = last1 + gap + gap // 2
        bursts = [first1, first1 + step, last1, first2, first2 + step, first2 + 2 * step]
        # [bridge, bridge + gap) overlaps [first1, last1 + gap) and [first2, last2 + gap).
        return _Bridge(bursts, last1 + (3 * gap) // 4)


@dataclass
class _Partition:
    """One partition's stream being written (times in µs from ``start``)."""

    name: str
    rng: random.Random
    start_us: int
    newest: int | None = None  # newest valid event time so far
    files: list[list[str]] = field(default_factory=list)
    allowed_late: int = 0
    too_late: int = 0

    def watermark(self, bound: int) -> int | None:
        return None if self.newest is None else self.newest - bound

    def write(self, user: str, t: int, *, url: str | None = None) -> None:
        rng = self.rng
        amount = None if rng.random() < 0.1 else round(rng.uniform(0.5, 100.0), 2)
        record = {
            "user": user,
            "url": url or rng.choice(URLS),
            "ts": _iso(self.start_us, t),
            "amount": amount,
        }
        self.files[-1].append(json.dumps(record))
        self.newest = t if self.newest is None else max(self.newest, t)

    def write_file(
        self,
        lo: int,
        span: int,
        n: int,
        *,
        users: list[str],
        special: bool,
        last: bool,
        bound: int,
        lateness: int,
        too_late_margin: int,
        bridge: _Bridge | None,
        dead_lines: list[str],
    ) -> None:
        """One file: ``n`` normal records stratified over ``[lo, lo + span)`` plus extras."""
        rng = self.rng
        normal = [lo + (i * span + rng.randrange(span)) // n for i in range(n)]
        bursts = [t for t in (bridge.bursts if bridge else []) if lo <= t < lo + span]
        events = sorted([(t, False) for t in normal] + [(t, True) for t in bursts])
        size = len(events)
        late_slots = set(rng.sample(range(size), 2)) if special and lo > 0 else set()
        too_late_slots: set[int] = set()
        if special and last:
            too_late_slots.add(size - 1 - rng.randrange(size // 4))
        elif special and rng.random() < 0.5:
            too_late_slots.add(rng.randrange(size))
        dead_slots: dict[int, list[str]] = {}
        for line in dead_lines:
            dead_slots.setdefault(rng.randrange(size), []).append(line)
        for slot, (t, is_burst) in enumerate(events):
            if is_burst:
                assert bridge is not None
                self.write(BRIDGE_USER, t)
                bridge.written += 1
            else:
                if special and self.newest is not None and rng.random() < 0.15:
                    # out of order, but not behind the watermark: W(r) < t < newest
                    t = self.newest - rng.randrange(bound // 10 + 1, max(bound * 9 // 10, 2))
                user = rng.choice(users)
                self.write(user, t)
                if special and rng.random() < 0.05:  # a tie: same user, same event time
                    self.write(user, t)
            w = self.watermark(bound)
            assert w is not None
            if (
                bridge is not None
                and not bridge.done
                and bridge.written == len(bridge.bursts)
                and bridge.bridge + _US < w < bridge.bridge + lateness - _US
            ):
                self.write(BRIDGE_USER, bridge.bridge, url="/bridge")
                bridge.done = True
            if slot in late_slots:
                t_late = w - rng.randrange(lateness // 5 + 1, lateness * 4 // 5)
                if t_late >= 0:
                    self.write(rng.choice(users), t_late)
                    self.allowed_late += 1
            if slot in too_late_slots:
                t_late = w - too_late_margin - rng.randrange(5 * _US)
                if t_late >= 0:
                    self.write(rng.choice(users), t_late)
                    self.too_late += 1
            for line in dead_slots.get(slot, []):
                self.files[-1].append(line.replace("{ts}", _iso(self.start_us, t)))


def _iso(start_us: int, t: int) -> str:
    moment = datetime(1970, 1, 1) + timedelta(microseconds=start_us + t)
    return moment.isoformat(timespec="microseconds")


def make_files(
    seed: int,
    *,
    partitions: Sequence[str] = ("a", "b", "c"),
    idle_partition: str | None = "c",
    files_per_partition: int = 6,
    records_per_file: int = 40,
    idle_files: int = 1,
    start: datetime = datetime(2024, 1, 1),
    seconds_per_file: float = 30.0,
    users: int = 5,
    max_out_of_orderness_s: float = 5.0,
    allowed_lateness_s: float = 30.0,
    session_gap_s: float = 10.0,
    max_window_s: float = 60.0,
) -> dict[str, str]:
    """JSON-lines files ``{"<partition>/<NNNN>.jsonl": text}``; same arguments, same text.

    See the module docstring for the time line and the deliberate features. Raises
    ValueError when the arguments leave no room for them (e.g. too little event time for a
    record to be ``allowed_lateness_s + max_window_s`` behind the watermark).
    """
    if not partitions or len(set(partitions)) != len(partitions):
        raise ValueError("partitions must be distinct and non-empty")
    if idle_partition is not None and idle_partition not in partitions:
        raise ValueError(f"idle partition {idle_partition!r} is not in {partitions}")
    active = [p for p in partitions if p != idle_partition]
    if not active:
        raise ValueError("at least one partition must be active")
    if not 1 <= idle_files < files_per_partition:
        raise ValueError("need 1 <= idle_files < files_per_partition")
    if records_per_file < 4 or users < 1:
        raise ValueError("need records_per_file >= 4 and users >= 1")
    if allowed_lateness_s <= 2 or session_gap_s <= 0 or max_out_of_orderness_s <= 0:
        raise ValueError("need allowed_lateness_s > 2 and positive gap and out-of-orderness")
    span = round(seconds_per_file * _US)
    bound = round(max_out_of_orderness_s * _US)
    lateness = round(allowed_lateness_s * _US)
    gap = round(session_gap_s * _US)
    too_late_margin = lateness + round(max_window_s * _US) + _US  # how far behind W(r)
    rng = random.Random(seed)
    start_us = (start - datetime(1970, 1, 1)) // timedelta(microseconds=1)
    user_names = [f"u{i}" for i in range(1, users + 1)]
    dead_spots = [
        (rng.choice(active), rng.randrange(files_per_partition)) for _ in range(len(_DEAD_LINES))
    ]
    blank_spot = (rng.choice(active), rng.randrange(files_per_partition))

    out: dict[str, str] = {}
    for name in partitions:
        part = _Partition(name, random.Random(rng.getrandbits(64)), start_us)
        is_idle = name == idle_partition
        n_files = idle_files if is_idle else files_per_partition
        bridge = _Bridge.plan(span, gap) if name == active[0] else None
        for k in range(n_files):
            part.files.append([])
            part.write_file(
                k * span,
                span,
                records_per_file,
                users=user_names,
                special=not is_idle,
                last=k == n_files - 1,
                bound=bound,
                lateness=lateness,
                too_late_margin=too_late_margin,
                bridge=bridge,
                dead_lines=[
                    line
                    for line, spot in zip(_DEAD_LINES, dead_spots, strict=True)
                    if spot == (name, k)
                ],
            )
            if (name, k) == blank_spot:
                part.files[-1].insert(len(part.files[-1]) // 2, "")
        if bridge is not None and not bridge.done:
            raise ValueError("no room for the session-bridging records; add files or span")
        if not is_idle and (part.allowed_late == 0 or part.too_late == 0):
            raise ValueError(
                f"no room for allowed-late / too-late records in partition {name!r}; "
                "add files or span"
            )
        for k, lines in enumerate(part.files):
            out[f"{name}/{file_name(k + 1)}"] = "\n".join(lines) + "\n"
    return dict(sorted(out.items()))


def epoch_splits(keys: Iterable[str], seed: int, *, count: int = 3) -> list[list[list[str]]]:
    """``count`` ways of cutting ``FILE_ORDER(keys)`` into consecutive epochs (lists of keys).

    Every split's first epoch holds at least the first "round" (every partition's first
    file), so that no partition is new after the first epoch; concatenating a split's epochs
    gives ``FILE_ORDER(keys)``. The first split is the finest (the first round, then one file
    per epoch), the others cut at random places. Deterministic in ``seed``.
    """
    order = FILE_ORDER(keys)
    if not order:
        return [[] for _ in range(count)]
    first_name = order[0].split("/", 1)[-1]
    head = [k for k in order if k.split("/", 1)[-1] == first_name]
    rest = order[len(head) :]
    n = len(rest)
    rng = random.Random(seed)
    splits: list[list[list[str]]] = []
    for i in range(count):
        if i == 0:
            cuts = list(range(n + 1))
        else:
            cuts = sorted(set(rng.sample(range(n + 1), rng.randint(0, n))) | {n})
        epochs = [head + rest[: cuts[0]]]
        epochs += [rest[a:b] for a, b in itertools.pairwise(cuts)]
        splits.append(epochs)
    return splits


def describe(files: dict[str, str]) -> dict[str, Any]:
    """Counts per partition (files, non-blank lines), for debugging."""
    out: dict[str, Any] = {}
    for key, text in files.items():
        p = key.split("/", 1)[0]
        entry = out.setdefault(p, {"files": 0, "lines": 0})
        entry["files"] += 1
        entry["lines"] += sum(1 for line in text.split("\n") if line.strip())
    return out
