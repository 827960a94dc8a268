"""The monitor's charts as data: the geometry of each inline SVG chart, drawn by the
``chart`` macro of templates/monitor/macros.html.j2 (no markup here)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sluice.words import noun

__all__ = ["LIVE_AGE_S", "MAX_BARS", "Chart", "age", "charts", "short"]

MAX_BARS = 250  # a bar chart over more epochs shows means of consecutive epochs
# Event times at most this old at the latest commit (or 10 checkpoint intervals, if longer) are
# live data: the watermark lag is measured against the wall clock. Older ones are a replay.
LIVE_AGE_S = 86_400.0
TIME_UNITS = (("seconds", 1.0), ("minutes", 60.0), ("hours", 3600.0), ("days", 86_400.0))
WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 560, 200, 56, 28, 26


@dataclass(frozen=True)
class Series:
    name: str
    color: str


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: str
    epoch: int
    name: str
    value: float


@dataclass(frozen=True)
class Line:
    points: str  # "x,y x,y ..." (numbers only)
    color: str


@dataclass(frozen=True)
class Chart:
    """One chart: title, y axis from 0 to ``top``, and either stacked bars or a line."""

    title: str
    unit: str
    top: float
    first: int
    last: int
    series: tuple[Series, ...] = ()
    bars: tuple[Bar, ...] = ()
    line: Line | None = None
    legend_text: str = ""  # a line chart's legend; bar charts list their series
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    ticks: tuple[Tick, ...] = field(init=False)

    @property
    def axis_mid(self) -> float:
        """The middle of the y axis, where its unit is written."""
        return (PAD_TOP + HEIGHT - PAD_BOTTOM) / 2

    def __post_init__(self) -> None:
        ticks = tuple(Tick(_y(self.top * f, self.top), short(self.top * f)) for f in (0, 0.5, 1))
        object.__setattr__(self, "ticks", ticks)


def charts(rows: list[dict[str, Any]], interval_s: float = 0.0) -> list[Chart]:
    """The four charts over the committed epochs ``rows`` (none without one); ``interval_s``:
    the checkpoint interval."""
    if not rows:
        return []
    epochs = [int(r["epoch"]) for r in rows]
    return [
        _bars("records per epoch", epochs, [
            ("accepted", "#2f855a", [r.get("accepted") or 0 for r in rows]),
            ("filtered", "#718096", [r.get("filtered") or 0 for r in rows]),
            ("late", "#b7791f", [r.get("late") or 0 for r in rows]),
            ("dead", "#c53030", [r.get("dead") or 0 for r in rows]),
        ], "records"),
        _bars("epoch duration, end to end", epochs, [
            ("plan", "#805ad5", [r.get("plan_seconds") or 0 for r in rows]),
            ("process", "#3182ce", [r.get("process_seconds") or 0 for r in rows]),
            ("commit", "#dd6b20", [r.get("commit_seconds") or 0 for r in rows]),
            ("between steps", "#a0aec0", [_between(r) for r in rows]),
        ], "seconds"),
        _line("state size", epochs, [r.get("state_rows") or 0 for r in rows], "rows", "#2b6cb0"),
        _watermark_lag(epochs, rows, interval_s),
    ]  # fmt: skip


def _watermark_lag(epochs: list[int], rows: list[dict[str, Any]], interval_s: float) -> Chart:
    """How far each commit's watermark trailed: the wall clock (the commit time) when the
    data is live, as Flink's ``now - currentInputWatermark`` and Spark's "global watermark
    gap"; in a replay of older data, the newest event time read so far (the wall clock would
    only say how old the data is; the legend says that once)."""
    newest = rows[-1].get("newest_event_us")
    data_age = rows[-1]["committed_at"] - newest / 1e6 if newest is not None else None
    live = data_age is None or data_age <= max(LIVE_AGE_S, 10 * interval_s)
    values: list[float | None] = []
    for r in rows:
        mark, top = r.get("watermark_us"), r.get("newest_event_us")
        since = r["committed_at"] if live else (None if top is None else top / 1e6)
        if mark is None or since is None:
            values.append(None)
            continue
        values.append(max(0.0, since - mark / 1e6))
    known = [v for v in values if v is not None]
    unit, scale = _time_unit(max(known, default=0.0))
    chart = _line("watermark lag at commit", epochs,
                  [None if v is None else v / scale for v in values], unit, "#c05621")  # fmt: skip
    if not known:
        return chart
    behind = "behind the wall clock" if live else "behind the newest event"
    legend = f"last {age(known[-1])} {behind}"
    if data_age is not None and not live:
        legend += f" (data {age(data_age)} old)"
    return replace(chart, legend_text=legend)


def _time_unit(seconds: float) -> tuple[str, float]:
    """The axis unit for durations up to ``seconds``: the largest that keeps the top >= 2."""
    chosen = TIME_UNITS[0]
    for unit in TIME_UNITS:
        if seconds >= 2 * unit[1]:
            chosen = unit
    return chosen


def _between(row: dict[str, Any]) -> float:
    """End to end minus the steps: waiting for Airflow to start each task, spark-submit."""
    steps = sum(row.get(k) or 0 for k in ("plan_seconds", "process_seconds", "commit_seconds"))
    return max(0.0, float(row.get("run_seconds") or 0) - steps)


def _bars(
    title: str, epochs: list[int], series: list[tuple[str, str, list[float]]], unit: str
) -> Chart:
    if len(epochs) > MAX_BARS:  # one bar per run of epochs: the mean of each series
        k = -(-len(epochs) // MAX_BARS)
        epochs = epochs[::k]
        series = [
            (n, c, [sum(v[i : i + k]) / len(v[i : i + k]) for i in range(0, len(v), k)])
            for n, c, v in series
        ]
        title += f" (mean of {k} epochs per bar)"
    totals = [sum(s[2][i] for s in series) for i in range(len(epochs))]
    top = _nice(max(totals, default=0))
    width = (WIDTH - PAD_LEFT - 8) / len(epochs)
    bars = []
    for i, epoch in enumerate(epochs):
        base = 0.0
        for name, color, values in series:
            v = float(values[i])
            if v <= 0:
                continue
            y0, y1 = _y(base, top), _y(base + v, top)
            x, w = PAD_LEFT + i * width, max(width - 1, 0.6)
            bars.append(Bar(x, y1, w, max(y0 - y1, 0.5), color, epoch, name, v))
            base += v
    legend = tuple(Series(n, c) for n, c, _ in series)
    return Chart(title, unit, top, epochs[0], epochs[-1], series=legend, bars=tuple(bars))


def _line(
    title: str, epochs: list[int], values: list[float | None], unit: str, color: str
) -> Chart:
    known = [v for v in values if v is not None]
    top = _nice(max(known, default=0))
    step = (WIDTH - PAD_LEFT - 8) / max(len(epochs) - 1, 1)
    points = " ".join(
        f"{PAD_LEFT + i * step:.2f},{_y(v, top):.2f}" for i, v in enumerate(values) if v is not None
    )
    if not known:
        legend = "no data"
    elif unit == "seconds":
        legend = f"last {age(known[-1])}"
    else:
        legend = f"last {short(known[-1])} {noun(known[-1], unit)}"
    line = Line(points, color)
    return Chart(title, unit, top, epochs[0], epochs[-1], line=line, legend_text=legend)


def _y(value: float, top: float) -> float:
    return HEIGHT - PAD_BOTTOM - (value / top if top else 0) * (HEIGHT - PAD_BOTTOM - PAD_TOP)


def _nice(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 1
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * magnitude:
            return m * magnitude
    return value


def short(value: float) -> str:
    """12.3k, 4.5M, 0.25: an axis label or a bar's value."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.3g}"


def age(seconds: float | None) -> str:
    """A duration as its largest unit: 45s, 12m, 5h, 3d."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172_800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
