"""Connection ids -> URIs: what a spec's ``connection:`` names resolve to.

Airflow defines connections in its metadata DB, a secrets backend or the environment
(``AIRFLOW_CONN_<ID>``, URI or JSON form); outside Airflow, ``SLUICE_CONN_<ID>`` does. Sinks and
sources get plain URIs (``postgresql://``, ``kafka://``); nothing here talks to Airflow
(:func:`sluice.airflow.tasks.spec_connections` asks Airflow for the ids the environment lacks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import quote, urlencode

__all__ = ["connection_uri", "connections_from_env"]


def connections_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """Connection ids -> URIs from ``SLUICE_CONN_<ID>`` and, as Airflow defines them in the
    environment, ``AIRFLOW_CONN_<ID>`` (URI or JSON form); ids are lower case."""
    found: dict[str, str] = {}
    for prefix in ("AIRFLOW_CONN_", "SLUICE_CONN_"):  # SLUICE_CONN_ wins
        for name, value in env.items():
            if name.startswith(prefix) and value:
                found[name[len(prefix) :].lower()] = connection_uri(value)
    return found


def connection_uri(value: str) -> str:
    """A connection's URI from Airflow's URI or JSON form (``postgres://`` becomes
    ``postgresql://``)."""
    value = value.strip()
    if value.startswith("{"):
        data = json.loads(value)
        scheme = data.get("conn_type") or "postgresql"
        if scheme == "kafka":  # the client settings are the extra (Airflow's kafka type)
            extra = data.get("extra") or {}
            extra = json.loads(extra) if isinstance(extra, str) else extra
            user = quote(str(data.get("login") or ""), safe="")
            password = quote(str(data.get("password") or ""), safe="")
            auth = f"{user}:{password}@" if user or password else ""
            host = f"{data.get('host') or ''}" + (f":{data['port']}" if data.get("port") else "")
            return f"kafka://{auth}{host}/?{urlencode({'__extra__': json.dumps(extra)})}"
        user = quote(str(data.get("login") or ""), safe="")
        password = quote(str(data.get("password") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        port = f":{data['port']}" if data.get("port") else ""
        value = (
            f"{scheme}://{auth}{data.get('host') or 'localhost'}{port}/{data.get('schema') or ''}"
        )
    for alias in ("postgres://", "postgresql+psycopg2://"):
        if value.startswith(alias):
            value = "postgresql://" + value[len(alias) :]
    return value
