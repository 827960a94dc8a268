"""The settings of ``sluice serve`` and its command-line options (light: no Spark import, so
``sluice --help`` stays quick)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sluice.serve.exceptions import ServeError
from sluice.serve.model import DEFAULT_PORT

__all__ = ["ServeConfig", "add_arguments", "config_from_args", "configure_logging"]


@dataclass(frozen=True)
class ServeConfig:
    host: str
    port: int
    pipelines_dirs: tuple[str, ...]
    state_dir: Path
    master: str | None = None
    spark_conf: tuple[tuple[str, str], ...] = ()
    max_running: int = 4
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.host}:{self.port}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default_dir = os.environ.get("SLUICE_PIPELINES_DIR") or "include/pipelines"
    default_state = os.environ.get("SLUICE_SERVE_STATE_DIR") or str(Path.home() / ".sluice/serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    parser.add_argument(
        "--pipelines-dir", action="append", default=None, metavar="DIR",
        help=f"serve only specs under DIR (repeatable; default {default_dir})",
    )  # fmt: skip
    parser.add_argument(
        "--state-dir", type=Path, default=Path(default_state),
        help=f"where the token file is created when $SLUICE_SERVE_TOKEN is unset ({default_state})",
    )  # fmt: skip
    parser.add_argument("--master", default=None, help="Spark master (default: local[2])")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting for the server's session, e.g. spark.driver.memory=2g (repeatable)",
    )  # fmt: skip
    parser.add_argument("--max-running", type=int, default=4, help="attempts at once (default 4)")
    parser.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", default=None, help="... and this private key")
    parser.set_defaults(pipelines_default=default_dir)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ServeError("--tls-cert and --tls-key go together")
    conf = []
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ServeError(f"--conf {item!r}: expected KEY=VALUE")
        conf.append((key.strip(), value))
    return ServeConfig(
        host=args.host,
        port=args.port,
        pipelines_dirs=tuple(args.pipelines_dir or [args.pipelines_default]),
        state_dir=args.state_dir,
        master=args.master,
        spark_conf=tuple(conf),
        max_running=max(1, args.max_running),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
