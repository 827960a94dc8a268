"""``ServeClient``: start, follow and cancel attempts on a ``sluice serve`` server.

The standard library's HTTP and the wire models of :mod:`sluice.serve.model` (pydantic; no
Airflow, no Spark), so a DAG task or a benchmark can import it cheaply::

    client = ServeClient("http://127.0.0.1:8790", token)
    summary = client.process("include/pipelines/clicks.yaml", epoch=3, run_id="manual__1")

``process`` returns what ``spark-submit jobs/run_epoch.py`` prints after ``SLUICE_RESULT``, or
raises :class:`AttemptFailed` with the engine's message (:class:`AttemptCancelled` when it was
cancelled), :class:`ServeUnavailable` when the server cannot be reached or died, and
:class:`ServeRefused` (:class:`PipelineBusy` for HTTP 409) when it refused the request.
Requests are built from the models (an invalid one raises :class:`BadRequest` before it is
sent); answers are parsed into them and returned as plain JSON dicts.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from sluice.serve.exceptions import (
    AttemptCancelled,
    AttemptFailed,
    PipelineBusy,
    ServeError,
    ServeRefused,
    ServeUnavailable,
)
from sluice.serve.model import (
    DEFAULT_PORT,
    MAX_WAIT_S,
    AttemptList,
    AttemptRequest,
    AttemptView,
    ErrorBody,
    RequestStatus,
    ServerHealth,
)

__all__ = ["ServeClient"]

URL_ENV = "SLUICE_SERVE_URL"
TOKEN_FILE_ENV = "SLUICE_SERVE_TOKEN_FILE"
Answer = TypeVar("Answer", bound=BaseModel)


class ServeClient:
    """A client of one server. ``timeout``: seconds for one HTTP exchange (a long poll adds
    its ``wait``); ``ca_file``: the CA bundle that signed an ``https`` server's certificate."""

    def __init__(
        self, url: str, token: str, *, timeout: float = 30.0, ca_file: str | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout
        handlers: list[Any] = [urllib.request.ProxyHandler({})]  # straight to the server
        if self.url.startswith("https://"):
            context = ssl.create_default_context(cafile=ca_file)
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"ServeClient({self.url!r})"  # never the token

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **kwargs: Any) -> ServeClient:
        """``$SLUICE_SERVE_URL`` (default ``http://127.0.0.1:8790``) with ``$SLUICE_SERVE_TOKEN``,
        else the token file ``$SLUICE_SERVE_TOKEN_FILE`` (default: the server's default)."""
        url = environ.get(URL_ENV) or f"http://127.0.0.1:{DEFAULT_PORT}"
        token = environ.get("SLUICE_SERVE_TOKEN")
        if not token:
            state = environ.get("SLUICE_SERVE_STATE_DIR") or str(Path.home() / ".sluice/serve")
            path = Path(environ.get(TOKEN_FILE_ENV) or Path(state) / "token")
            try:
                token = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ServeError(f"no $SLUICE_SERVE_TOKEN and cannot read {path}: {exc}") from exc
        return cls(url, token, **kwargs)

    # -- the API ------------------------------------------------------------------------------

    def start(
        self,
        spec_path: str | Path,
        epoch: int,
        run_id: str | None = None,
        connections: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Start an attempt; returns its status (``id``, ``status``: running)."""
        body = {"spec": os.path.abspath(spec_path), "epoch": int(epoch), "run_id": run_id,
                "connections": dict(connections or {})}  # fmt: skip
        request = AttemptRequest.from_dict(body)
        return _dump(self._call("POST", "/v1/attempts", AttemptView, request.to_dict()))

    def status(self, request_id: str, wait: float = 0.0) -> dict[str, Any]:
        """The request's status; while it runs, held up to ``wait`` seconds for it to end."""
        path = f"/v1/attempts/{quote(request_id, safe='')}?wait={wait:g}"
        return _dump(self._call("GET", path, AttemptView, timeout=self.timeout + wait))

    def wait(self, request_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Long-poll until the request ends (or ``timeout`` seconds pass: its last status)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = MAX_WAIT_S if deadline is None else deadline - time.monotonic()
            status = self.status(request_id, wait=max(0.0, min(MAX_WAIT_S, left)))
            if RequestStatus(status["status"]).done or left <= 0:
                return status

    @staticmethod
    def result(status: Mapping[str, Any]) -> dict[str, Any]:
        """The summary of a succeeded request, or the failure raised."""
        view = AttemptView.model_validate(status)
        error = view.error.model_dump() if view.error else {}
        if view.status is RequestStatus.SUCCEEDED:
            return dict(view.summary or {})
        if view.status is RequestStatus.CANCELLED:
            raise AttemptCancelled(view.id, error)
        if view.status is RequestStatus.FAILED:
            raise AttemptFailed(view.id, error)
        raise ServeError(f"attempt request {view.id} is still running")

    def process(
        self,
        spec_path: str | Path,
        epoch: int,
        run_id: str | None = None,
        connections: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One attempt of planned epoch ``epoch``, start to end: the summary ``run_epoch.py``
        prints. Past ``timeout`` seconds the attempt is cancelled and that is raised."""
        started = self.start(spec_path, epoch, run_id, connections)
        status = self.wait(started["id"], timeout)
        if not RequestStatus(status["status"]).done:
            self.cancel(started["id"])
            status = self.wait(started["id"], MAX_WAIT_S)
        return self.result(status)

    def cancel(self, request_id: str) -> dict[str, Any]:
        path = f"/v1/attempts/{quote(request_id, safe='')}"
        return _dump(self._call("DELETE", path, AttemptView))

    def attempts(self) -> list[dict[str, Any]]:
        return [_dump(a) for a in self._call("GET", "/v1/attempts", AttemptList).attempts]

    def health(self, gc: bool = False, threads: bool = False) -> dict[str, Any]:
        """``gc``: a full GC first (for a heap figure); ``threads``: the JVM's threads by name."""
        query = "&".join(k for k, on in (("gc=1", gc), ("threads=1", threads)) if on)
        return _dump(self._call("GET", "/v1/health" + (f"?{query}" if query else ""), ServerHealth))

    # -- HTTP ---------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        answer: type[Answer],
        body: Any = None,
        timeout: float | None = None,
    ) -> Answer:
        """One exchange; the answer parsed into ``answer`` (a body that is no such answer, as
        a server that went away mid-response, is :class:`ServeUnavailable`)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        where = f"{method} {path.split('?')[0]}"
        try:
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ServeUnavailable(self.url, f"{where}: {reason}") from exc
        try:
            return answer.model_validate_json(raw)
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]
            place = ".".join(str(p) for p in problem["loc"]) or "(body)"
            raise ServeUnavailable(self.url, f"{where}: not a sluice serve {answer.__name__} "
                                   f"({place}: {problem['msg']})") from exc  # fmt: skip

    def _refusal(self, exc: urllib.error.HTTPError) -> ServeRefused:
        try:
            raw = exc.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        try:
            body = ErrorBody.model_validate_json(raw or b"{}").to_dict()
        except ValidationError:  # not our error shape (a proxy's page?): the status says it
            body = {}
        message = str(body.get("error") or exc.reason)
        if exc.code == 409 and body.get("running"):
            return PipelineBusy(self.url, exc.code, message, body)
        return ServeRefused(self.url, exc.code, message, body)


def _dump(answer: BaseModel) -> dict[str, Any]:
    return answer.model_dump(mode="json")
