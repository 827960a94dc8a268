"""Sluice's checkpoint monitor in the Airflow UI (docs/monitor.md).

Thin by design: the pages live in ``sluice.airflow.monitor``; this file mounts them at
``/sluice`` on Airflow's API server and adds two entries to the UI: "Sluice pipelines" in the
navigation (the overview) and a "Checkpoints" tab on every DAG's page (a pipeline's history;
DAGs that are not Sluice pipelines say so there). ``/sluice`` redirects to ``/sluice/``.
"""

from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from sluice.airflow.monitor import SlashRedirect, create_app, default_pipelines_dir

_ROOT = Path(__file__).resolve().parents[1]


class SluiceMonitorPlugin(AirflowPlugin):
    name = "sluice_monitor"
    fastapi_apps = [  # noqa: RUF012 (Airflow's plugin interface)
        {
            "app": create_app(default_pipelines_dir(_ROOT)),
            "url_prefix": "/sluice",
            "name": "Sluice checkpoint monitor",
        }
    ]
    fastapi_root_middlewares = [  # noqa: RUF012
        {"middleware": SlashRedirect, "args": [], "kwargs": {"prefix": "/sluice"},
         "name": "Sluice monitor: /sluice to /sluice/"},
    ]  # fmt: skip
    external_views = [  # noqa: RUF012
        {
            "name": "Sluice pipelines",
            "href": "sluice/",
            "destination": "nav",
            "category": "browse",
            "url_route": "sluice",
        },
        {
            "name": "Checkpoints",
            "href": "sluice/pipelines/{DAG_ID}",
            "destination": "dag",
            "url_route": "sluice_checkpoints",
        },
    ]
