"""spark-submit entry point of the ``process`` task: one attempt of one planned epoch.

spark-submit jobs/run_epoch.py --spec include/pipelines/x.yaml --epoch 3 [--run-id ID]
"""

import sys

from sluice.jobs import process_job

if __name__ == "__main__":
    sys.exit(process_job())
