"""Deterministic demo input: JSON-lines click files with disorder, late records and bad lines,
and the sensor readings of the ``count_window_average`` example (:func:`render_reading_files`).

Used by ``make run``, ``make airflow``, ``docker/seed_demo.py`` and by the tests. Everything
derives from ``random.Random(seed)``; no global random state and no clock, so the same arguments
always give the same bytes.

Each file holds exactly ``events_per_file`` lines (plus a trailing newline). A line is one of:

* a valid click ``{"user": "u07", "url": "/products/12", "ts": "...Z", "amount": 12.5}``
  (``amount`` is occasionally ``null``). Event time is in ``[start + i*seconds_per_file,
  start + (i+1)*seconds_per_file)`` for file ``i``, shuffled by up to ``jitter_s`` seconds,
  and never more than ``jitter_s`` behind the maximum event time of the valid lines before it;
* a LATE valid click (one per block of ``late_every`` lines), 70–150 s behind that running
  maximum, so with a 1-minute tumbling window, a bound of 5 s (>= ``jitter_s``) and no
  allowed lateness it always misses its window;
* a malformed line (one per block of ``malformed_every`` lines), cycling through
  :data:`MALFORMED_KINDS`. The ``"blank"`` kind is an empty line: not a record at all.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_START",
    "MALFORMED_KINDS",
    "DemoStats",
    "click_file_name",
    "demo_stats",
    "reading_file_name",
    "render_click_files",
    "render_reading_files",
    "shipped_input",
    "write_click_files",
    "write_reading_files",
]

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)

#: Kinds of bad line, in the order they cycle. All but ``"blank"`` are dead letters.
MALFORMED_KINDS: tuple[str, ...] = (
    "truncated_json",  # {"user": "u03", "url": "/p           -> malformed
    "missing_ts",  # no "ts" field                          -> missing_event_time
    "bad_ts",  # "ts": "not-a-time"                         -> wrong_type
    "bad_amount",  # "amount": "abc"                        -> wrong_type
    "null_ts",  # "ts": null                                -> missing_event_time
    "json_array",  # [1, 2]                                 -> malformed
    "blank",  # ""                                          -> skipped, not a record
)

_USERS = tuple(f"u{i:02d}" for i in range(12))
_PAGES = ("/", "/cart", "/checkout", "/search")
_NULL_AMOUNT_EVERY = 15
_LATE_MIN_MS = 70_000
_LATE_MAX_MS = 150_000


@dataclass(frozen=True)
class DemoStats:
    """What the generator put into the files (ground truth for sanity checks)."""

    files: int
    lines: int
    valid: int
    late: int
    null_amounts: int
    malformed: dict[str, int] = field(default_factory=dict)

    @property
    def blank_lines(self) -> int:
        """Empty lines (not records)."""
        return self.malformed.get("blank", 0)

    @property
    def dead_letters(self) -> int:
        """Malformed lines that are records (everything but blank lines)."""
        return sum(self.malformed.values()) - self.blank_lines

    @property
    def records(self) -> int:
        """Lines that are records: valid (incl. late) plus dead letters."""
        return self.valid + self.dead_letters


def click_file_name(index: int) -> str:
    """Name of the ``index``-th demo file, e.g. ``clicks-00003.jsonl``."""
    return f"clicks-{index:05d}.jsonl"


def _format_ts(epoch_ms: int) -> str:
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _slot_positions(rng: random.Random, total: int, every: int) -> set[int]:
    """One rng-chosen position in each full block of ``every`` consecutive line numbers."""
    if every <= 0:
        return set()
    return {block + rng.randrange(every) for block in range(0, total - every + 1, every)}


def _generate(
    *,
    files: int,
    events_per_file: int,
    seed: int,
    start: datetime,
    seconds_per_file: float,
    jitter_s: float,
    late_every: int,
    malformed_every: int,
) -> tuple[list[tuple[str, bytes]], DemoStats]:
    if files < 0 or events_per_file < 0:
        raise ValueError("files and events_per_file must be >= 0")
    if seconds_per_file <= 0 or jitter_s < 0:
        raise ValueError("seconds_per_file must be > 0 and jitter_s >= 0")
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    rng = random.Random(seed)
    start_ms = (start - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    span_ms = max(1, round(seconds_per_file * 1000))
    jitter_ms = round(jitter_s * 1000)

    total = files * events_per_file
    malformed_at = _slot_positions(rng, total, malformed_every)
    late_at = _slot_positions(rng, total, late_every) - malformed_at

    running_max: int | None = None  # max event time (ms) over valid lines so far
    n_valid = n_late = n_null = 0
    kind_counts = dict.fromkeys(MALFORMED_KINDS, 0)
    n_malformed = 0
    out: list[tuple[str, bytes]] = []
    g = 0  # global line index
    for i in range(files):
        base = start_ms + i * span_ms
        nominal = sorted(base + rng.randrange(span_ms) for _ in range(events_per_file))
        lines: list[str] = []
        for nom in nominal:
            user = rng.choice(_USERS)
            url = f"/products/{rng.randrange(1, 40)}" if rng.random() < 0.7 else rng.choice(_PAGES)
            amount: float | None = round(rng.uniform(0.5, 250.0), 2)
            if rng.randrange(_NULL_AMOUNT_EVERY) == 0:
                amount = None
            ts_ms = nom - rng.randint(0, min(jitter_ms, nom - base))
            behind_ms = rng.randint(_LATE_MIN_MS, _LATE_MAX_MS)
            rec: dict[str, Any] = {"user": user, "url": url, "ts": _format_ts(ts_ms)}
            rec["amount"] = amount

            if g in malformed_at:
                kind = MALFORMED_KINDS[n_malformed % len(MALFORMED_KINDS)]
                n_malformed += 1
                kind_counts[kind] += 1
                lines.append(_malformed_line(kind, rec))
            else:
                if g in late_at and running_max is not None:
                    rec["ts"] = _format_ts(running_max - behind_ms)
                    n_late += 1
                else:
                    running_max = ts_ms if running_max is None else max(running_max, ts_ms)
                n_valid += 1
                n_null += amount is None
                lines.append(_dumps(rec))
            g += 1
        content = "".join(line + "\n" for line in lines)
        out.append((click_file_name(i), content.encode("utf-8")))
    stats = DemoStats(
        files=files,
        lines=total,
        valid=n_valid,
        late=n_late,
        null_amounts=n_null,
        malformed={k: v for k, v in kind_counts.items() if v},
    )
    return out, stats


def _malformed_line(kind: str, rec: dict[str, Any]) -> str:
    if kind == "truncated_json":
        text = _dumps(rec)
        cut = text.index('"url": "') + len('"url": "') + 2
        return text[:cut]
    bad = dict(rec)
    if kind == "missing_ts":
        del bad["ts"]
    elif kind == "bad_ts":
        bad["ts"] = "not-a-time"
    elif kind == "bad_amount":
        bad["amount"] = "abc"
    elif kind == "null_ts":
        bad["ts"] = None
    elif kind == "json_array":
        return "[1, 2]"
    elif kind == "blank":
        return ""
    else:  # pragma: no cover - MALFORMED_KINDS is closed
        raise ValueError(f"unknown malformed kind {kind!r}")
    return _dumps(bad)


CLICK_DEFAULTS: dict[str, Any] = {
    "files": 20,
    "events_per_file": 150,
    "seed": 7,
    "start": DEFAULT_START,
    "seconds_per_file": 30.0,
    "jitter_s": 4.0,
    "late_every": 40,
    "malformed_every": 60,
}


def _click_params(overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(overrides) - set(CLICK_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown click generator argument(s): {', '.join(unknown)}")
    return {**CLICK_DEFAULTS, **overrides}


def render_click_files(**kwargs: Any) -> list[tuple[str, bytes]]:
    """Return ``(file name, JSON-lines bytes)`` for each demo file, in ascending name order.

    Keyword arguments override :data:`CLICK_DEFAULTS`. ``events_per_file`` counts lines
    (valid, late and malformed alike); ``late_every`` / ``malformed_every`` <= 0 disable late /
    malformed lines.
    """
    out, _ = _generate(**_click_params(kwargs))
    return out


def demo_stats(**kwargs: Any) -> DemoStats:
    """What :func:`render_click_files` with the same keyword arguments puts into its files."""
    _, stats = _generate(**_click_params(kwargs))
    return stats


def write_click_files(directory: Path, **kwargs: Any) -> list[Path]:
    """Write :func:`render_click_files` output into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, content in render_click_files(**kwargs):
        path = directory / name
        path.write_bytes(content)
        paths.append(path)
    return paths


# -- count_window_average (include/pipelines/count_window_average.yaml) ---------------------

#: Flink's CountWindowAverage documentation feeds key 1 with these values: averages 4 and 5.
FLINK_VALUES = (3, 5, 7, 4, 2)
_READING_KEYS = (1, 2, 3, 4)
_NULL_VALUE_EVERY = 9  # a reading without a value (``"value": null``): filtered by the spec


def reading_file_name(index: int) -> str:
    """Name of the ``index``-th readings file, e.g. ``readings-00003.jsonl``."""
    return f"readings-{index:05d}.jsonl"


def render_reading_files(
    files: int = 4, readings_per_file: int = 12, seed: int = 11, start: datetime = DEFAULT_START
) -> list[tuple[str, bytes]]:
    """``{key, value, ts}`` JSON lines for ``count_window_average``, in ascending name order.

    Key 1 starts with :data:`FLINK_VALUES`; every ``_NULL_VALUE_EVERY``-th reading has
    ``"value": null`` and the last file ends with one ``"value": "n/a"`` (a dead letter:
    not a long). Event time rises by one second per line.
    """
    rng = random.Random(seed)
    flink = list(FLINK_VALUES)
    start_ms = (start - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    out = []
    for i in range(files):
        lines = []
        for j in range(readings_per_file):
            n = i * readings_per_file + j
            key = _READING_KEYS[n % len(_READING_KEYS)]
            value: int | None = rng.randrange(100)
            if key == 1 and flink:
                value = flink.pop(0)
            elif n % _NULL_VALUE_EVERY == _NULL_VALUE_EVERY - 1:
                value = None
            lines.append(
                _dumps({"key": key, "value": value, "ts": _format_ts(start_ms + n * 1000)})
            )
        if i == files - 1:
            ts = _format_ts(start_ms + files * readings_per_file * 1000)
            lines.append(_dumps({"key": 2, "value": "n/a", "ts": ts}))
        out.append((reading_file_name(i), "".join(f"{line}\n" for line in lines).encode()))
    return out


def write_reading_files(directory: Path, **kwargs: Any) -> list[Path]:
    """Write :func:`render_reading_files` output into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, content in render_reading_files(**kwargs):
        (directory / name).write_bytes(content)
        paths.append(directory / name)
    return paths


def shipped_input(pipeline: str) -> list[tuple[str, bytes]] | None:
    """The input files of a shipped spec that reads files (``include/pipelines/``), by
    pipeline name; None for one that generates its input (Nexmark) or is not shipped."""
    if pipeline in ("clicks_per_minute", "clicks_to_iceberg", "clicks_to_kafka"):
        return render_click_files()  # the demo's clicks, into another kind of sink
    if pipeline == "count_window_average":
        return render_reading_files()
    return None
