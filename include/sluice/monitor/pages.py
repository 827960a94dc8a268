"""The checkpoint monitor's pages: a pipeline's history, charts and savepoints, and an overview
of every pipeline's health (docs/monitor.md).

Pure Python over a :class:`~sluice.monitor.view.PipelineView` and Jinja2 templates with
autoescape (templates/monitor/), no Airflow:
:mod:`sluice.airflow.monitor` serves these pages from Airflow's API server behind Airflow's own
login (plugins/sluice_monitor.py). The pages are server-rendered, charts are inline SVG, and
every link is relative, so they work behind a proxy and inside Airflow's iframe; the one
script reloads a page while an epoch is in flight (not while the user types in a form).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from sluice.monitor.actions import action_forms
from sluice.monitor.charts import age as _age
from sluice.monitor.charts import charts, short
from sluice.monitor.inputs import html_inputs
from sluice.monitor.view import BEHIND_INTERVALS, PipelineView
from sluice.words import noun

__all__ = [
    "HISTORY_ROWS",
    "REFRESH_S",
    "render_error",
    "render_overview",
    "render_pipeline",
    "render_template",
]

HISTORY_ROWS = 200  # the history table's rows by default (newest first; ?all=1 for every one)
REFRESH_S = 10  # a page reloads itself this often while an epoch is in flight


# -- pages --------------------------------------------------------------------------------------

# Which history columns are left-aligned (text) rather than right-aligned (numbers).
HISTORY_COLUMNS = (
    ("epoch", False), ("status", True), ("offsets (end)", True), ("in", False), ("out", False),
    ("late", False), ("dead", False), ("state rows", False), ("watermark", True),
    ("plan s", False), ("process s", False), ("commit s", False), ("end to end s", False),
    ("run", True),
)  # fmt: skip


def render_overview(views: Sequence[PipelineView], broken: Sequence[tuple[str, str]] = ()) -> str:
    """Every pipeline the user may see, with its health; ``broken``: (dag id, error)."""
    return render_template(
        "overview.html.j2",
        rows=[(v, v.health()) for v in views],
        broken=broken,
        behind_intervals=BEHIND_INTERVALS,
        refresh_s=REFRESH_S if any(v.in_flight for v in views) else None,
    )


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
    newest_first = list(reversed(view.rows))
    return render_template(
        "pipeline.html.j2",
        view=view,
        health=view.health(),
        can_act=can_act,
        message=message,
        error=error,
        run_link=run_link or (lambda run: f"../../dags/{_q(view.dag_id)}/runs/{_q(run)}"),
        charts=charts(view.committed, view.interval_s),
        restorable=[r["epoch"] for r in reversed(view.committed) if r.get("rewound_by") is None],
        history=newest_first[:history_limit] if history_limit else newest_first,
        history_head=HISTORY_COLUMNS,
        inputs=html_inputs(),  # labels, help and patterns: the run request's own
        refresh_s=REFRESH_S if view.in_flight else None,
        refused_at=_refused_at(view.refusal),
        actions=action_forms(view),  # what the action forms offer (sluice.monitor.actions)
    )


ERROR_TITLES = {400: "Bad request", 401: "Not signed in", 403: "Not allowed", 404: "Not found",
                422: "Bad request", 500: "The monitor failed"}  # fmt: skip


def render_error(status: int, message: str, *, overview: str = "./") -> str:
    """A page for a refused or failed request; ``overview``: the link back."""
    title = ERROR_TITLES.get(status, f"Error {status}")
    return render_template("error.html.j2", status=status, title=title, message=message,
                   overview=overview)  # fmt: skip


def _refused_at(refusal: dict[str, Any] | None) -> float | None:
    return int(refusal["at_us"]) / 1e6 if refusal and refusal.get("at_us") else None


# Autoescape on for every template: each value reaches the page escaped exactly once, and
# markup lives in the templates only (templates/monitor/, package data).
_TEMPLATES = Environment(
    loader=PackageLoader("sluice", "templates/monitor"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_TEMPLATES.filters.update(
    n=lambda value: "-" if value is None else f"{int(value):,}",
    f2=lambda value: "" if value is None else f"{float(value):.2f}",
    ts=lambda epoch_s: datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S"),
    age=_age,
    short=short,
    path=lambda value: _q(str(value)),
    noun=lambda plural, n: noun(n, plural),  # {{ 'files'|noun(n) }}: "file" for n = 1
    run_label=lambda run_id: _run_label(str(run_id)),
)


# Airflow's run ids: <run type>__<ISO time>[.micros][+00:00][_<random suffix>]
_RUN_ID = re.compile(
    r"([a-z_]+?)__(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d:\d\d)?(_\w+)?"
)


def _run_label(run_id: str) -> Markup | str:
    """How the history names a run: Airflow's ``asset_triggered__2026-11-27T09:43:46.159733+
    00:00_2sLbyl8T`` as ``asset_triggered 2026-11-27 09:43:46``, wrapping at the spaces only
    (the id itself is the link's title); any other id as it is."""
    found = _RUN_ID.fullmatch(run_id)
    if not found:
        return run_id
    return Markup(" ").join(Markup("<span>%s</span>") % part for part in found.group(1, 2, 3))


def render_template(template: str, **context: Any) -> str:
    """Template ``template`` of templates/monitor/ with ``context``, autoescaped."""
    return _TEMPLATES.get_template(template).render(**context)


def _q(value: str) -> str:
    """``value`` as one URL path segment (``/`` and ``?`` included)."""
    return quote(value, safe="")
