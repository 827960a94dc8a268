"""The checkpoint monitor, without Airflow (docs/monitor.md): one job per module, each importing
only those listed before it.

* :mod:`~sluice.monitor.text`: messages without the server's paths;
* :mod:`~sluice.monitor.charts`: the charts' geometry (data; the markup is the templates');
* :mod:`~sluice.monitor.catalog`: the pipelines of a folder, each spec loaded once per version;
* :mod:`~sluice.monitor.inputs`: the form inputs, from the run request's declaration;
* :mod:`~sluice.monitor.view`: what a pipeline's page shows, read from its checkpoint store
  (:class:`PipelineView`), and its health;
* :mod:`~sluice.monitor.actions`: what the action forms offer, check and confirm;
* :mod:`~sluice.monitor.pages`: the pages, rendered from templates/monitor/.

:mod:`sluice.airflow.monitor` serves them from Airflow's API server.
"""

from sluice.monitor.pages import render_error, render_overview, render_pipeline
from sluice.monitor.view import Health, HistoryCache, PipelineView, RequestedRun, pipeline_view

__all__ = [
    "Health",
    "HistoryCache",
    "PipelineView",
    "RequestedRun",
    "pipeline_view",
    "render_error",
    "render_overview",
    "render_pipeline",
]
