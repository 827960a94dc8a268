"""One Airflow DAG per pipeline spec in include/pipelines/ (or $SLUICE_PIPELINES_DIR); a spec
that cannot run is a placeholder DAG saying why, and hides no other.

Thin by design: the factory in ``sluice.airflow`` builds every DAG; see docs/airflow.md.
"""

import os
from pathlib import Path

from sluice.airflow import PIPELINES_DIR_ENV, build_dags

_ROOT = Path(__file__).resolve().parents[1]
_PIPELINES = os.environ.get(PIPELINES_DIR_ENV) or _ROOT / "include" / "pipelines"

globals().update(build_dags(_PIPELINES, job_path=_ROOT / "jobs" / "run_epoch.py"))
