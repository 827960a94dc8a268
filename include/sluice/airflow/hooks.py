"""``SluiceServeHook``: a ``sluice serve`` server from an Airflow connection.

The connection (default id ``sluice_serve``, type ``http``): ``host``, ``port``, ``schema`` =
``http`` or ``https``, ``password`` = the server's token; optional extra ``{"ca_file": ...}``
for a server whose certificate a private CA signed, ``{"timeout": seconds}`` per HTTP call.
``python -m sluice.airflow.provision --serve-url ...`` creates it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from sluice.serve import DEFAULT_PORT, ServeClient

__all__ = ["DEFAULT_SERVE_CONN", "SluiceServeHook"]

DEFAULT_SERVE_CONN = "sluice_serve"


class SluiceServeHook(BaseHook):
    conn_name_attr = "serve_conn_id"
    default_conn_name = DEFAULT_SERVE_CONN
    conn_type = "http"
    hook_name = "Sluice serve"

    def __init__(self, serve_conn_id: str = DEFAULT_SERVE_CONN) -> None:
        super().__init__()
        self.serve_conn_id = serve_conn_id

    def get_conn(self) -> ServeClient:
        """The client of the server the connection names (its token never leaves it)."""
        conn: Any = self.get_connection(self.serve_conn_id)
        scheme = (conn.schema or "http").lower()
        where = f"connection {self.serve_conn_id!r}"
        if scheme not in ("http", "https"):
            raise AirflowException(f"{where}: schema {conn.schema!r} is not http or https")
        if not conn.host:
            raise AirflowException(f"{where}: no host (the sluice serve server's address)")
        if not conn.password:
            raise AirflowException(f"{where}: no password (the sluice serve token)")
        extra = conn.extra_dejson or {}
        url = f"{scheme}://{conn.host}:{conn.port or DEFAULT_PORT}"
        timeout = float(extra.get("timeout") or 30.0)
        return ServeClient(url, conn.password, timeout=timeout, ca_file=extra.get("ca_file"))
