"""Input for stateless pipelines and their plain-Python reference over the whole input.

:func:`make_items` gives ``{"NNNN.jsonl": [item, ...]}``: an item is a record (a dict, which
may lack ``ts`` or carry a wrong type) or a raw line (not JSON). Event times go forward with
out-of-order jitter below the watermark bound. Each file holds records that pass
:data:`FILTER`, records it drops (small amounts, ``/health``, null url or amount) and one dead
letter of each kind — a malformed line, a missing ``ts``, a wrong type, a ``code`` on which
:data:`SELECT`'s cast raises; file :data:`DROPPED_ONLY` has no record that passes (an epoch
with no output rows).

:func:`render_jsonl` / :func:`render_parquet` write them (Parquet cannot hold a malformed
line or a wrong type: those items are left out); :func:`reference` says, from the rendered
items alone, what a stateless pipeline with :func:`spec_body` must commit.
"""

from __future__ import annotations

import io
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "DROPPED_ONLY",
    "FILTER",
    "OUTPUT",
    "SCHEMA",
    "SELECT",
    "Reference",
    "make_items",
    "normalised",
    "reference",
    "render_jsonl",
    "render_parquet",
    "spec_body",
    "splits",
]

SCHEMA = {
    "id": "long",
    "user": "string",
    "url": "string",
    "ts": "timestamp",
    "amount": "double",
    "code": "string",
}
SELECT = {
    "cents": "amount * 100",
    "code_num": "cast(code AS INT)",
    "tag": "concat(user, ':', url)",
}
FILTER = "amount > 1 AND url <> '/health'"
OUTPUT = ["id", "tag", "cents", "code_num", "ts"]  # picked and reordered
BOUND_S = 5  # max_out_of_orderness
T0 = datetime(2024, 1, 1, tzinfo=UTC)
DROPPED_ONLY = "0003.jsonl"

Item = dict[str, Any] | str


def make_items(files: int = 5, per_file: int = 24, seed: int = 5) -> dict[str, list[Item]]:
    rng = random.Random(seed)
    ids = iter(range(1, 1_000_000))
    out: dict[str, list[Item]] = {}
    for f in range(files):
        name = f"{f:04d}.jsonl"
        items: list[Item] = []
        for i in range(per_file):
            seconds = (f * per_file + i) * 2.0 - rng.uniform(0, BOUND_S - 1) * (rng.random() < 0.3)
            items.append(_record(rng, next(ids), seconds, passing=name != DROPPED_ONLY))
        base = f * per_file * 2.0
        specials: list[Item] = [
            '{"id": 0, "user": "u1", "ts": ',  # malformed
            {**_record(rng, next(ids), base + 1, passing=True), "ts": None},  # no event time
            {**_record(rng, next(ids), base + 2, passing=True), "amount": "lots"},  # wrong type
            {**_record(rng, next(ids), base + 3, passing=True), "code": "x1"},  # cast raises
            {**_record(rng, next(ids), base + 4, passing=False), "code": "x2"},  # dead first
        ]
        for special in specials:
            items.insert(rng.randrange(len(items) + 1), special)
        out[name] = items
    return out


def _record(rng: random.Random, id_: int, seconds: float, *, passing: bool) -> dict[str, Any]:
    url = rng.choice(["/a", "/b", "/c"])
    amount: float | None = round(rng.uniform(1.5, 50), 2)
    code: str | None = str(rng.randrange(100)) if rng.random() > 0.1 else None
    if not passing or rng.random() < 0.25:  # filtered: each way the predicate can fail
        how = rng.randrange(4)
        url = {1: "/health", 3: None}.get(how, url)
        amount = {0: round(rng.uniform(0, 1), 2), 2: None}.get(how, amount)
    ts = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    user = f"u{rng.randrange(5)}"
    return {"id": id_, "user": user, "url": url, "ts": ts, "amount": amount, "code": code}


def render_jsonl(items: dict[str, list[Item]], folder: Path) -> dict[str, list[Item]]:
    """Write one JSON-lines file per entry; returns what was written (all of it)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in items.items():
        text = "\n".join(i if isinstance(i, str) else json.dumps(i) for i in lines)
        (folder / name).write_text(text + "\n")
    return items


def render_parquet(items: dict[str, list[Item]], folder: Path) -> dict[str, list[Item]]:
    """Write one typed Parquet file per entry (``.parquet``); returns the items written:
    the records whose values fit the schema's types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([
        ("id", pa.int64()), ("user", pa.string()), ("url", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")), ("amount", pa.float64()), ("code", pa.string()),
    ])  # fmt: skip
    written: dict[str, list[Item]] = {}
    for name, lines in items.items():
        kept = [i for i in lines if isinstance(i, dict) and not isinstance(i["amount"], str)]
        rows = [{**r, "ts": _ts(r["ts"])} for r in kept]
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer)
        parquet_name = name.replace(".jsonl", ".parquet")
        (folder / parquet_name).write_bytes(buffer.getvalue())
        written[parquet_name] = list(kept)
    return written


def _ts(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).replace(tzinfo=UTC)


def spec_body(root: Path, fmt: str = "jsonl", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "stateless",
        "source": {"type": "files", "path": str(root / "in"), "format": fmt, "schema": {**SCHEMA}},
        "event_time": {"column": "ts", "max_out_of_orderness": f"{BOUND_S}s"},
        "select": dict(SELECT),
        "filter": FILTER,
        "output": list(OUTPUT),
        "sinks": [{"name": "out", "type": "files", "path": str(root / "out"), "format": "parquet"}],
        "late_records": {"type": "files", "path": str(root / "late"), "format": "jsonl"},
        "dead_letters": {"type": "files", "path": str(root / "dead"), "format": "jsonl"},
        "checkpoint": {"storage": str(root / "ckpt")},
    }
    body.update(overrides)
    return body


@dataclass
class Reference:
    rows: list[tuple[Any, ...]] = field(default_factory=list)  # output columns, in order
    dead: list[tuple[str, int, str]] = field(default_factory=list)  # (file, line, code)
    read: int = 0
    filtered: int = 0
    max_valid_us: int | None = None  # newest event time of a record that is not dead

    @property
    def accepted(self) -> int:
        return len(self.rows)

    @property
    def watermark_us(self) -> int | None:
        return None if self.max_valid_us is None else self.max_valid_us - BOUND_S * 1_000_000


def reference(
    written: dict[str, list[Item]], output: list[str], *, filtered: bool = True
) -> Reference:
    """What the pipeline must commit over ``written`` (file name -> items in line order);
    ``filtered``: under :data:`FILTER` (else without a filter)."""
    ref = Reference()
    for name in sorted(written):
        for line, item in enumerate(written[name], start=1):
            ref.read += 1
            _classify(ref, name, line, item, output, filtered)
    return ref


def _classify(
    ref: Reference, name: str, line: int, item: Item, output: list[str], filtered: bool
) -> None:
    if isinstance(item, str):
        ref.dead.append((name, line, "malformed"))
        return
    if item["ts"] is None:
        ref.dead.append((name, line, "missing_event_time"))
        return
    if isinstance(item["amount"], str):
        ref.dead.append((name, line, "wrong_type"))
        return
    code = item["code"]
    if code is not None and not re.fullmatch(r"[0-9]+", code):
        ref.dead.append((name, line, "expression_failed"))  # select.code_num
        return
    ts = _ts(item["ts"])
    assert ts is not None
    micros = (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    ref.max_valid_us = max(ref.max_valid_us or micros, micros)
    amount, url = item["amount"], item["url"]
    passes = amount is not None and amount > 1 and url is not None and url != "/health"
    if filtered and not passes:
        ref.filtered += 1
        return
    derived = {
        **item,
        "ts": ts,
        "cents": None if amount is None else amount * 100,
        "code_num": None if code is None else int(code),
        "tag": None if url is None else f"{item['user']}:{url}",
    }
    ref.rows.append(tuple(derived[c] for c in output))


def normalised(value: Any) -> Any:
    """A committed value as the reference has it (Spark may write naive UTC timestamps)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def splits(names: list[str], seed: int = 3) -> dict[str, list[int]]:
    """Epoch sizes (files per epoch): one epoch, one file per epoch, random cuts."""
    rng = random.Random(seed)
    cuts = sorted(set(rng.sample(range(1, len(names)), 2)) | {0, len(names)})
    return {
        "one_epoch": [len(names)],
        "file_per_epoch": [1] * len(names),
        "random": [b - a for a, b in itertools.pairwise(cuts)],
    }
