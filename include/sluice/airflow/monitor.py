"""The checkpoint monitor, served by Airflow's API server (plugins/sluice_monitor.py mounts
:func:`create_app` at ``/sluice``; docs/monitor.md).

Airflow does not protect plugin routes, so every route here does it itself, with Airflow's
own machinery:

* the user comes from Airflow's session, the JWT in the ``_token`` cookie the UI sets at login,
  or an ``Authorization: Bearer`` token (``airflow.api_fastapi.core_api.security.get_user``).
  No valid session gives 401;
* the auth manager decides. Reading a pipeline needs GET on its DAG. Taking a savepoint,
  restoring or deleting a savepoint needs POST on the DAG's runs, which is what triggering it
  needs. Otherwise 403;
* actions are form POSTs from the same origin. A cross-site POST is refused with 403: the
  Origin, or else the Referer, must be this server;
* an action is checked first as the DAG's ``plan`` task would check it, writing nothing
  (sluice.monitor.actions); a refusal comes back as the action's form with the reason, and no
  run is created. A restore then shows what it retracts and is triggered only by a second POST
  carrying a token of exactly that; a savepoint delete is confirmed the same way;
* an action triggers the pipeline's DAG through Airflow's REST API with the user's own token.
  Airflow records the run as theirs and checks the conf like any trigger. Deleting a
  savepoint is the one action the API server does itself (logged with the user's name).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, Form, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sluice.monitor.actions import (
    action_forms,
    check_savepoint,
    preview_delete,
    preview_restore,
    restore_conf,
)
from sluice.monitor.catalog import PipelineCatalog, SpecEntry
from sluice.monitor.inputs import html_inputs
from sluice.monitor.pages import HISTORY_ROWS, render_error, render_overview
from sluice.monitor.pages import render_pipeline as _render_pipeline
from sluice.monitor.pages import render_template as _render_template
from sluice.monitor.text import public_text, server_places
from sluice.monitor.view import HistoryCache, PipelineView, RequestedRun, pipeline_view
from sluice.protocol.exceptions import SavepointError
from sluice.protocol.request import InvalidRunRequest
from sluice.protocol.retention import delete_savepoint
from sluice.words import count

__all__ = ["SlashRedirect", "create_app"]

TRIGGER_TIMEOUT_S = 30.0
_log = logging.getLogger(__name__)
# The signed-in Airflow user (401 without a valid session or token).
User = Annotated[Any, Depends(get_user)]


def create_app(pipelines_dir: str | Path) -> Any:
    """The FastAPI app of the monitor over the specs in ``pipelines_dir`` (one DAG each).

    Specs and runtimes are cached by spec file version (``app.state.catalog``, a
    :class:`~sluice.monitor.catalog.PipelineCatalog`); finished epochs' rows in a
    :class:`~sluice.monitor.view.HistoryCache`."""
    app = FastAPI(title="Sluice checkpoint monitor", docs_url=None, redoc_url=None)
    folder = Path(pipelines_dir)
    cache = HistoryCache()
    catalog: PipelineCatalog[Any, Any] = PipelineCatalog(
        folder, load=_load_spec, key=_dag_id, build=_runtime
    )
    app.state.catalog = catalog

    def allowed(user: Any, dag: str, method: str) -> bool:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import (
            DagAccessEntity,
            DagDetails,
        )

        entity = DagAccessEntity.RUN if method == "POST" else None
        return bool(
            get_auth_manager().is_authorized_dag(
                method=method,  # type: ignore[arg-type]
                user=user,
                access_entity=entity,
                details=DagDetails(id=dag),
            )
        )

    def places(dag: str | None = None) -> dict[str, str]:
        """What pages say instead of server locations: those of ``dag``'s spec when it loads,
        and the pipelines folder."""
        try:
            entry = catalog.pipelines().get(dag) if dag else None
        except Exception:  # an error page must not fail on the folder
            entry = None
        return server_places(entry.spec if entry is not None else None, folder)

    def pipeline(dag: str) -> SpecEntry[Any, Any]:
        entries = catalog.pipelines()
        entry = entries.get(dag)
        if entry is None or not entry.loaded:
            broken = sum(1 for e in entries.values() if not e.loaded)
            do = "does" if broken == 1 else "do"
            note = f" ({count(broken, 'spec files')} {do} not load: see the overview)"
            raise HTTPException(404, f"{dag} is not a Sluice pipeline: no spec in the "
                                     f"monitor's pipelines folder defines it"
                                     f"{note if broken else ''}")  # fmt: skip
        return entry

    def view(
        dag: str, user: Any, requested: RequestedRun | None = None
    ) -> tuple[PipelineView, Path]:
        if not allowed(user, dag, "GET"):
            raise HTTPException(403, f"you may not read DAG {dag}")
        entry = pipeline(dag)
        rt = catalog.runtime(entry)
        page = pipeline_view(rt, dag, cache=cache, spec_file=str(entry.path), requested=requested)
        return page, entry.path

    @app.get("/", response_class=HTMLResponse)
    def overview(user: User) -> str:
        views, broken = [], []
        for dag, entry in catalog.pipelines().items():
            if not entry.loaded:  # a broken spec hides nothing but itself
                broken.append((entry.path.name, public_text(entry.error or "", places())))
                continue
            if not allowed(user, dag, "GET"):
                continue
            try:
                views.append(pipeline_view(catalog.runtime(entry), dag, cache=cache))
            except Exception as exc:
                where = server_places(entry.spec, folder)
                broken.append((dag, public_text(f"{type(exc).__name__}: {exc}", where)))
        return render_overview(views, broken)

    @app.get("/pipelines/{dag}", response_class=HTMLResponse)
    def pipeline_page(
        dag: str, user: User, message: str | None = None, error: str | None = None,
        all: bool = False, run: str | None = None, at: float | None = None,
    ) -> str:  # fmt: skip
        """``run``, ``at``: the run an action triggered, and when (in flight until the
        checkpoint store shows it)."""
        page, _ = view(dag, user, RequestedRun(run, at) if run and at is not None else None)
        limit = None if all else HISTORY_ROWS
        can_act = allowed(user, dag, "POST")
        return _render_pipeline(page, can_act=can_act, message=message, error=error,
                                history_limit=limit)  # fmt: skip

    @app.get("/api/pipelines/{dag}")
    def pipeline_json(dag: str, user: User) -> dict[str, Any]:
        page, path = view(dag, user)
        return {
            "pipeline": page.name, "dag_id": dag, "spec": path.name, "lag": page.lag,
            "unit": page.unit_name, "health": page.health().__dict__, "epochs": page.rows,
            "savepoints": page.savepoints, "last_refusal": page.refusal,
            "load_seconds": page.load_seconds,
        }  # fmt: skip

    # -- actions (sluice.monitor.actions): checked dry, confirmed, then triggered ----------

    def guard(request: Request, dag: str, user: Any) -> Any:
        """The runtime of ``dag`` for an action: same-origin POST by a user who may trigger."""
        _same_origin(request)
        if not allowed(user, dag, "GET") or not allowed(user, dag, "POST"):
            raise HTTPException(403, f"you may not trigger DAG {dag}")
        return catalog.runtime(pipeline(dag))

    def action_page(dag: str, user: Any, heading: str, *, error: str | None = None,
                    status: int = 200, **context: Any) -> HTMLResponse:  # fmt: skip
        page, _ = view(dag, user)
        context.setdefault("retraction", None)
        context.setdefault("deletion", None)
        context.setdefault("form", None)
        context.setdefault("value", "")
        body = _render_template(
            "action.html.j2", heading=heading, pipeline=page.name, dag=dag, error=error,
            actions=action_forms(page), inputs=html_inputs(), **context,
        )  # fmt: skip
        return HTMLResponse(body, status_code=status)

    def refused(dag: str, user: Any, heading: str, form: str, exc: InvalidRunRequest,
                value: Any, *, verb: str = "triggered") -> HTMLResponse:  # fmt: skip
        error = public_text(f"not {verb}: " + "; ".join(exc.problems), places(dag))
        return action_page(dag, user, heading, error=error, status=422, form=form,
                           value="" if value is None else value)  # fmt: skip

    @app.post("/pipelines/{dag}/savepoint")
    def take_savepoint(
        request: Request, dag: str, user: User, name: Annotated[str, Form()] = ""
    ) -> Response:
        rt = guard(request, dag, user)
        name = name.strip()
        try:  # the plan task's own checks (a taken name), and whether there is anything
            conf, taken = check_savepoint(rt, name)
        except InvalidRunRequest as exc:
            return refused(dag, user, "Take a savepoint", "take-savepoint", exc, name)
        ok, text, run = _trigger(request, dag, conf)
        if ok:
            text += f"; savepoint {name!r} will capture {taken.text}"
        return _back(dag, ok, public_text(text, places(dag)), run)

    @app.post("/pipelines/{dag}/restore")
    def restore(
        request: Request, dag: str, user: User, kind: Annotated[str, Form()] = "",
        epoch: Annotated[str | None, Form()] = None,
        savepoint: Annotated[str | None, Form()] = None,
        confirm: Annotated[str | None, Form()] = None,
    ) -> Response:  # fmt: skip
        """First POST: the confirmation page (what the restore retracts, and a token of it);
        a POST with the token of what the store says now: the trigger."""
        rt = guard(request, dag, user)
        if kind not in ("checkpoint", "savepoint"):
            raise HTTPException(400, "restore needs kind=checkpoint or kind=savepoint")
        value: Any = savepoint if kind == "savepoint" else _whole(epoch)
        conf = restore_conf(kind, value if kind == "checkpoint" else None, savepoint)
        heading = f"Restore from {kind}"
        try:
            retraction = preview_restore(rt, conf)
        except InvalidRunRequest as exc:
            return refused(dag, user, heading, f"restore-{kind}", exc, value)
        fields = [("kind", kind), ("epoch" if kind == "checkpoint" else "savepoint", value)]
        if confirm is None or confirm != retraction.token:
            stale = None if confirm is None else (
                "not triggered: the checkpoint store changed since you confirmed (latest "
                f"epoch now {retraction.latest}); this is what the restore retracts now: "
                "confirm again to go ahead"
            )  # fmt: skip
            return action_page(dag, user, f"{heading}: confirm", error=stale,
                               status=409 if stale else 200, retraction=retraction,
                               fields=fields)  # fmt: skip
        ok, text, run = _trigger(request, dag, retraction.conf)
        text = f"{text}: {retraction.outcome}" if ok else text
        return _back(dag, ok, public_text(text, places(dag)), run)

    @app.post("/pipelines/{dag}/delete-savepoint")
    def remove_savepoint(
        request: Request, dag: str, user: User, name: Annotated[str, Form()] = "",
        confirm: Annotated[str | None, Form()] = None,
    ) -> Response:  # fmt: skip
        """First POST: the confirmation page; a POST with its token: the delete."""
        rt = guard(request, dag, user)
        heading = f"Delete savepoint {name}"
        try:
            deletion = preview_delete(rt, name)
        except InvalidRunRequest as exc:
            return refused(dag, user, heading, "delete-savepoint", exc, name, verb="deleted")
        if confirm != deletion.token:
            stale = None if confirm is None else (
                "not deleted: the savepoint changed since you confirmed; confirm again"
            )  # fmt: skip
            return action_page(dag, user, f"{heading}: confirm", error=stale,
                               status=409 if stale else 200, deletion=deletion)  # fmt: skip
        try:
            delete_savepoint(rt, name)
        except SavepointError as exc:
            return _back(dag, False, public_text(f"not deleted: {exc}", places(dag)))
        _log.info("user %s deleted savepoint %r (epoch %d) of pipeline %s", _name(user), name,
                  deletion.savepoint.epoch, rt.name)  # fmt: skip
        return _back(dag, True, f"deleted savepoint {name!r} (epoch {deletion.savepoint.epoch})")

    _error_pages(app, places)
    return app


def _error_pages(app: Any, places: Callable[[str | None], dict[str, str]]) -> None:
    """Refusals and failures of the pages as a styled page (the Airflow tab shows it), never
    with a server path (``places(dag)``: what to say instead); the JSON API keeps FastAPI's
    JSON answers."""

    def page(request: Request, status: int, message: str, headers: Any = None) -> Response:
        root = request.scope.get("root_path", "")
        shown = public_text(message, places(request.path_params.get("dag")))
        return HTMLResponse(render_error(status, shown, overview=f"{root}/"),
                            status_code=status, headers=headers)  # fmt: skip

    def is_api(request: Request) -> bool:
        path = request.url.path.removeprefix(request.scope.get("root_path", ""))
        return path.startswith("/api/")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if is_api(request):
            return await http_exception_handler(request, exc)
        return page(request, exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_form(request: Request, exc: RequestValidationError) -> Response:
        if is_api(request):
            return await request_validation_exception_handler(request, exc)
        problems = "; ".join(
            f"{e['loc'][-1]}: {e['msg']}" for e in exc.errors() if e.get("loc")
        )  # fmt: skip
        return page(request, 400, f"not triggered: {problems}")

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:
        return page(request, 500, f"{type(exc).__name__}: {exc}")


class SlashRedirect:
    """ASGI middleware for Airflow's root app: ``/sluice`` redirects to ``/sluice/``. A
    mounted app answers only below its prefix; without this, Airflow's UI catch-all serves a
    blank page for the bare prefix (plugins/sluice_monitor.py installs it)."""

    def __init__(self, app: Any, prefix: str = "/sluice") -> None:
        self.app, self.prefix = app, prefix.rstrip("/")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in (
            self.prefix, scope.get("root_path", "") + self.prefix
        ):  # fmt: skip
            query = scope.get("query_string", b"").decode()
            target = self.prefix.rsplit("/", 1)[-1] + "/" + (f"?{query}" if query else "")
            await RedirectResponse(target, status_code=307)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _load_spec(path: Path) -> Any:
    from sluice.spec import load_spec

    return load_spec(path)


def _dag_id(spec: Any) -> str:
    from sluice.airflow.factory import dag_id

    return dag_id(spec.name)


def _runtime(path: Path) -> Any:
    from sluice.airflow.tasks import runtime_for

    return runtime_for(str(path), None)  # what the DAG's tasks open (connections included)


def _back(dag: str, ok: bool, text: str, run: str | None = None) -> RedirectResponse:
    """To the pipeline's page, with ``text`` as its message (or error) banner; ``run``: the
    run just triggered, which that page shows in flight (and refreshes for) until the
    checkpoint store shows it."""
    query: dict[str, Any] = {"message" if ok else "error": text}
    if run is not None:
        query.update(run=run, at=f"{time.time():.3f}")
    return RedirectResponse(f"../{quote(dag, safe='')}?{urlencode(query)}", status_code=303)


def _whole(text: str | None) -> Any:
    """A form's whole number as an int; anything else as given (the run request says why)."""
    if text is None or not text.strip():
        return None
    try:
        return int(text.strip())
    except ValueError:
        return text


def _name(user: Any) -> str:
    try:
        return str(user.get_name())
    except Exception:
        return "?"


def _same_origin(request: Any) -> None:
    """Refuse a cross-site form POST: Origin (else Referer) must be this server."""
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is None and request.headers.get("referer"):
        parts = urlsplit(request.headers["referer"])
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin != own:
        raise HTTPException(403, "actions must come from the monitor's own pages")


def _token(request: Any) -> str:
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return str(header[7:])
    return str(request.cookies.get(COOKIE_NAME_JWT_TOKEN, ""))


def _trigger(request: Any, dag: str, conf: dict[str, Any]) -> tuple[bool, str, str | None]:
    """Trigger ``dag`` with ``conf`` through Airflow's REST API as the requesting user:
    (triggered, what to tell the user, the new run's id)."""
    import httpx
    from airflow.configuration import conf as airflow_conf

    base = (airflow_conf.get("api", "base_url", fallback="") or "").rstrip("/")
    if not base:
        base = f"{request.url.scheme}://{request.url.netloc}"
    try:
        response = httpx.post(
            f"{base}/api/v2/dags/{quote(dag, safe='')}/dagRuns",
            json={"logical_date": None, "conf": conf},
            headers={"Authorization": f"Bearer {_token(request)}"},
            timeout=TRIGGER_TIMEOUT_S,
        )
    except httpx.HTTPError as exc:
        text = f"not triggered: Airflow's REST API did not answer ({type(exc).__name__})"
        return False, text, None
    if response.status_code in (200, 201):
        run = response.json().get("dag_run_id")
        return True, f"triggered run {run} with conf {conf}", str(run) if run else None
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return False, f"Airflow refused the trigger ({response.status_code}): {detail}", None


def default_pipelines_dir(repo_root: Path) -> Path:
    """Where the DAG file finds the specs: ``$SLUICE_PIPELINES_DIR`` or include/pipelines."""
    from sluice.airflow import PIPELINES_DIR_ENV

    return Path(os.environ.get(PIPELINES_DIR_ENV) or repo_root / "include" / "pipelines")
