"""The checkpoint monitor's pages: a pipeline's history, charts and savepoints, and an overview
of every pipeline's health (docs/monitor.md).

Pure Python over a :class:`~sluice.protocol.Runtime` and HTML strings, no Airflow:
:mod:`sluice.airflow.monitor` serves these pages from Airflow's API server behind Airflow's own
login (plugins/sluice_monitor.py). The pages are server-rendered (no script), charts are inline
SVG, and every link is relative, so they work behind a proxy and inside Airflow's iframe.

A committed epoch whose sinks committed never changes, so its row is kept in a
:class:`HistoryCache`; a page load then reads only the epochs that are new or still moving.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sluice.report import checkpoint_rows, pending_units

if TYPE_CHECKING:
    from sluice.protocol import Runtime

__all__ = [
    "Health",
    "HistoryCache",
    "PipelineView",
    "pipeline_view",
    "render_overview",
    "render_pipeline",
]

FINAL_STATUS = "sinks committed"
# A pipeline is "behind" when its last commit is older than this many intervals.
BEHIND_INTERVALS = 2.0
MAX_BARS = 250  # a bar chart over more epochs shows means of consecutive epochs
HISTORY_ROWS = 200  # the history table's rows by default (newest first; ?all=1 for every one)


class HistoryCache:
    """Rows of finished epochs by (checkpoint store, epoch): they never change."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._rows: dict[tuple[str, int], dict[str, Any]] = {}

    def get(self, store: str, epoch: int) -> dict[str, Any] | None:
        row = self._rows.get((store, epoch))
        return dict(row) if row is not None else None

    def put(self, store: str, row: dict[str, Any]) -> None:
        if row.get("status") != FINAL_STATUS:
            return
        if len(self._rows) >= self.limit:
            self._rows.clear()
        self._rows[(store, row["epoch"])] = dict(row)


@dataclass(frozen=True)
class Health:
    state: str  # ok | behind | failing | idle (nothing committed yet)
    text: str
    last_commit_age_s: float | None
    failed_epochs: int
    late: int
    dead: int


@dataclass
class PipelineView:
    """Everything a pipeline's page shows, read once per request."""

    name: str
    dag_id: str
    interval_s: float
    unit_name: str
    rows: list[dict[str, Any]]
    savepoints: list[dict[str, Any]]
    lag: int | None
    now: float
    retained: int | None = None
    spec_file: str = ""
    load_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def committed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("committed_at") is not None]

    @property
    def latest(self) -> dict[str, Any] | None:
        committed = self.committed
        return committed[-1] if committed else None

    def health(self) -> Health:
        committed = self.committed
        failed = sum(1 for r in self.rows if r["status"] in ("failed", "aborted"))
        late = sum(int(r.get("late") or 0) for r in committed)
        dead = sum(int(r.get("dead") or 0) for r in committed)
        if not committed:
            return Health("idle", "no epoch committed yet", None, failed, late, dead)
        age = max(0.0, self.now - float(committed[-1]["committed_at"]))
        pending = [r for r in self.rows if r["epoch"] > committed[-1]["epoch"]]
        if any(r["status"] in ("failed", "aborted") for r in pending):
            text = f"epoch {pending[-1]['epoch']} failed; last commit {_age(age)} ago"
            return Health("failing", text, age, failed, late, dead)
        if self.interval_s and age > BEHIND_INTERVALS * self.interval_s:
            text = f"last commit {_age(age)} ago (interval {_age(self.interval_s)})"
            return Health("behind", text, age, failed, late, dead)
        return Health("ok", f"last commit {_age(age)} ago", age, failed, late, dead)


def pipeline_view(
    rt: Runtime,
    dag_id: str,
    *,
    now: float | None = None,
    cache: HistoryCache | None = None,
    spec_file: str = "",
) -> PipelineView:
    """Read a pipeline's history, savepoints and lag from its checkpoint store."""
    started = time.perf_counter()
    store = rt.repo.store.uri()
    rows = checkpoint_rows(
        rt,
        cached=(lambda e: cache.get(store, e)) if cache else None,
        keep=(lambda r: cache.put(store, r)) if cache else None,
    )
    try:
        lag = pending_units(rt)
    except Exception as exc:  # the source may be unreachable: the page still shows history
        lag = None
        extra = {"lag_error": f"{type(exc).__name__}: {exc}"}
    else:
        extra = {}
    checkpoint = rt.spec.checkpoint
    return PipelineView(
        name=rt.name,
        dag_id=dag_id,
        interval_s=(checkpoint.interval_us / 1e6) if checkpoint else 0.0,
        unit_name=rt.source.unit_name,
        rows=rows,
        savepoints=[s.to_dict() for s in rt.repo.savepoints()],
        lag=lag,
        now=time.time() if now is None else now,
        retained=checkpoint.retained if checkpoint else None,
        spec_file=spec_file,
        load_seconds=time.perf_counter() - started,
        extra=extra,
    )


# -- pages --------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:20px;color:#1f2933}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.sub{color:#52606d;margin-bottom:16px} a{color:#1d4ed8}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;border-bottom:1px solid #e4e7eb;text-align:right;white-space:nowrap}
th{background:#f5f7fa;position:sticky;top:0} td.l,th.l{text-align:left}
.cards{display:flex;gap:12px;flex-wrap:wrap} .card{border:1px solid #e4e7eb;border-radius:8px;
padding:10px 14px;min-width:150px} .card b{display:block;font-size:18px}
.pill{border-radius:10px;padding:1px 8px;font-size:12px;color:#fff}
.ok,.sinks-committed,.committed{background:#2f855a} .behind,.prepared,.planned,.processing{
background:#b7791f} .failing,.failed,.aborted{background:#c53030} .idle{background:#718096}
.retracted{background:#a0aec0}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
svg{width:100%;height:auto;border:1px solid #e4e7eb;border-radius:8px;background:#fff}
form{display:inline-flex;gap:6px;align-items:center;margin:4px 16px 4px 0}
input,select,button{font:inherit;padding:3px 6px} .msg{padding:8px 12px;border-radius:6px;
background:#ebf8ff;border:1px solid #90cdf4;margin-bottom:12px} .err{background:#fff5f5;
border-color:#feb2b2} .scroll{max-height:560px;overflow:auto;border:1px solid #e4e7eb}
"""


def _page(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )


def render_overview(views: Sequence[PipelineView], broken: Sequence[tuple[str, str]] = ()) -> str:
    """Every pipeline the user may see, with its health; ``broken``: (dag id, error)."""
    rows = []
    for v in views:
        h = v.health()
        latest = v.latest
        rows.append(
            f'<tr data-pipeline="{_e(v.name)}"><td class="l"><a href="pipelines/{_q(v.dag_id)}">'
            f'{_e(v.name)}</a></td><td class="l">{_pill(h.state)} {_e(h.text)}</td>'
            f"<td>{latest['epoch'] if latest else '-'}</td>"
            f'<td class="l">{_e((latest or {}).get("watermark") or "-")}</td>'
            f"<td>{_n(v.lag)} {_e(v.unit_name) if v.lag is not None else ''}</td>"
            f"<td>{h.failed_epochs}</td><td>{h.late:,}</td><td>{h.dead:,}</td>"
            f"<td>{_age(v.interval_s)}</td></tr>"
        )
    for dag_id, error in broken:
        rows.append(
            f'<tr><td class="l">{_e(dag_id)}</td><td class="l" colspan="8">'
            f"{_pill('failing')} cannot read: {_e(error)}</td></tr>"
        )
    body = (
        "<h1>Sluice pipelines</h1>"
        f'<div class="sub">{len(views)} pipeline(s); health compares the last commit with the '
        f"checkpoint interval (behind after {BEHIND_INTERVALS:g} intervals).</div>"
        '<table id="overview"><tr><th class="l">pipeline</th><th class="l">health</th>'
        '<th>epoch</th><th class="l">watermark</th><th>lag</th><th>failed epochs</th>'
        "<th>late</th><th>dead letters</th><th>interval</th></tr>" + "".join(rows) + "</table>"
    )
    return _page("Sluice pipelines", body)


def render_pipeline(
    view: PipelineView,
    *,
    can_act: bool,
    message: str | None = None,
    error: str | None = None,
    run_link: Callable[[str], str] | None = None,
    history_limit: int | None = HISTORY_ROWS,
) -> str:
    """A pipeline's page: status cards, charts, savepoints and actions, the history table."""
    h = view.health()
    latest = view.latest
    link = run_link or (lambda run: f"../../dags/{_q(view.dag_id)}/runs/{_q(run)}")
    cards = [
        ("health", f"{_pill(h.state)}", h.text),
        ("latest committed epoch", str(latest["epoch"]) if latest else "-",
         f"of {len(view.committed)} retained"),
        ("watermark", _e((latest or {}).get("watermark") or "-"), "event time, UTC"),
        ("lag", _n(view.lag), f"{view.unit_name} not yet in a committed epoch"
         if view.lag is not None else _e(view.extra.get("lag_error", "unknown"))),
        ("late / dead", f"{h.late:,} / {h.dead:,}", "records over the retained epochs"),
    ]  # fmt: skip
    parts = [
        f"<h1>{_e(view.name)}</h1>",
        f'<div class="sub">DAG <a href="../../dags/{_q(view.dag_id)}" target="_top">'
        f"{_e(view.dag_id)}</a> · interval {_age(view.interval_s)} · checkpoints retained: "
        f"{view.retained if view.retained is not None else 'all'} · read in "
        f"{view.load_seconds * 1000:.0f} ms</div>",
    ]
    if message:
        parts.append(f'<div class="msg" id="message">{_e(message)}</div>')
    if error:
        parts.append(f'<div class="msg err" id="message">{_e(error)}</div>')
    parts.append(
        '<div class="cards">'
        + "".join(
            f'<div class="card" data-card="{_e(t)}">{_e(t)}<b>{v}</b><small>{_e(s)}</small></div>'
            if "<" not in s
            else f'<div class="card" data-card="{_e(t)}">{_e(t)}<b>{v}</b><small>{s}</small></div>'
            for t, v, s in cards
        )
        + "</div>"
    )
    parts.append("<h2>Charts</h2>" + _charts(view))
    parts.append("<h2>Savepoints and restores</h2>" + _savepoints(view, can_act))
    parts.append("<h2>History</h2>" + _history(view, link, history_limit))
    return _page(f"{view.name} · Sluice", "".join(parts))


def _savepoints(view: PipelineView, can_act: bool) -> str:
    rows = "".join(
        f'<tr data-savepoint="{_e(s["name"])}"><td class="l">{_e(s["name"])}</td>'
        f'<td>{s["epoch"]}</td><td class="l">{_ts(s["created_at"])}</td>'
        f'<td class="l">{_e(s.get("note") or "")}</td></tr>'
        for s in view.savepoints
    )
    table = (
        '<table id="savepoints"><tr><th class="l">name</th><th>epoch</th><th class="l">created'
        '</th><th class="l">note</th></tr>' + (rows or '<tr><td class="l" colspan="4">none yet'
                                               "</td></tr>") + "</table>"
    )  # fmt: skip
    if not can_act:
        return table + (
            '<p class="sub" id="read-only">You can view this pipeline; taking savepoints and '
            "restoring need permission to trigger its DAG.</p>"
        )
    epochs = [r["epoch"] for r in view.committed if r.get("rewound_by") is None]
    options = "".join(f"<option>{e}</option>" for e in reversed(epochs))
    saved = "".join(f"<option>{_e(s['name'])}</option>" for s in view.savepoints)
    base = f"{_q(view.dag_id)}"
    forms = (
        f'<form method="post" action="{base}/savepoint" id="take-savepoint">'
        '<label>take a savepoint named <input name="name" required pattern="[a-z0-9_\\-]+" '
        'size="16"></label><button>take savepoint</button></form>'
        f'<form method="post" action="{base}/restore" id="restore-checkpoint">'
        '<input type="hidden" name="kind" value="checkpoint">'
        f'<label>restore from checkpoint <select name="epoch">{options}</select></label>'
        "<button>restore</button></form>"
    )
    if saved:
        forms += (
            f'<form method="post" action="{base}/restore" id="restore-savepoint">'
            '<input type="hidden" name="kind" value="savepoint">'
            f'<label>restore from savepoint <select name="savepoint">{saved}</select></label>'
            "<button>restore</button></form>"
        )
    note = (
        '<p class="sub">Each action triggers the DAG with its conf (take_savepoint, or '
        "restore_from): Airflow records who ran it. Restoring an older epoch rewinds: the "
        "replay retracts the output of the later epochs.</p>"
    )
    return table + "<div>" + forms + "</div>" + note


def _history(view: PipelineView, link: Callable[[str], str], limit: int | None) -> str:
    head = (
        "epoch", "status", "offsets (end)", "in", "out", "late", "dead", "state rows",
        "watermark", "plan s", "process s", "commit s", "run",
    )  # fmt: skip
    left = {"status", "offsets (end)", "watermark", "run"}
    out = ['<div class="scroll"><table id="history"><tr>']
    out += [f'<th class="{"l" if h in left else ""}">{h}</th>' for h in head]
    out.append("</tr>")
    shown = list(reversed(view.rows))[:limit] if limit else list(reversed(view.rows))
    for r in shown:
        status = r["status"]
        tags = ""
        if r.get("savepoints"):
            tags += f" · savepoint {_e(', '.join(r['savepoints']))}"
        if r.get("rewinds_to") is not None:
            tags += f" · rewind to {r['rewinds_to']}"
        if r.get("rewound_by") is not None:
            tags += f" · retracted by {r['rewound_by']}"
        look = "retracted" if r.get("rewound_by") is not None else None
        run = r.get("run_id")
        run_cell = f'<a href="{link(run)}" target="_top">{_e(run)}</a>' if run else ""
        out.append(
            f'<tr data-epoch="{r["epoch"]}" data-status="{_e(status)}">'
            f'<td>{r["epoch"]}</td><td class="l">{_pill(status, look)}{_e(tags)}</td>'
            f'<td class="l">{_e(r.get("end", ""))}</td>'
            f'<td data-col="in">{_n(r.get("records_read"))}</td>'
            f'<td data-col="out">{_n(r.get("windows_emitted"))}</td>'
            f'<td data-col="late">{_n(r.get("late"))}</td>'
            f'<td data-col="dead">{_n(r.get("dead"))}</td>'
            f"<td>{_n(r.get('state_rows'))}</td>"
            f'<td class="l">{_e(r.get("watermark") or "")}</td>'
            f"<td>{_f(r.get('plan_seconds'))}</td><td>{_f(r.get('process_seconds'))}</td>"
            f'<td>{_f(r.get("commit_seconds"))}</td><td class="l">{run_cell}</td></tr>'
        )
    out.append("</table></div>")
    if len(shown) < len(view.rows):
        out.append(
            f'<p class="sub" id="more">The latest {len(shown)} of {len(view.rows)} epochs; '
            f'<a href="{_q(view.dag_id)}?all=1">show all</a> (the charts cover all).</p>'
        )
    return "".join(out)


# -- charts (inline SVG) ------------------------------------------------------------------------

_W, _H, _PAD_L, _PAD_B, _PAD_T = 560, 200, 56, 28, 26


def _charts(view: PipelineView) -> str:
    rows = view.committed
    if not rows:
        return '<p class="sub">Charts appear after the first committed epoch.</p>'
    epochs = [int(r["epoch"]) for r in rows]
    charts = [
        _bars("records per epoch", epochs, [
            ("accepted", "#2f855a", [r.get("accepted") or 0 for r in rows]),
            ("filtered", "#718096", [r.get("filtered") or 0 for r in rows]),
            ("late", "#b7791f", [r.get("late") or 0 for r in rows]),
            ("dead", "#c53030", [r.get("dead") or 0 for r in rows]),
        ], "records"),
        _bars("epoch duration", epochs, [
            ("plan", "#805ad5", [r.get("plan_seconds") or 0 for r in rows]),
            ("process", "#3182ce", [r.get("process_seconds") or 0 for r in rows]),
            ("commit", "#dd6b20", [r.get("commit_seconds") or 0 for r in rows]),
        ], "seconds"),
        _line("state size", epochs, [r.get("state_rows") or 0 for r in rows], "rows", "#2b6cb0"),
        _line("watermark lag at commit", epochs, [
            max(0.0, r["committed_at"] - r["watermark_us"] / 1e6)
            if r.get("watermark_us") is not None else None for r in rows
        ], "seconds", "#c05621"),
    ]  # fmt: skip
    return '<div class="charts">' + "".join(charts) + "</div>"


def _frame(title: str, unit: str, top: float, epochs: list[int], legend: str, inner: str) -> str:
    ticks = "".join(
        f'<text x="{_PAD_L - 6}" y="{_y(top * f, top):.1f}" text-anchor="end" font-size="10" '
        f'fill="#52606d">{_short(top * f)}</text><line x1="{_PAD_L}" x2="{_W - 8}" '
        f'y1="{_y(top * f, top):.1f}" y2="{_y(top * f, top):.1f}" stroke="#edf0f3"/>'
        for f in (0, 0.5, 1)
    )
    first, last = epochs[0], epochs[-1]
    xlabels = (
        f'<text x="{_PAD_L}" y="{_H - 8}" font-size="10" fill="#52606d">epoch {first}</text>'
        f'<text x="{_W - 8}" y="{_H - 8}" font-size="10" fill="#52606d" text-anchor="end">'
        f"epoch {last}</text>"
    )
    return (
        f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="{_e(title)}" '
        f'data-chart="{_e(title)}"><title>{_e(title)} ({unit})</title>'
        f'<text x="8" y="16" font-size="12" font-weight="600">{_e(title)}</text>'
        f'<text x="{_W - 8}" y="16" font-size="10" text-anchor="end">{legend}</text>'
        f"{ticks}{inner}{xlabels}</svg>"
    )


def _bars(
    title: str, epochs: list[int], series: list[tuple[str, str, list[float]]], unit: str
) -> str:
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
    width = (_W - _PAD_L - 8) / len(epochs)
    rects = []
    for i, epoch in enumerate(epochs):
        base = 0.0
        for name, color, values in series:
            v = float(values[i])
            if v <= 0:
                continue
            y0, y1 = _y(base, top), _y(base + v, top)
            x, w = _PAD_L + i * width, max(width - 1, 0.6)
            rects.append(
                f'<rect x="{x:.2f}" y="{y1:.2f}" width="{w:.2f}" height="{max(y0 - y1, 0.5):.2f}" '
                f'fill="{color}"><title>epoch {epoch}: {name} {_short(v)}</title></rect>'
            )
            base += v
    legend = " ".join(f'<tspan fill="{c}">■</tspan> {n}' for n, c, _ in series)
    return _frame(title, unit, top, epochs, legend, "".join(rects))


def _line(title: str, epochs: list[int], values: list[float | None], unit: str, color: str) -> str:
    known = [v for v in values if v is not None]
    top = _nice(max(known, default=0))
    step = (_W - _PAD_L - 8) / max(len(epochs) - 1, 1)
    points = " ".join(
        f"{_PAD_L + i * step:.2f},{_y(v, top):.2f}" for i, v in enumerate(values) if v is not None
    )
    if not known:
        last = "no data"
    elif unit == "seconds":
        last = f"last {_age(known[-1])}"
    else:
        last = f"last {_short(known[-1])} {unit}"
    inner = f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{points}"/>'
    return _frame(title, unit, top, epochs, _e(last), inner)


def _y(value: float, top: float) -> float:
    return _H - _PAD_B - (value / top if top else 0) * (_H - _PAD_B - _PAD_T)


def _nice(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** (len(str(int(value))) - 1) if value >= 1 else 1
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * magnitude:
            return m * magnitude
    return value


# -- formatting ---------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _q(value: str) -> str:
    return quote(value, safe="")


def _pill(state: str, look: str | None = None) -> str:
    css = _e(look or state.replace(" ", "-"))
    return f'<span class="pill {css}">{_e(state)}</span>'


def _n(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _f(value: Any) -> str:
    return "" if value is None else f"{float(value):.2f}"


def _short(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.3g}"


def _ts(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: float | None) -> str:
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
