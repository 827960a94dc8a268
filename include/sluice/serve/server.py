"""``sluice serve``: one long-lived Spark session that runs the process step of planned
epochs, one HTTP request per attempt (docs/warm-execution.md).

======  ==========================  ==========================================================
method  path                        what
======  ==========================  ==========================================================
POST    /v1/attempts                start an attempt: ``{spec, epoch, run_id, connections}``
GET     /v1/attempts/<id>?wait=S    its status (held up to S seconds while it runs)
DELETE  /v1/attempts/<id>           cancel it (Spark job group); recorded FAILED
GET     /v1/attempts                recent requests
GET     /v1/health?gc=1&threads=1   Spark app id, master, uptime, counts, driver heap
GET     /livez                      ``ok`` without a token (for liveness probes)
======  ==========================  ==========================================================

Everything but ``/livez`` needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import ssl
import threading
import time
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sluice import __version__
from sluice.serve.attempts import Attempt, AttemptRegistry, Busy
from sluice.serve.config import ServeConfig
from sluice.serve.model import MAX_WAIT_S, AttemptRequest, BadRequest
from sluice.serve.security import OutsideRoots, SpecRoots, bearer_matches, load_token
from sluice.spec import SpecError, load_spec

__all__ = ["ServeHTTPServer", "health", "run"]

log = logging.getLogger("sluice.serve")

MAX_BODY_BYTES = 1 << 20
SHUTDOWN_GRACE_S = 30.0
ATTEMPTS = "/v1/attempts"
# Pipelines share the session's cores: FAIR between their pools (see attempts.POOL).
SESSION_CONF = {"spark.scheduler.mode": "FAIR"}


class HttpError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        self.status = status
        self.message = message
        self.extra = extra
        super().__init__(message)


class ServeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, config: ServeConfig, token: str, roots: SpecRoots) -> None:
        super().__init__((config.host, config.port), Handler)
        self.config = config
        self.token = token
        self.roots = roots
        self.registry: AttemptRegistry | None = None  # set once Spark is up
        self.started = time.time()
        self.started_monotonic = time.monotonic()


class Handler(BaseHTTPRequestHandler):
    server: ServeHTTPServer
    server_version = "sluice-serve"
    sys_version = ""
    protocol_version = "HTTP/1.0"
    timeout = 120  # seconds a client may take to send its request (and a TLS handshake)

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):  # here, not in the accept loop
            self.connection.do_handshake()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- routing ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        try:
            if method == "GET" and url.path == "/livez":
                self._send(200, {"status": "ok"})
                return
            if not bearer_matches(self.headers.get("Authorization"), self.server.token):
                raise HttpError(401, "missing or wrong bearer token (Authorization: Bearer ...)")
            status, body = self._route(method, url.path, parse_qs(url.query))
            self._send(status, body)
        except HttpError as exc:
            if exc.status != 404:
                log.info("%s %s refused: HTTP %d: %s", method, url.path, exc.status, exc.message)
            self._send(exc.status, {"error": exc.message, **exc.extra})
        except Exception as exc:  # a bug of ours: say so without details that may hold secrets
            log.exception("%s %s: internal error", method, url.path)
            self._send(500, {"error": f"internal error ({type(exc).__name__}); see server log"})

    def _route(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        registry = self.server.registry
        assert registry is not None
        if path == "/v1/health" and method == "GET":
            body = health(self.server, registry, gc=_flag(query, "gc"))
            if _flag(query, "threads"):
                body["jvm_thread_groups"] = jvm_thread_groups(registry)
            return 200, body
        if path == ATTEMPTS and method == "GET":
            return 200, {"attempts": [a.to_dict() for a in registry.listing()]}
        if path == ATTEMPTS and method == "POST":
            return 202, self._start(registry)
        if path.startswith(ATTEMPTS + "/") and method in ("GET", "DELETE"):
            wait = min(_number(query, "wait"), MAX_WAIT_S)
            attempt = registry.get(path[len(ATTEMPTS) + 1 :])
            if attempt is None:
                raise HttpError(404, f"no attempt request {path[len(ATTEMPTS) + 1 :]!r} "
                                "(unknown, or forgotten: the server restarted?)")  # fmt: skip
            if method == "DELETE":
                registry.cancel(attempt.id)
                return (200 if attempt.status.done else 202), _status(registry, attempt)
            attempt.done.wait(wait)
            return 200, _status(registry, attempt)
        raise HttpError(404, f"no route {method} {path}")

    def _start(self, registry: AttemptRegistry) -> dict[str, Any]:
        try:
            request = AttemptRequest.from_dict(self._body())
            spec_path = self.server.roots.resolve(request.spec)
        except BadRequest as exc:
            raise HttpError(400, f"bad attempt request: {exc}") from exc
        except OutsideRoots as exc:
            raise HttpError(403, str(exc), spec=exc.path) from exc
        try:
            spec = load_spec(spec_path)
        except SpecError as exc:
            raise HttpError(422, str(exc)) from exc
        resolved = AttemptRequest(str(spec_path), request.epoch, request.run_id,
                                  request.connections)  # fmt: skip
        try:
            attempt = registry.submit(resolved, spec)
        except Busy as exc:
            running = _status(registry, exc.running) if exc.running else None
            raise HttpError(exc.status, str(exc), running=running) from exc
        return _status(registry, attempt)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            raise HttpError(411, "a JSON body with Content-Length is required") from None
        if length > MAX_BODY_BYTES:
            raise HttpError(413, f"body of {length} bytes; at most {MAX_BODY_BYTES}")
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except ValueError as exc:
            raise HttpError(400, f"the body is not JSON: {exc}") from exc

    def _send(self, status: int, body: Any) -> None:
        data = (json.dumps(body, sort_keys=True, default=str) + "\n").encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="sluice-serve"')
        self.end_headers()
        self.wfile.write(data)


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["0"])[-1].lower() in ("1", "true", "yes")


def _number(query: dict[str, list[str]], name: str) -> float:
    raw = (query.get(name) or ["0"])[-1]
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise HttpError(400, f"{name}={raw!r} is not a number of seconds")
    return max(0.0, value)


def _status(registry: AttemptRegistry, attempt: Attempt) -> dict[str, Any]:
    body = attempt.to_dict()
    if not attempt.status.done:
        body["spark_jobs"] = registry.spark_jobs(attempt)
    return body


def health(server: ServeHTTPServer, registry: AttemptRegistry, *, gc: bool) -> dict[str, Any]:
    """What ops (and tests) look at; ``gc``: collect garbage before measuring the heap."""
    context = registry.spark.sparkContext
    jvm: Any = context._jvm
    if gc:
        jvm.java.lang.System.gc()
    management = jvm.java.lang.management.ManagementFactory
    heap = management.getMemoryMXBean().getHeapMemoryUsage()
    counts = {str(k): v for k, v in registry.counts.items()}
    return {
        "status": "ok",
        "pid": os.getpid(),
        "sluice_version": __version__,
        "spark_version": context.version,
        "spark_master": context.master,
        "spark_application_id": context.applicationId,
        "started_at": server.started,
        "uptime_s": round(time.monotonic() - server.started_monotonic, 3),
        "epochs": {**counts, "running": registry.running()},
        "driver_heap": {
            "used_bytes": int(heap.getUsed()),
            "committed_bytes": int(heap.getCommitted()),
            "max_bytes": int(heap.getMax()),
        },
        "jvm_threads": int(management.getThreadMXBean().getThreadCount()),
        "python_threads": threading.active_count(),
        "pipelines_dirs": [str(r) for r in server.roots.roots],
    }


def jvm_thread_groups(registry: AttemptRegistry, top: int = 12) -> dict[str, int]:
    """The driver JVM's threads by name, digits folded (``shuffle-exchange-N``): Spark's cached
    pools grow with load and shrink after 60 s idle; ``Thread-N`` are mostly Py4J's."""
    jvm: Any = registry.spark.sparkContext._jvm
    infos = jvm.java.lang.management.ManagementFactory.getThreadMXBean().dumpAllThreads(
        False, False
    )
    names = Counter(re.sub(r"[0-9]+", "N", str(info.getThreadName())) for info in infos)
    return dict(names.most_common(top))


def run(config: ServeConfig) -> int:
    """Bind, start Spark, serve until SIGTERM / SIGINT, then cancel what runs and stop."""
    from sluice.jobs import ship_package
    from sluice.protocol import Faults
    from sluice.spark import spark_session

    token, token_source = load_token(config.state_dir)
    roots = SpecRoots.of(config.pipelines_dirs)
    httpd = ServeHTTPServer(config, token, roots)  # bind first: a taken port fails fast
    if config.tls_cert and config.tls_key:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(config.tls_cert, config.tls_key)
        httpd.socket = context.wrap_socket(
            httpd.socket, server_side=True, do_handshake_on_connect=False
        )
    elif config.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving plain HTTP on %s: the token and connection URIs travel unencrypted "
            "(use --tls-cert/--tls-key off a private network)",
            config.host,
        )
    conf = {**SESSION_CONF, **dict(config.spark_conf)}
    spark = spark_session("sluice-serve", master=config.master, extra_conf=conf)
    registry = AttemptRegistry(
        spark,
        executor_sluice=ship_package(spark),
        faults=Faults.from_env(),
        max_running=config.max_running,
    )
    httpd.registry = registry
    _stop_on_signals(httpd)
    log.info("Spark %s, master %s, application %s", spark.version,
             spark.sparkContext.master, spark.sparkContext.applicationId)  # fmt: skip
    log.info("specs under: %s", ", ".join(str(r) for r in roots.roots))
    log.info("token: %s", token_source)
    print(f"sluice serve: ready at {config.url} (token: {token_source})", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.5)
    finally:
        _stop(httpd, registry)
    return 0


def _stop(httpd: ServeHTTPServer, registry: AttemptRegistry) -> None:
    """Cancel what runs, then stop Spark. A signal sent to the whole process group (Ctrl-C,
    ``kill -- -PGID``, dumb-init) has stopped the JVM already: nothing is left to tell it."""
    httpd.server_close()
    try:
        registry.shutdown(SHUTDOWN_GRACE_S)
        registry.spark.stop()
    except Exception as exc:
        log.info("Spark was already stopped (%s)", type(exc).__name__)
    log.info("stopped")


def _stop_on_signals(httpd: ServeHTTPServer) -> None:
    def stop(signum: int, _frame: Any) -> None:
        log.info("%s: stopping (running attempts are cancelled)", signal.Signals(signum).name)
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
