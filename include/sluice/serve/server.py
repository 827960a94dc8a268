"""``sluice serve``: one long-lived Spark session that runs the process step of planned
epochs, one HTTP request per attempt (docs/warm-execution.md). :func:`run` binds the port,
starts Spark and serves the app of :mod:`sluice.serve.app` with uvicorn (TLS from
``--tls-cert/--tls-key``) until SIGTERM / SIGINT.
"""

from __future__ import annotations

import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from types import FrameType

import uvicorn

from sluice.serve.app import ServeState, create_app
from sluice.serve.attempts import AttemptRegistry
from sluice.serve.config import ServeConfig
from sluice.serve.security import SpecRoots, load_token

__all__ = ["run"]

log = logging.getLogger("sluice.serve")

SHUTDOWN_GRACE_S = 30.0
# Pipelines share the session's cores: FAIR between their pools (see attempts.POOL).
SESSION_CONF = {"spark.scheduler.mode": "FAIR"}


class _Server(uvicorn.Server):
    """uvicorn's server, stopped as ``sluice serve`` always stopped: the first SIGTERM / SIGINT
    cancels the running attempts at once (their long polls then answer ``cancelled``) and stops
    accepting; :func:`run` then waits for the attempts and stops Spark. The signal is not raised
    again afterwards (uvicorn's own habit), so the exit status stays 0."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_stop = on_stop
        self.deadline: float | None = None  # monotonic: SHUTDOWN_GRACE_S after the signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            log.info("%s: stopping (running attempts are cancelled)", signal.Signals(sig).name)
            self.deadline = time.monotonic() + SHUTDOWN_GRACE_S
            threading.Thread(target=self._cancel, name="cancel-attempts", daemon=True).start()
        elif sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop waiting for open requests
        self.should_exit = True

    def _cancel(self) -> None:
        try:
            self.on_stop()
        except Exception as exc:  # Ctrl-C to the process group has stopped the JVM already
            log.info("could not cancel the running attempts (%s)", type(exc).__name__)


def run(config: ServeConfig) -> int:
    """Bind, start Spark, serve until SIGTERM / SIGINT, then cancel what runs and stop."""
    from sluice.jobs import ship_package
    from sluice.protocol import Faults
    from sluice.spark import spark_session

    token, token_source = load_token(config.state_dir)
    roots = SpecRoots.of(config.pipelines_dirs)
    sock = _bind(config)  # bind first: a taken port (or a bad certificate) fails fast
    _check_tls(config)
    conf = {**SESSION_CONF, **dict(config.spark_conf)}
    spark = spark_session("sluice-serve", master=config.master, extra_conf=conf)
    registry = AttemptRegistry(
        spark,
        executor_sluice=ship_package(spark),
        faults=Faults.from_env(),
        max_running=config.max_running,
    )
    server = _Server(_uvicorn_config(config, ServeState(token, roots, registry)),
                     on_stop=registry.cancel_all)  # fmt: skip
    log.info("Spark %s, master %s, application %s", spark.version,
             spark.sparkContext.master, spark.sparkContext.applicationId)  # fmt: skip
    log.info("specs under: %s", ", ".join(str(r) for r in roots.roots))
    log.info("token: %s", token_source)
    print(f"sluice serve: ready at {config.url} (token: {token_source})", flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        left = SHUTDOWN_GRACE_S if server.deadline is None else server.deadline - time.monotonic()
        _stop(registry, max(0.0, left))
    return 0


def _bind(config: ServeConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError:
        sock.close()
        raise
    sock.listen(64)
    return sock


def _check_tls(config: ServeConfig) -> None:
    if config.tls_cert and config.tls_key:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(config.tls_cert, config.tls_key)
    elif config.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving plain HTTP on %s: the token and connection URIs travel unencrypted "
            "(use --tls-cert/--tls-key off a private network)",
            config.host,
        )


def _uvicorn_config(config: ServeConfig, state: ServeState) -> uvicorn.Config:
    """TLS from ``--tls-cert/--tls-key``; our logging (uvicorn's access log with ``-v`` only);
    open requests get :data:`SHUTDOWN_GRACE_S` to finish after a signal."""
    return uvicorn.Config(
        create_app(state),
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        log_config=None,
        access_log=log.isEnabledFor(logging.DEBUG),
        server_header=False,
        lifespan="off",
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE_S),
    )


def _stop(registry: AttemptRegistry, grace_s: float) -> None:
    """Cancel what runs, wait up to ``grace_s`` for it, then stop Spark. A signal sent to the
    whole process group (Ctrl-C, ``kill -- -PGID``, dumb-init) has stopped the JVM already:
    nothing is left to tell it."""
    try:
        registry.shutdown(grace_s)
        registry.spark.stop()
    except Exception as exc:
        log.info("Spark was already stopped (%s)", type(exc).__name__)
    log.info("stopped")
