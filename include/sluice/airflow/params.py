"""Airflow's trigger form of a pipeline's DAG, derived from the run request's one declaration
(:class:`~sluice.protocol.request.RunRequest`); :func:`sluice.airflow.factory.trigger_params`
makes the DAG's ``Param`` objects of it. No Airflow import here."""

from __future__ import annotations

from typing import Any

from sluice.protocol.request import RunRequest

__all__ = ["airflow_params"]


def airflow_params() -> dict[str, dict[str, Any]]:
    """The trigger form: for each field, the keyword arguments of an Airflow ``Param``
    (JSON-schema ``type``, ``enum``, ``minimum``, ``title``, ``description``). Defaults
    make a scheduled run: continue from the latest checkpoint."""
    params: dict[str, dict[str, Any]] = {}
    properties = RunRequest.model_json_schema()["properties"]
    for name, info in RunRequest.model_fields.items():
        schema = properties[name]
        options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
        kind = options[0].get("type", "string")
        form: dict[str, Any] = {
            "default": info.default,
            "type": ["null", kind] if info.default is None else kind,
            "title": info.title,
            "description": info.description,
        }
        if "enum" in options[0]:
            form["enum"] = list(options[0]["enum"])
        if "minimum" in options[0]:
            form["minimum"] = options[0]["minimum"]
        params[name] = form
    return params
